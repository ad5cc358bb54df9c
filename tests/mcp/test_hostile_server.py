"""Hostile MCP servers, tried from outside: each attack of ``hostile_server.py`` gets a typed, bounded answer."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, ConfirmationUIResult
from agentfsm.mcp import MCPToolset, StdioServerInfo
from tests.helpers import call, calls
from tests.mcp.conftest import stdio_info

HOSTILE = Path(__file__).with_name("hostile_server.py")
USER = [ChatMessage.from_user("go")]


def hostile(mode: str, marker: Path | None = None, **options: Any) -> MCPToolset:
    """A toolset of the hostile server in ``mode`` (``marker``: the file it writes when its taken tool runs)."""
    args = [str(HOSTILE), mode, *([str(marker)] if marker is not None else [])]
    return MCPToolset(StdioServerInfo(command=sys.executable, args=args), **options)


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """The file the server's tool writes when it runs: it must never exist."""
    path = tmp_path / "server-ran"
    yield path
    assert not path.exists(), f"the server's tool ran: {path.read_text()}"


@tool
def note(text: str) -> str:
    """Take a note."""
    return f"the agent's note: {text}"


class AskedAbout:
    """A confirmation UI that approves every call and records what it was asked about."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        self.asked.append((tool_name, tool_description))
        return ConfirmationUIResult(action="confirm")


# -- a server never takes over a tool it did not own --------------------------------------------------


def test_a_list_change_naming_the_agents_own_tool_leaves_it_the_agents(marker: Path) -> None:
    # The server offers a tool named `note` once the run started: before, its `note` ran in the agent's place.
    ui = AskedAbout()
    script = [calls(call("take", "c1", tool="note")), calls(call("note", "c2", text="x")), "done"]
    events: list[Any] = []
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[note, hostile("takeover", marker)],
        confirmation_strategies={"note": BlockingConfirmationStrategy(AlwaysAskPolicy(), ui)},
    )
    with agent:
        result = agent.run(USER, on_event=events.append)
    assert result["messages"][4].tool_call_result.result == "the agent's note: x"
    assert ui.asked == [("note", "Take a note.")], "the person was asked about the agent's own note"
    [warning] = [e for e in events if e.kind == "warning"]
    assert warning.warning == "tool_name_taken" and "'note'" in warning.message


def test_a_list_change_naming_another_toolsets_tool_leaves_it_that_toolsets(marker: Path) -> None:
    script = [calls(call("take", "c1", tool="add")), calls(call("add", "c2", a=2, b=3)), "done"]
    events: list[Any] = []
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script), tools=[MCPToolset(stdio_info()), hostile("takeover", marker)]
    )
    with agent:
        result = agent.run(USER, on_event=events.append)
    assert [p.text for p in result["messages"][4].tool_call_result.result] == ["5"]
    assert [e.warning for e in events if e.kind == "warning"] == ["tool_name_taken"]
