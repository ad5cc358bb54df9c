"""Cancellation: from another thread (``RunHandle``) or by cancelling the task of ``run_async``; the run resumes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, BreakpointException, ChatMessage, Phase, RunCancelled, RunHandle, State, hook, tool
from agentfsm._core.phases import PHASE_WORK, Work
from agentfsm.errors import ConfigurationError, ConfigurationTypeError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import ToolExecutionDecision
from agentfsm.pauses import Cancelled, OutcomeUnknown
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import SIDE_EFFECTS, add, call, calls

USER = [ChatMessage.from_user("go")]
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = [calls(call("add", "c1", a=1, b=2)), calls(call("add", "c2", a=3, b=4)), "done"]
AFTER_RUN: list[str] = []

STARTED, RELEASE = threading.Event(), threading.Event()


@tool
def blocking(label: str) -> str:
    """Say it started, then wait for the test to let it finish."""
    STARTED.set()
    RELEASE.wait(30)
    SIDE_EFFECTS.append(f"blocking({label})")
    return label


@hook
def note_end(state: State) -> None:
    """Count the ends of runs."""
    AFTER_RUN.append("after_run")


def agent(script: list[Any] = SCRIPT, position: int = 0, **kwargs: Any) -> Agent:
    model = ScriptedChatGenerator(script, position=position)
    return Agent(chat_generator=model, tools=[add, blocking], hooks={"after_run": [note_end]}, **kwargs)


def test_a_handle_cancelled_from_another_thread_stops_the_run_at_its_next_transition() -> None:
    SIDE_EFFECTS.clear()
    AFTER_RUN.clear()
    STARTED.clear()
    RELEASE.clear()
    handle = RunHandle()
    script = [calls(call("blocking", "b1", label="x")), calls(call("add", "c2", a=3, b=4)), "done"]
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            agent(script).run(USER, cancel=handle)
        except RunCancelled as exc:
            outcome["stopped"] = exc

    runner = threading.Thread(target=run)
    runner.start()
    assert STARTED.wait(30)
    handle.cancel()  # while the tool runs: it finishes, and the run stops before the next model call
    RELEASE.set()
    runner.join(30)
    stopped = outcome["stopped"]
    snapshot = stopped.snapshot
    assert handle.snapshot is snapshot and isinstance(snapshot.pause, Cancelled)
    assert snapshot.phase is Phase.EXIT_CHECK and snapshot.step == 1
    assert [r["trigger"] for r in snapshot.trace][-1] == "tools_done", "the finished call is kept"
    assert AFTER_RUN == [], "the run is not over"
    result = agent(script, position=1).run(snapshot=snapshot)
    assert result["last_message"].text == "done" and result["step_count"] == 3
    assert SIDE_EFFECTS == ["blocking(x)", "add(3,4)"], "nothing ran twice"
    assert AFTER_RUN == ["after_run"], "after_run hooks run once, when the run ends"


def test_a_handle_cancelled_before_the_run_starts_stops_it_before_the_model_is_called() -> None:
    handle = RunHandle()
    handle.cancel()
    model = ScriptedChatGenerator(SCRIPT)
    with pytest.raises(RunCancelled, match="Resume it with") as stopped:
        Agent(chat_generator=model, tools=[add]).run(USER, cancel=handle)
    assert model.calls == [] and stopped.value.snapshot.phase is Phase.LLM_CALL
    assert Agent(chat_generator=ScriptedChatGenerator(SCRIPT), tools=[add]).run(snapshot=stopped.value.snapshot)[
        "last_message"
    ].text == ("done")


class Hanging:
    """A model whose second call never answers (until its task is cancelled)."""

    def __init__(self) -> None:
        self.calls = 0
        self.waiting = asyncio.Event()

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError("async only")

    async def run_async(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 2:
            self.waiting.set()
            await asyncio.Event().wait()
        return {"replies": [SCRIPT[0] if self.calls == 1 else ChatMessage.from_assistant("done")]}


async def test_cancelling_the_task_pauses_the_run_where_it_stood(tmp_path: Path) -> None:
    AFTER_RUN.clear()
    model = Hanging()
    store = SQLiteSnapshotStore(tmp_path / "runs.db")
    handle = RunHandle()
    hung = Agent(chat_generator=model, tools=[add], hooks={"after_run": [note_end]}, snapshot_store=store)
    task = asyncio.create_task(hung.run_async(USER, cancel=handle))
    await model.waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    snapshot = handle.snapshot
    assert snapshot is not None and isinstance(snapshot.pause, Cancelled)
    in_the_call = PHASE_WORK[Phase.LLM_CALL].index(Work.CALL_MODEL)
    assert (snapshot.phase, snapshot.stage, snapshot.step) == (Phase.LLM_CALL, in_the_call, 1), "in the model call"
    assert store.latest(snapshot.run_id).seq == snapshot.seq, "kept in the store, as its head"
    assert AFTER_RUN == []
    result = await hung.run_async(snapshot=snapshot)
    assert result["last_message"].text == "done" and model.calls == 3, "the cancelled model call is made again"
    assert AFTER_RUN == ["after_run"]
    store.close()


HOLD = threading.Event()


@tool
def waits(label: str) -> str:
    """Wait until the test lets it go (a sync tool runs in a worker thread under run_async)."""
    SIDE_EFFECTS.append(f"waits({label})")
    HOLD.wait(30)
    return label


async def test_a_tool_call_under_way_when_the_task_is_cancelled_is_in_doubt() -> None:
    SIDE_EFFECTS.clear()
    HOLD.clear()
    script = [calls(call("add", "c1", a=1, b=2), call("waits", "w1", label="x")), "done"]
    handle = RunHandle()
    cancelling = Agent(chat_generator=ScriptedChatGenerator(script), tools=[add, waits], tool_concurrency=1)
    task = asyncio.create_task(cancelling.run_async(USER, cancel=handle))
    for _ in range(6000):  # until the call is under way (a minute at most)
        if "waits(x)" in SIDE_EFFECTS or task.done():
            break
        await asyncio.sleep(0.01)
    assert "waits(x)" in SIDE_EFFECTS, "the call never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    HOLD.set()  # the worker thread cannot be stopped: the run stopped waiting for it
    snapshot = handle.snapshot
    assert snapshot is not None and snapshot.phase is Phase.TOOL_RUN
    assert list(snapshot.completed_tool_results) == ["c1"], "the finished call is kept"
    assert snapshot.outcome_unknown_calls() == {"w1": "waits"}
    # Resumed: the call that may have run waits for a decision (its tool is not idempotent).
    resumed = Agent(chat_generator=ScriptedChatGenerator(script, position=1), tools=[add, waits])
    with pytest.raises(BreakpointException) as in_doubt:
        await resumed.run_async(snapshot=snapshot)
    assert isinstance(in_doubt.value.snapshot.pause, OutcomeUnknown)
    settled = ToolExecutionDecision("waits", False, "w1", feedback="gave up")
    result = await resumed.run_async(snapshot=in_doubt.value.snapshot, decisions=[settled])
    assert result["last_message"].text == "done"
    assert SIDE_EFFECTS == ["add(1,2)", "waits(x)"], "the finished call did not run again"


def test_a_cancelled_run_resumes_in_another_process(tmp_path: Path) -> None:
    handle = RunHandle()
    handle.cancel()
    with pytest.raises(RunCancelled) as stopped:
        agent().run(USER, cancel=handle)
    stopped.value.snapshot.to_file(tmp_path / "snap.json")
    (tmp_path / "agent.json").write_text(json.dumps(agent().to_dict()))
    program = """
import json, sys
from agentfsm import Agent, AgentSnapshot
agent = Agent.from_dict(json.load(open(sys.argv[1])), allowed_modules=["tests"])
result = agent.run(snapshot=AgentSnapshot.from_file(sys.argv[2]))
print(json.dumps({"text": result["last_message"].text, "steps": result["step_count"]}))
"""
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "agent.json"), str(tmp_path / "snap.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"text": "done", "steps": 3}


def test_cancel_must_be_a_run_handle() -> None:
    with pytest.raises(ConfigurationTypeError, match="RunHandle"):
        agent().run(USER, cancel=threading.Event())  # type: ignore[arg-type]


def test_the_cancel_edges_are_drawn_once() -> None:
    assert "ANY_ACTIVE --> PAUSED : cancel [cancellation requested]" in str(agent().draw())


async def test_a_cancelled_task_ends_its_event_stream_with_paused() -> None:
    model = Hanging()
    events: list[Any] = []
    hung = Agent(chat_generator=model, tools=[add])
    task = asyncio.create_task(hung.run_async(USER, on_event=events.append))
    await model.waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    *_, last_move, paused = events
    assert (last_move.kind, last_move.trigger, last_move.dest) == ("transition", "cancel", Phase.PAUSED)
    assert (paused.kind, paused.reason) == ("paused", "cancelled")
    assert isinstance(paused.snapshot.pause, Cancelled)


def test_a_cancelled_handle_is_refused_for_the_resumed_run_and_a_new_one_resumes_it() -> None:
    handle = RunHandle()
    handle.cancel()
    model = ScriptedChatGenerator(SCRIPT)
    cancelling = Agent(chat_generator=model, tools=[add])
    with pytest.raises(RunCancelled) as stopped:
        cancelling.run(USER, cancel=handle)
    snapshot = stopped.value.snapshot
    with pytest.raises(ConfigurationError, match="RunHandle") as refused:
        cancelling.run(snapshot=snapshot, cancel=handle)
    assert "cancelled" in str(refused.value) and model.calls == [], "refused before the model is called"
    with pytest.raises(ConfigurationError, match="RunHandle"):
        cancelling.run(USER, cancel=handle)  # it stopped a run already
    assert cancelling.run(snapshot=snapshot, cancel=RunHandle())["last_message"].text == "done"
