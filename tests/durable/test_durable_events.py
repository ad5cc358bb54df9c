"""The events of a durable run: the same stream as in process, from the workflow that drives it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS

from agentfsm import Agent, ChatMessage, ChatRole, tool
from agentfsm.durable import DurableAgent, launch
from agentfsm.events import Event, PhaseChanged, RunEnded, ToolEnded, ToolProgress, ToolStarted
from agentfsm.tools import ProgressReporter
from tests.helpers import add, call, calls

SEEN: list[Event] = []


class AddOnce:
    """Asks for ``add`` after the user's message, answers after the tool's result (from the conversation alone)."""

    def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, list[ChatMessage]]:
        if messages[-1].role is ChatRole.USER:
            return {"replies": [calls(call("add", "c1", a=1, b=2))]}
        return {"replies": [ChatMessage.from_assistant("done")]}


def agent() -> Agent:
    return Agent(chat_generator=AddOnce(), tools=[add])


watched = DurableAgent(agent(), "watched", on_event=SEEN.append)


@tool
def index(files: int, report_progress: ProgressReporter) -> str:
    """Index files, reporting each."""
    for done in range(1, files + 1):
        report_progress(done, files, f"file {done}")
    return f"indexed {files}"


class IndexTwice:
    """Asks for two ``index`` calls after the user's message, answers with their results."""

    def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, list[ChatMessage]]:
        if messages[-1].role is ChatRole.USER:
            return {"replies": [calls(call("index", "i1", files=2), call("index", "i2", files=3))]}
        results = [str(m.tool_call_result.result) for m in messages if m.tool_call_result is not None]
        return {"replies": [ChatMessage.from_assistant(", ".join(results))]}


def indexing_agent() -> Agent:
    return Agent(chat_generator=IndexTwice(), tools=[index])


watched_indexing = DurableAgent(indexing_agent(), "watched-indexing", on_event=SEEN.append)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[str]:
    """DBOS launched in this process on a fresh SQLite system database."""
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest")
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


def comparable(events: list[Event]) -> list[tuple[Any, ...]]:
    return [
        tuple((k, v) for k, v in e.to_dict().items() if k not in ("at", "duration_us", "run_id", "result", "agent"))
        for e in events
    ]


def test_a_durable_run_gives_the_events_of_the_same_run_in_process(launched: str) -> None:
    SEEN.clear()
    result = watched.run([ChatMessage.from_user("go")], run_id="e1")
    in_process: list[Event] = []
    agent().run([ChatMessage.from_user("go")], on_event=in_process.append)
    assert comparable(SEEN) == comparable(in_process)
    assert {e.run_id for e in SEEN} == {"e1"} and SEEN[0].agent == "watched"  # type: ignore[union-attr]
    phases = [(e.source, e.dest, e.trigger) for e in SEEN if isinstance(e, PhaseChanged)]
    assert phases == [(r.source.value, r.dest.value, r.trigger) for r in result["trace"]]
    [ended] = [e for e in SEEN if isinstance(e, ToolEnded)]
    assert ended.result == 3
    last = SEEN[-1]
    assert isinstance(last, RunEnded) and last.exit_reason == "text"


def test_a_durable_run_gives_its_tools_progress_between_each_calls_start_and_end(launched: str) -> None:
    SEEN.clear()
    result = watched_indexing.run([ChatMessage.from_user("go")], run_id="p1")
    assert result["last_message"].text == "indexed 2, indexed 3"
    # The calls' steps run in parallel; each call's start goes out with its end once its step ran
    # here, its progress between them.
    tool_events = [(e.kind, e.call) for e in SEEN if isinstance(e, ToolStarted | ToolProgress | ToolEnded)]
    i1 = [("tool_started", "i1"), *[("tool_progress", "i1")] * 2, ("tool_ended", "i1")]
    i2 = [("tool_started", "i2"), *[("tool_progress", "i2")] * 3, ("tool_ended", "i2")]
    assert tool_events in (i1 + i2, i2 + i1)
    in_process: list[Event] = []
    indexing_agent().run([ChatMessage.from_user("go")], on_event=in_process.append)

    def reports(events: list[Event]) -> list[tuple[Any, ...]]:
        return sorted((e.call, e.progress, e.total, e.message) for e in events if isinstance(e, ToolProgress))

    assert reports(SEEN) == reports(in_process)
    assert reports(SEEN) == [
        ("i1", 1.0, 2.0, "file 1"),
        ("i1", 2.0, 2.0, "file 2"),
        ("i2", 1.0, 3.0, "file 1"),
        ("i2", 2.0, 3.0, "file 2"),
        ("i2", 3.0, 3.0, "file 3"),
    ]
