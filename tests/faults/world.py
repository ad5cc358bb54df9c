"""The runs the fault tests break: an agent whose tools keep an effect log, and an operator that takes a run to its end.

The model answers from the conversation alone (as a real one does), so any process, after any
fault, gives the same reply at the same point of a run; each reply reports token usage, so that
usage counted twice on recovery shows in the result. A run has two steps: a ``charge`` (not
idempotent) and a ``lookup`` (idempotent), then a ``send`` that a strategy approves within the run
(a decision written by the run) and a ``refund`` that waits for a person (a pause, and a decision
given on resume). Every tool records its effect in the ``EffectLog`` named by ``$AGENTFSM_FAULTS_EFFECTS``.

``finish`` is the operator: it resumes the run from the store's head after each failure (in the
process that saw it, or in a new one), takes over a claim whose process gave up, gives the person's
decision when the run waits for it, and settles a call in doubt from the effect log (its result
when its effect happened, a rerun when it did not): the run says it is in doubt, the operator, who
can look outside the run, decides.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentfsm import Agent, AgentSnapshot, ChatMessage, ToolCall, tool
from agentfsm._core.records import result_from_record
from agentfsm.errors import (
    BreakpointException,
    SnapshotError,
    StaleSnapshotError,
)
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from agentfsm.hitl.strategies import decision_from
from agentfsm.machine import Phase
from agentfsm.pauses import AwaitingDecision, OutcomeUnknown
from agentfsm.result import AgentResult
from agentfsm.stores import SnapshotStore
from agentfsm.testing import EffectLog

#: The effect log of the tools below (a file any process appends to).
EFFECTS = "AGENTFSM_FAULTS_EFFECTS"
USER = [ChatMessage.from_user("go")]


#: Where a process stalls (the stalled-worker tests): ``<point> <directory>``. At that point (a tool's
#: name, once its effect happened, or ``reply<N>``, the model's reply N), once, it creates
#: ``<directory>/stalled`` and waits for ``<directory>/go``.
STALL = "AGENTFSM_FAULTS_STALL"


def effect_log() -> EffectLog:
    """The log named by ``$AGENTFSM_FAULTS_EFFECTS``."""
    return EffectLog(os.environ[EFFECTS])


def stall_point(point: str, seconds: float = 120.0) -> None:
    """Stall here if ``$AGENTFSM_FAULTS_STALL`` names this point (see ``STALL``), for ``seconds`` at most."""
    spec = os.environ.get(STALL, "")
    at, _, directory = spec.partition(" ")
    if at != point:
        return
    del os.environ[STALL]
    (Path(directory) / "stalled").touch()
    deadline = time.monotonic() + seconds
    while not (Path(directory) / "go").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"stalled at {point} and never told to go on")
        time.sleep(0.01)


def _effect(tool_name: str, key: str, result: str) -> str:
    effect_log().record(key, tool_name, result)
    stall_point(tool_name)
    return result


@tool
def charge(amount: int, idempotency_key: str) -> str:
    """Charge the card: twice is two charges."""
    return _effect("charge", idempotency_key, f"charged {amount}")


@tool(idempotent=True)
def lookup(city: str, idempotency_key: str) -> str:
    """Read the weather: running it again does no harm."""
    return _effect("lookup", idempotency_key, f"{city}: sunny")


@tool
def send(to: str, idempotency_key: str) -> str:
    """Send a mail (a strategy approves it within the run)."""
    return _effect("send", idempotency_key, f"sent to {to}")


@tool
def refund(amount: int, idempotency_key: str) -> str:
    """Refund (a person approves it: the run pauses for the decision)."""
    return _effect("refund", idempotency_key, f"refunded {amount}")


class Approve:
    """A confirmation strategy that approves every call it is asked about, within the run."""

    def run(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any], tool_call_id: str | None = None
    ) -> ToolExecutionDecision:
        return decision_from(tool_name, tool_params, tool_call_id, "confirm")

    def to_dict(self) -> dict[str, Any]:
        return {"type": "tests.faults.world.Approve", "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Any = None) -> Approve:
        return cls()


class Model:
    """Replies from the conversation: two calls, then two calls that need decisions, then a summary."""

    def run(
        self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None
    ) -> dict[str, list[ChatMessage]]:
        replies = sum(1 for m in messages if m.role.value == "assistant")
        stall_point(f"reply{replies + 1}")
        usage = {"prompt_tokens": 10 * len(messages), "completion_tokens": 5}
        if replies == 0:
            calls = [ToolCall("charge", {"amount": 7}, id="c1"), ToolCall("lookup", {"city": "Paris"}, id="l1")]
        elif replies == 1:
            calls = [ToolCall("send", {"to": "ana"}, id="s1"), ToolCall("refund", {"amount": 2}, id="r1")]
        else:
            results = [str(m.tool_call_result.result) for m in messages if m.tool_call_result is not None]
            return {"replies": [ChatMessage.from_assistant("done: " + ", ".join(results), meta={"usage": usage})]}
        return {"replies": [ChatMessage.from_assistant(tool_calls=calls, meta={"usage": usage})]}

    def to_dict(self) -> dict[str, Any]:
        return {"type": "tests.faults.world.Model", "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Model:
        return cls()


#: The tools that may run again after a crash.
IDEMPOTENT = frozenset({"lookup"})


def make_agent(store: SnapshotStore | None) -> Agent:
    """The agent of the fault tests, on ``store`` (one call at a time: the order of writes is the same every run)."""
    return Agent(
        chat_generator=Model(),
        tools=[charge, lookup, send, refund],
        snapshot_store=store,
        tool_concurrency=1,
        confirmation_strategies={"send": Approve(), "refund": BreakpointConfirmationStrategy("")},
    )


def person_decides(snapshot: AgentSnapshot, key: str) -> ToolExecutionDecision:
    """The person's decision on a call a run waits for: approve it as proposed."""
    call = snapshot.pending_calls_by_key()[key]
    return decision_from(call["tool_name"], dict(call["arguments"]), key, "confirm")


def settle_in_doubt(snapshot: AgentSnapshot, key: str, log: EffectLog) -> ToolExecutionDecision:
    """The operator's decision on a call in doubt: its result when its effect happened, else run it again."""
    from agentfsm.tools.tool import idempotency_key

    call = snapshot.pending_calls_by_key()[key]
    mine = idempotency_key(snapshot.run_id, snapshot.step, key)
    done = [e for e in log.effects() if e.key == mine]
    if done:
        return ToolExecutionDecision(call["tool_name"], False, key, feedback=str(done[-1].result))
    return ToolExecutionDecision(call["tool_name"], True, key)


def decisions_for(snapshot: AgentSnapshot, log: EffectLog) -> list[ToolExecutionDecision]:
    """What the operator and the person decide for a run paused at ``snapshot`` (none for a plain breakpoint)."""
    pause = snapshot.pause
    if isinstance(pause, OutcomeUnknown):
        return [settle_in_doubt(snapshot, key, log) for key in pause.tool_call_ids]
    if isinstance(pause, AwaitingDecision):
        return [person_decides(snapshot, key) for key in snapshot.awaited_decisions()]
    return []


class Gave(Exception):
    """The operator gave up: the run did not end within its attempts."""


def summary(result: AgentResult) -> dict[str, Any]:
    """What two runs that end alike agree on: the answer, the results the model read, the usage, the counts."""
    return {
        "answer": result["last_message"].text,
        "results": [str(m.tool_call_result.result) for m in result["messages"] if m.tool_call_result is not None],
        "token_usage": dict(result["token_usage"]),
        "tool_call_counts": dict(result["tool_call_counts"]),
        "step_count": result["step_count"],
        "exit_reason": result["exit_reason"],
    }


def finish(
    store_for: Callable[[], SnapshotStore],
    run_id: str | None,
    *,
    attempts: int = 12,
    failures: list[BaseException] | None = None,
    until_failure: bool = False,
) -> tuple[str | None, AgentResult | None]:
    """Take run ``run_id`` (``None``: a new run) to its end in ``store_for()``'s store: its id and result.

    Each failure (a store's error, a refusal) is appended to ``failures``; the run is then resumed
    from the store's head, taken over when the claim that holds it is one nobody runs any more (the
    process that made it gave up on it: it raised), and given the decisions it waits for. A run the
    store registered but holds no snapshot of did nothing yet: a new run starts instead.
    ``until_failure``: give up at the first failure instead (the process stops there: the result is ``None``).
    """
    store = store_for()
    take_over = False
    for _ in range(attempts):
        try:
            if run_id is not None and not store.history(run_id):
                run_id = None  # registered (its claim was written), nothing else: it never started
            if run_id is None:
                before = {r.run_id for r in store.runs()}
                try:
                    result = make_agent(store).run(USER)
                finally:
                    run_id = _new_run_id(store, before)
                return run_id, result
            head = store.latest(run_id)
            if head.phase is Phase.DONE:
                return run_id, result_from_record(head.to_dict(), None, make_agent(None).state_keys)
            decisions = decisions_for(head, effect_log())
            return run_id, make_agent(store).run(snapshot=head, decisions=decisions, take_over=take_over)
        except BreakpointException as paused:
            run_id = paused.snapshot.run_id
            take_over = False
        except (SnapshotError, OSError) as error:
            if failures is not None:
                failures.append(error)
            if until_failure:
                return run_id, None
            # Held by a claim nobody runs (the process that made it saw its write fail, and gave up).
            take_over = isinstance(error, StaleSnapshotError) and (
                "being run by" in str(error) or "claimed by another process" in str(error)
            )
    raise Gave(f"run {run_id} did not end after {attempts} attempts: {failures}")


def _new_run_id(store: SnapshotStore, before: set[str]) -> str | None:
    """The run a new run left in the store (``None``: it left nothing, and starts again)."""
    new = [r.run_id for r in store.runs() if r.run_id not in before]
    return new[0] if new else None
