"""Tool retries: a call whose attempt failed with an error its tool's ``Retry`` covers runs again, after a backoff.

A finished attempt takes its ``retry`` call edge (``ready → retrying``) instead of ``finish`` when
the tool has a ``Retry`` that covers the error, attempts are left, the call's effect cannot have
happened (``retryable``), and the backoff ends within the run's wall clock. The step's results
wait for it (no tool result is recorded, ``after_tool`` does not fire); TOOL_RUN's ``backoff``
work waits out the longest backoff of the step's retrying calls, and the run takes TOOL_RUN's
``retry`` edge back into TOOL_RUN; the edge moves the calls along ``reattempt`` (``retrying →
ready``), and they run again. A cancellation that cuts the backoff short stops the run before the
edge (it resumes past the backoff, its calls still retrying). The count of failed attempts of each call
is in the snapshots (``tool_call_attempts``). A run none of whose tools has a ``Retry`` (and no
dynamic toolset) never reads the slice's facts: its table and plan leave them out.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import (
    CALL_AWAITING_INPUT,
    CALL_READY,
    CALL_RETRYING,
    CALL_UNKNOWN,
    PHASE_WORK,
    TOOL_RUN,
    CallStatus,
    Work,
)
from agentfsm._core.rules import CallTransition, Fact, Rule, Slice, when
from agentfsm.errors import ToolTimeoutError
from agentfsm.limits import RUN_USAGE_KEY
from agentfsm.slices.interrupts import tools_ask

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig
    from agentfsm.tools.invoker import PreparedCall


def configured(config: RunConfig) -> bool:
    """Whether a run of ``config`` may retry a call: a tool has a ``Retry``, or a dynamic toolset may show one."""
    return bool(config.dynamic) or any(t.retry is not None for t in config.tools.values())


def calls_retrying(run: AgentRun) -> bool:
    """Whether a pending call failed an attempt and waits for its next one."""
    for c in run.pending:  # noqa: SIM110 (a loop, not any() over a generator: read at every step)
        if c.status is CALL_RETRYING:
            return True
    return False


#: ``results_outstanding`` holds exactly when one of these facts does: an edge whose guard gives
#: them all as false says it did not hold (``agentfsm.checking``'s ``hooks_fire`` reads it so).
OUTSTANDING_WHEN = ("calls_in_doubt", "calls_retrying", "calls_asking")


def results_outstanding(run: AgentRun) -> bool:
    """Whether a call of the step has no result yet: it waits for its next attempt, is in doubt after a crash, or asked a person."""
    for c in run.pending:
        status = c.status
        if status is CALL_RETRYING or status is CALL_UNKNOWN or status is CALL_AWAITING_INPUT:
            return True
    return False


def retryable(call: PreparedCall) -> bool:
    """Whether a finished attempt of ``call`` runs again: the retry rule, read on every attempt.

    Its tool has a ``Retry`` that covers the error, and attempts are left. A timed-out attempt of a
    tool that is not idempotent may have had its effect (the tool was running when the run stopped
    waiting): it is not retried, unless the ``Retry`` says ``may_repeat_effects``.
    """
    tool, outcome = call.tool, call.outcome
    if tool is None or tool.retry is None or outcome is None or outcome.error is None:
        return False
    policy = tool.retry
    if call.attempts + 1 >= policy.attempts or not policy.covers(outcome.error):
        return False
    return not isinstance(outcome.error, ToolTimeoutError) or tool.idempotent or policy.may_repeat_effects


def delay_of(call: PreparedCall) -> float:
    """Seconds ``call`` waits before its next attempt (after ``attempts`` failed ones)."""
    assert call.tool is not None and call.tool.retry is not None
    return call.tool.retry.delay(call.attempts)


def within_deadline(run: AgentRun, delay: float) -> bool:
    """Whether a backoff of ``delay`` seconds ends before the run's wall clock (``UsageLimits(wall_clock=...)``) runs out."""
    limits = run.limits
    if limits is None or limits.wall_clock is None:
        return True
    usage = run.data.get(RUN_USAGE_KEY) or {}
    if "started_at" not in usage:
        return True
    spent = time.time() - usage["started_at"] - usage.get("paused_seconds", 0.0)
    return bool(spent + delay < limits.wall_clock)


def retries_call(run: AgentRun, call: PreparedCall) -> bool:
    """Whether the finished attempt of ``call`` takes its ``retry`` edge (else ``finish`` or ``time_out``)."""
    return retryable(call) and within_deadline(run, delay_of(call))


def backoff(run: AgentRun) -> tuple[list[PreparedCall], float]:
    """The calls waiting for their next attempt, and how long the step waits for them: the longest of their backoffs."""
    waiting = [c for c in run.pending if c.status is CALL_RETRYING]
    return waiting, max(delay_of(c) for c in waiting)


def reattempt(run: AgentRun) -> None:
    """The ``retry`` edge's effect: each call waiting for its next attempt is ready again (``reattempt``)."""
    for c in run.pending:
        if c.status is CALL_RETRYING:
            run.move_call(c, "reattempt")


def restore(run: AgentRun, attempts: Mapping[str, int], retrying: Iterable[str]) -> None:
    """Give a resumed run's calls their counts of failed attempts; those of ``retrying`` wait for their next one again."""
    waiting = set(retrying) if run.retries else set()
    for c in run.pending:
        c.attempts = attempts.get(c.key, 0)
        if c.key in waiting and c.status is CALL_READY:
            run.move_call(c, "retry")


#: Where TOOL_RUN's work stands once its calls' backoff is owed: a run stopped after an attempt failed resumes there.
BACKOFF_STAGE = PHASE_WORK[TOOL_RUN].index(Work.BACKOFF)


def attempts_of(run: AgentRun) -> dict[str, int]:
    """The snapshot's ``tool_call_attempts``: each pending call's count of failed attempts, when it has one."""
    return {c.key: c.attempts for c in run.pending if c.attempts}


def retrying_of(run: AgentRun) -> list[str]:
    """The snapshot's ``retrying_tool_calls``: the calls whose attempt failed and whose backoff is still owed."""
    return [c.key for c in run.pending if c.status is CALL_RETRYING]


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    if configured(config):
        return []
    outstanding = config.recovers or tools_ask(config)
    return [("calls_retrying", False)] + ([] if outstanding else [("results_outstanding", False)])


R = CallStatus.RETRYING

SLICE = Slice(
    "retries",
    facts=(
        Fact("calls_retrying", "a call waits for its next attempt", "no call to retry", calls_retrying),
        Fact("results_outstanding", "a call has no result yet", "every call has its result", results_outstanding),
    ),
    # After the backoff, the run enters TOOL_RUN again: the calls run their next attempt there.
    rules=(Rule(TOOL_RUN, 55, "retry", TOOL_RUN, when(calls_retrying=True), effect=reattempt),),
    call_edges=(
        CallTransition(
            "retry", CallStatus.READY, R, "raised an error its Retry covers, attempts left, effect not done"
        ),
        CallTransition("reattempt", R, CallStatus.READY, "its backoff is over: the next attempt starts"),
    ),
    # The step's results wait for every attempt: after_tool fires, and the result guardrails check
    # them, once each call has its result.
    skips={
        Work.AFTER_TOOL: ("results_outstanding", True),
        Work.GUARD_RESULTS: ("results_outstanding", True),
        Work.BACKOFF: ("calls_retrying", False),
    },
    constants=_constants,
)
