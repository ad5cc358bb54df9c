"""MCP tools: an agent uses the tools of an MCP server started as a child process (no API key, no network).

Run it with ``python examples/mcp_tools.py``. The same file is the server: started with
``--serve`` it serves two tools over stdio, written with the ``mcp`` SDK's ``MCPServer``.
"""

from __future__ import annotations

import os
import sys

from agentfsm import Agent, ChatMessage, ToolCall
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.mcp import MCPToolset, StdioServerInfo


def serve() -> None:
    """The MCP server: a notebook that remembers notes for as long as its session lasts."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("notebook", log_level="WARNING")
    notes: list[str] = []

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    def write_note(text: str) -> str:
        """Write a note."""
        notes.append(text)
        return f"noted ({len(notes)} notes)"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def read_notes() -> list[str]:
        """Read every note."""
        return notes

    server.run()


def main() -> None:
    """Two runs of one agent, one MCP session: a note written in the first is read in the second."""
    # The server starts with a minimal environment (PATH, HOME ...): give it this one's module path too.
    server = StdioServerInfo(
        command=sys.executable, args=[__file__, "--serve"], env={"PYTHONPATH": os.pathsep.join(sys.path)}
    )
    toolset = MCPToolset(server_info=server, invocation_timeout=60)
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("write_note", {"text": "buy bread"})]),
            "Noted.",
            ChatMessage.from_assistant(tool_calls=[ToolCall("read_notes", {})]),
            "Your notes: buy bread.",
        ]
    )
    with Agent(chat_generator=model, tools=toolset) as agent:
        print("tools:", [(t.name, "idempotent" if t.idempotent else "not idempotent") for t in toolset])
        for question in ["Remember to buy bread.", "What are my notes?"]:
            result = agent.run([ChatMessage.from_user(question)])  # one session serves both runs
            print("tool said:", result["messages"][-2].tool_call_result.result[0].text)
            print("agent:", result["last_message"].text)
    print("session:", toolset.connection.state.value)


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main()
