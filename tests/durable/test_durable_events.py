"""The events of a durable run: the same stream as in process, from the workflow that drives it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS

from agentfsm import Agent, ChatMessage, ChatRole
from agentfsm.durable import DurableAgent, launch
from agentfsm.events import Event, PhaseChanged, RunEnded, ToolEnded
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
