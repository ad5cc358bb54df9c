"""Settling calls in doubt in code: a tool's reconcile function, each answer, its failures, and real crashes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, AgentSnapshot, Breakpoint, ChatMessage, Tool, tool
from agentfsm.errors import BreakpointException, ConfigurationTypeError
from agentfsm.events import CallReconciled, Event
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import ToolExecutionDecision
from agentfsm.machine import Phase, Work
from agentfsm.pauses import OutcomeUnknown
from agentfsm.reconcile import Happened, InDoubtCall, NotHappened, Reconciled, Unknown
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.tools.tool import idempotency_key, tool_from_dict
from tests import reconciling
from tests.helpers import call, calls, run_cli

ROOT = Path(__file__).resolve().parents[1]
USER = [ChatMessage.from_user("go")]

#: The charges the ``charge`` tool made in this process, and what its reconcile function is asked.
CHARGED: list[int] = []
ASKED: list[InDoubtCall] = []
#: What the reconcile function answers next (a value, or an exception to raise).
ANSWER: list[Any] = []


def look_up(call: InDoubtCall) -> Reconciled:
    """Answer with ``ANSWER``'s value (or raise it)."""
    ASKED.append(call)
    answer = ANSWER[0]
    if isinstance(answer, BaseException):
        raise answer
    return answer  # type: ignore[no-any-return]


@tool(reconcile=look_up)
def charge(amount: int, idempotency_key: str) -> str:
    """Charge a card (not idempotent)."""
    CHARGED.append(amount)
    return f"charged {amount}"


@tool
def charge_unchecked(amount: int) -> str:
    """Charge a card; nothing can look a charge up."""
    CHARGED.append(amount)
    return f"charged {amount}"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    CHARGED.clear()
    ASKED.clear()
    ANSWER.clear()


def _agent(tool: Tool = charge, position: int = 0) -> Agent:
    script = [calls(call(tool.name, "c1", amount=5)), "done"]
    return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=[tool])


def _in_doubt(tool: Tool = charge) -> AgentSnapshot:
    """The run as a crash during its call leaves it: in TOOL_RUN, the call started, its result never recorded."""
    with pytest.raises(BreakpointException) as paused:
        _agent(tool).run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    return paused.value.snapshot.model_copy(update={"break_point": None, "started_tool_calls": ["c1"]})


def _resumed(answer: Any, **options: Any) -> tuple[dict[str, Any], list[Event]]:
    ANSWER.append(answer)
    events: list[Event] = []
    result = _agent(position=1).run(snapshot=_in_doubt(), on_event=events.append, **options)
    return result, events


def _reconciled(events: list[Event]) -> list[tuple[str, str | None]]:
    return [(e.answer, e.reason) for e in events if isinstance(e, CallReconciled)]


def test_happened_settles_the_call_with_its_result_and_the_tool_does_not_run_again() -> None:
    result, events = _resumed(Happened("charged 5 (found)"))
    assert CHARGED == []
    assert result["messages"][-2].tool_call_result.result == "charged 5 (found)"
    assert result["last_message"].text == "done"
    triggers = [r.trigger for r in result["trace"]]
    assert triggers[3:6] == ["resume", "reconciled", "tools_done"]
    assert _reconciled(events) == [("happened", None)]
    moves = [(e.trigger, e.dest) for e in events if e.kind == "call_transition" and e.call == "c1"]
    assert ("settle", "done") in moves


def test_not_happened_runs_the_call_once() -> None:
    result, events = _resumed(NotHappened())
    assert CHARGED == [5]
    assert result["messages"][-2].tool_call_result.result == "charged 5"
    assert _reconciled(events) == [("not_happened", None)]
    assert ("rerun", "ready") in [(e.trigger, e.dest) for e in events if e.kind == "call_transition"]


def test_the_function_is_asked_about_the_call_with_the_key_its_tool_is_given() -> None:
    snapshot = _in_doubt()
    ANSWER.append(NotHappened())
    _agent(position=1).run(snapshot=snapshot)
    [asked] = ASKED
    key = idempotency_key(snapshot.run_id, 1, "c1")
    assert asked == InDoubtCall("charge", {"amount": 5}, "c1", snapshot.run_id, 1, key)


def test_unknown_pauses_for_a_person_and_the_pause_says_why() -> None:
    ANSWER.append(Unknown("the bank does not answer"))
    with pytest.raises(BreakpointException, match=r"outcome is unknown.*c1: the bank does not answer") as paused:
        _agent(position=1).run(snapshot=_in_doubt())
    waiting = paused.value.snapshot
    assert waiting.pause == OutcomeUnknown(["c1"], ["charge"], {"c1": "the bank does not answer"})
    assert AgentSnapshot.from_bytes(waiting.to_bytes()).pause == waiting.pause
    assert CHARGED == [] and len(ASKED) == 1
    # A person's decision settles it; the reconcile function is not asked again.
    decision = ToolExecutionDecision("charge", False, "c1", feedback="charged 5 (by hand)")
    result = _agent(position=1).run(snapshot=waiting, decisions=[decision])
    assert result["messages"][-2].tool_call_result.result == "charged 5 (by hand)"
    assert CHARGED == [] and len(ASKED) == 1


def async_answer() -> Any:
    async def unawaited() -> Reconciled:
        return NotHappened()

    return unawaited()


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (ConnectionError("bank down"), "raised ConnectionError: bank down"),
        ("yes", "returned 'yes', not Happened"),
        (Happened(object()), "gave a result that has no JSON form"),
        (None, "returned None"),
        ("async", "is async, and this run cannot await it"),
    ],
)
def test_a_function_that_fails_or_answers_wrong_leaves_the_call_in_doubt_saying_why(answer: Any, error: str) -> None:
    events: list[Event] = []
    ANSWER.append(async_answer() if answer == "async" else answer)
    with pytest.raises(BreakpointException) as paused:
        _agent(position=1).run(snapshot=_in_doubt(), on_event=events.append)
    pause = paused.value.snapshot.pause
    assert isinstance(pause, OutcomeUnknown) and pause.tool_call_ids == ["c1"]
    assert error in pause.notes["c1"] and "look_up" in pause.notes["c1"]
    assert CHARGED == []
    [(kind, reason)] = _reconciled(events)
    assert kind == "unknown" and reason == pause.notes["c1"]


async def find_async(call: InDoubtCall) -> Reconciled:
    """An async reconcile function."""
    await asyncio.sleep(0)
    return Happened("charged 5 (found)")


@tool(reconcile=find_async)
def charge_async(amount: int) -> str:
    """Charge a card (not idempotent)."""
    CHARGED.append(amount)
    return f"charged {amount}"


def test_an_async_function_is_awaited_under_run_async_and_refused_under_run() -> None:
    crashed = _in_doubt(charge_async)
    result = asyncio.run(_agent(charge_async, 1).run_async(snapshot=crashed))
    assert result["messages"][-2].tool_call_result.result == "charged 5 (found)"
    with pytest.raises(BreakpointException) as paused:
        _agent(charge_async, 1).run(snapshot=crashed)
    pause = paused.value.snapshot.pause
    assert isinstance(pause, OutcomeUnknown) and "run_async" in pause.notes["c1"]
    assert CHARGED == []


def test_a_sync_function_is_asked_under_run_async_too() -> None:
    ANSWER.append(Happened("charged 5 (found)"))
    result = asyncio.run(_agent(position=1).run_async(snapshot=_in_doubt()))
    assert result["messages"][-2].tool_call_result.result == "charged 5 (found)"
    assert CHARGED == []


def test_without_a_reconcile_function_a_call_in_doubt_waits_as_before_and_the_run_pays_nothing() -> None:
    with pytest.raises(BreakpointException) as paused:
        _agent(charge_unchecked, 1).run(snapshot=_in_doubt(charge_unchecked))
    assert paused.value.snapshot.break_point == {
        "type": "outcome_unknown",
        "tool_call_ids": ["c1"],
        "tool_names": ["charge_unchecked"],
    }
    # A run that recovers nothing never reads the slice's facts, nor plans its work.
    run = _agent().new_run(_request())
    assert {("calls_to_reconcile", False), ("calls_reconciled", False)} <= run.constants
    assert Work.RECONCILE not in [step[1] for step in run._plan[Phase.TOOL_RUN] if step is not None]


def _request() -> Any:
    from agentfsm.agent import RunRequest

    return RunRequest(messages=list(USER))


def test_a_reconcile_function_serializes_with_its_tool_and_bad_ones_are_refused() -> None:
    data = charge.to_dict()
    assert data["data"]["reconcile"] == "tests.test_reconcile.look_up"
    assert tool_from_dict(data, allowed_modules=["tests"]).reconcile is look_up
    assert "reconcile" not in charge_unchecked.to_dict()["data"]
    with pytest.raises(ConfigurationTypeError, match="reconcile takes a function of an InDoubtCall"):
        Tool("t", "", {"type": "object"}, lambda: None, reconcile="look_up")  # type: ignore[arg-type]
    assert _agent().fingerprint != _agent(Tool("charge", "", charge.parameters, charge.function)).fingerprint


# -- a process killed during a call, for real ---------------------------------------------------------------

PAY_AND_DIE = """
import sys
from agentfsm import ChatMessage
from agentfsm.stores import SQLiteSnapshotStore
from tests.reconciling import agent

agent.snapshot_store = SQLiteSnapshotStore(sys.argv[1], durable=True)
agent.run([ChatMessage.from_user("pay 5")])
"""


def _killed_during_the_call(tmp_path: Path, die: str) -> tuple[SQLiteSnapshotStore, AgentSnapshot, dict[str, str]]:
    """Run the payment agent in a process that ``kill -9``s itself during the call (``before``/``after`` the charge)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), reconciling.LEDGER: str(tmp_path / "ledger")}
    db = tmp_path / "runs.db"
    done = subprocess.run(
        [sys.executable, "-c", PAY_AND_DIE, str(db)],
        cwd=ROOT,
        env={**env, reconciling.DIE: die},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    store = SQLiteSnapshotStore(db, durable=True)
    snapshot = store.latest(store.runs()[0].run_id)
    assert snapshot.phase is Phase.TOOL_RUN and snapshot.outcome_unknown_calls() == {"c1": "pay"}
    return store, snapshot, env


@pytest.mark.parametrize(("die", "charged"), [("after", "the charge happened"), ("before", "it did not")])
def test_a_process_killed_during_a_charge_is_resumed_and_the_ledger_settles_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, die: str, charged: str
) -> None:
    store, snapshot, env = _killed_during_the_call(tmp_path, die)
    ledger = tmp_path / "ledger"
    assert len(reconciling.charges(ledger)) == (1 if die == "after" else 0)
    monkeypatch.setenv(reconciling.LEDGER, env[reconciling.LEDGER])
    resumed = Agent(chat_generator=reconciling.PayingModel(), tools=[reconciling.pay], snapshot_store=store)
    result = resumed.run(snapshot=snapshot, take_over=True)
    assert result["last_message"].text == "done: charged 5"
    assert len(reconciling.charges(ledger)) == 1  # charged once, whichever side of the charge the process died
    assert "reconciled" in [r.trigger for r in result["trace"]]
    assert store.runs()[0].status == "done"


def test_a_charge_the_ledger_cannot_tell_waits_for_a_person_who_settles_it_from_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, snapshot, env = _killed_during_the_call(tmp_path, "after")
    monkeypatch.setenv(reconciling.LEDGER, env[reconciling.LEDGER])
    monkeypatch.setenv(reconciling.LEDGER_DOWN, "1")
    resumed = Agent(chat_generator=reconciling.PayingModel(), tools=[reconciling.pay], snapshot_store=store)
    with pytest.raises(BreakpointException, match="outcome is unknown"):
        resumed.run(snapshot=snapshot, take_over=True)
    [run] = store.runs()
    waiting = store.latest(run.run_id)
    assert run.status == "paused" and waiting.pause == OutcomeUnknown(
        ["c1"], ["pay"], {"c1": "the ledger does not answer"}
    )
    # The person deciding reads why code could not settle it: in the CLI and on the review page.
    shown = run_cli("snapshot", "show", run.run_id, "--store", str(tmp_path / "runs.db"))
    assert "  c1: pay(" in shown.stdout and "(in doubt after a crash: the ledger does not answer)" in shown.stdout
    from agentfsm.web import create_app
    from tests.web.test_web import ASGIClient

    page = ASGIClient(create_app(store, resumed))
    try:
        html = page.get(f"/runs/{run.run_id}").text
    finally:
        page.close()
    assert "In doubt after a crash" in html and "could not tell: the ledger does not answer." in html
    # A person who checked the bank by hand settles the call, from another process.
    command = ["decide", run.run_id, "--store", str(tmp_path / "runs.db"), "--agent", "tests.reconciling:agent"]
    decided = subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *command, "--reject", "c1:charged 5 (checked by hand)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.strip() == "done: charged 5 (checked by hand)"
    assert len(reconciling.charges(tmp_path / "ledger")) == 1
    assert store.runs()[0].status == "done"


def test_the_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("reconcile_example", ROOT / "examples" / "reconcile_payments.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the worker process imports this agentfsm
    monkeypatch.setenv(module.LEDGER, "")  # restored afterwards: main() points it at its own ledger
    module.main()
    out = capsys.readouterr().out
    assert "worker exited with -9" in out and "charges at the bank: 1" in out
    assert "resume -> reconciled -> tools_done" in out
