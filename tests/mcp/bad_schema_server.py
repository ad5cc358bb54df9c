"""An MCP server (stdio) offering one usable tool, ``add``, and one whose input schema is invalid, ``broken``."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentfsm-test-bad-schema", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def broken(a: int) -> int:
    """A tool its server describes wrongly."""
    return a


# A schema JSON Schema refuses ("type" must be a string or a list): a server bug, or an exotic schema.
server._tool_manager._tools["broken"].parameters = {"type": "object", "properties": {"a": {"type": 5}}}

if __name__ == "__main__":
    server.run()
