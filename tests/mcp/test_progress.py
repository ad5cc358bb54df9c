"""An MCP tool's progress notices in runs: ``tool_progress`` events, live, then the run finishes with the result."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentfsm import Agent, ChatMessage, ChatRole, ToolCall
from agentfsm.events import Event, RunEnded, ToolEnded, ToolProgress, ToolStarted
from agentfsm.mcp import MCPToolset
from tests.mcp.conftest import HttpServer, stdio_info

QUESTION = [ChatMessage.from_user("Download the file in three parts.")]

PARTS = [(1.0, 3.0, "part 1 of 3"), (2.0, 3.0, "part 2 of 3"), (3.0, 3.0, "part 3 of 3")]


class Downloader:
    """A chat generator that asks for ``call``, then answers with what the tool returned."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        last = messages[-1]
        if last.role is ChatRole.USER:
            return {"replies": [ChatMessage.from_assistant(tool_calls=[self.call])]}
        assert last.tool_call_result is not None
        parts = last.tool_call_result.result
        text = " ".join(getattr(p, "text", str(p)) for p in (parts if isinstance(parts, list) else [parts]))
        return {"replies": [ChatMessage.from_assistant(f"Done: {text}")]}

    async def run_async(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self.run(messages, tools, **kwargs)


DOWNLOAD = ToolCall("download", {"parts": 3}, id="d1")


def reports(events: list[Event]) -> list[tuple[float, float | None, str | None]]:
    return [(e.progress, e.total, e.message) for e in events if isinstance(e, ToolProgress)]


def tool_kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events if isinstance(e, ToolStarted | ToolProgress | ToolEnded)]


def check_finished(events: list[Event]) -> None:
    assert tool_kinds(events) == ["tool_started", "tool_progress", "tool_progress", "tool_progress", "tool_ended"]
    assert reports(events) == PARTS
    assert all(e.call == "d1" and e.tool == "download" for e in events if isinstance(e, ToolProgress))
    last = events[-1]
    assert isinstance(last, RunEnded) and last.result is not None
    assert last.result["last_message"].text == "Done: downloaded 3 parts"


def test_a_stdio_tools_progress_notices_are_events_of_the_run_and_the_connections_callback_still_gets_them() -> None:
    told: list[tuple[Any, ...]] = []
    toolset = MCPToolset(stdio_info(), tool_names=["download"], progress_callback=lambda *notice: told.append(notice))
    with Agent(chat_generator=Downloader(DOWNLOAD), tools=toolset) as agent:
        events = list(agent.iter(QUESTION))
    check_finished(events)
    assert told == [("download", *part) for part in PARTS]


def test_iter_yields_an_mcp_calls_progress_while_the_server_still_runs_it(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    call = ToolCall("slow", {"seconds": 0.5, "marker": str(marker)}, id="s1")
    with Agent(chat_generator=Downloader(call), tools=MCPToolset(stdio_info(), tool_names=["slow"])) as agent:
        while_running = []
        for event in agent.iter(QUESTION):
            if isinstance(event, ToolProgress):
                while_running.append((event.progress, event.total, event.message, marker.read_text()))
    assert while_running == [(0.5, 1.0, "half way", "started")], "seen before the server finished the call"
    assert isinstance(event, RunEnded) and event.result is not None
    assert event.result["last_message"].text == "Done: slept"


async def test_a_streamable_http_tools_progress_reaches_an_async_handler_and_iter_async(
    http_server: HttpServer,
) -> None:
    handled: list[Event] = []

    async def on_event(event: Event) -> None:
        await asyncio.sleep(0)
        handled.append(event)

    async with Agent(chat_generator=Downloader(DOWNLOAD), tools=MCPToolset(http_server.info())) as agent:
        result = await agent.run_async(QUESTION, on_event=on_event)
        iterated = [event async for event in agent.iter_async(QUESTION)]
    assert result["last_message"].text == "Done: downloaded 3 parts"
    check_finished(handled)
    check_finished(iterated)


def test_an_mcp_call_in_a_run_nobody_listens_to_finishes_as_before() -> None:
    with Agent(chat_generator=Downloader(DOWNLOAD), tools=MCPToolset(stdio_info(), tool_names=["download"])) as agent:
        assert agent.run(QUESTION)["last_message"].text == "Done: downloaded 3 parts"
