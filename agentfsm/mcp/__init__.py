"""MCP tools: the tools of Model Context Protocol servers, over the official ``mcp`` SDK (2.x).

Needs the ``mcp`` extra (``pip install 'agentfsm[mcp]'``). ``MCPToolset`` takes every tool of a
server (or those named), ``MCPTool`` one; ``StdioServerInfo`` starts a server as a child process,
``StreamableHttpServerInfo`` (or, for older servers, ``SSEServerInfo``) reaches one by URL. See ``docs/mcp.md``.
"""

from agentfsm import _extras
from agentfsm.errors import (
    MCPConnectionError,
    MCPConnectionLostError,
    MCPServerError,
    MCPTimeoutError,
    MCPToolError,
    MCPToolNotFoundError,
)

with _extras.extra_needed("agentfsm.mcp", "mcp"):
    from agentfsm.mcp.annotations import AskDestructiveMCPToolsPolicy
    from agentfsm.mcp.connection import MCPConnection
    from agentfsm.mcp.connection_states import ConnectionState
    from agentfsm.mcp.server_info import MCPServerInfo, SSEServerInfo, StdioServerInfo, StreamableHttpServerInfo
    from agentfsm.mcp.tool import MCPTool
    from agentfsm.mcp.toolset import MCPToolset

__all__ = [
    "AskDestructiveMCPToolsPolicy",
    "ConnectionState",
    "MCPConnection",
    "MCPConnectionError",
    "MCPConnectionLostError",
    "MCPServerError",
    "MCPServerInfo",
    "MCPTimeoutError",
    "MCPTool",
    "MCPToolError",
    "MCPToolNotFoundError",
    "MCPToolset",
    "SSEServerInfo",
    "StdioServerInfo",
    "StreamableHttpServerInfo",
]
