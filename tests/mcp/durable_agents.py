"""A durable agent with an MCP tool, importable by name so that worker processes run it."""

from __future__ import annotations

import os
from typing import Any

from agentfsm import Agent, ChatMessage, ToolCall
from agentfsm.durable import DurableAgent
from agentfsm.mcp import MCPToolset
from tests.mcp.conftest import stdio_info

#: The marker file of the ``slow`` call (see tests/mcp/server.py), named by the test.
MARKER = "AGENTFSM_TEST_MCP_MARKER"
#: The file whose creation ends the ``slow`` call (before its seconds are up), named by the test.
RELEASE = "AGENTFSM_TEST_MCP_RELEASE"


class SleepModel:
    """Asks for one slow call, then reports what it returned (from the conversation alone, as a real model does)."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        last = messages[-1]
        if last.tool_call_result is not None:
            return {"replies": [ChatMessage.from_assistant(f"done: {last.tool_call_result.result[0].text}")]}
        arguments = {"seconds": float(last.text), "marker": os.environ[MARKER], "release": os.environ.get(RELEASE, "")}
        call = ToolCall("slow", arguments, id="sleep")
        return {"replies": [ChatMessage.from_assistant(tool_calls=[call])]}


#: ``slow`` has no annotations; it is declared idempotent here, so a call in doubt runs again.
sleeper = DurableAgent(
    Agent(
        chat_generator=SleepModel(),
        tools=MCPToolset(stdio_info(), tool_names=["slow"], idempotent_overrides={"slow": True}),
    ),
    "mcp_sleeper",
)
