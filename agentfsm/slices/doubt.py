"""Calls in doubt: a tool call that started before a crash and whose result was never recorded.

Every driver keeps a journal of the calls it hands to the tools (``started_calls``); a run
recovered from it applies the in-doubt rule (``crashed_during_tool_run``): a call of an idempotent
tool runs again, any other waits (its tool's reconcile function is asked first:
``slices.reconcile``), and the run pauses (``in_doubt``) until a decision runs it again or gives its
result. Only a run that may recover from a journal (a resumed or a durable one,
``RunConfig.recovers``) reads the fact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import CALL_DONE, CALL_READY, CALL_UNKNOWN, PAUSED, PHASE_WORK, TOOL_RUN, CallStatus, Work
from agentfsm._core.rules import CallTransition, Fact, Rule, Slice, when
from agentfsm.pauses import OutcomeUnknown
from agentfsm.reconcile import Unknown, why

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig
    from agentfsm.tools.invoker import PreparedCall


def calls_in_doubt(run: AgentRun) -> bool:
    """Whether a pending call started before a crash and its result was never recorded."""
    for c in run.pending:  # noqa: SIM110 (a loop, not any() over a generator: read at every step)
        if c.status is CALL_UNKNOWN:
            return True
    return False


def runs_again_after_crash(call: PreparedCall) -> bool:
    """The in-doubt rule: whether a call that started before a crash, its result never recorded, runs again.

    It does when its tool is idempotent; any other waits for a decision (run it again, or give its result).
    """
    return call.tool is not None and call.tool.idempotent


def started_calls(run: AgentRun) -> list[str]:
    """The journal: the calls handed to the tools (or in doubt after a crash), while TOOL_RUN's tools run.

    After a crash, those without a recorded result are in doubt (``runs_again_after_crash``).
    """
    if run.phase is not TOOL_RUN or PHASE_WORK[TOOL_RUN][run.stage : run.stage + 1] != (Work.RUN_TOOLS,):
        return []
    started = (CALL_READY, CALL_DONE, CALL_UNKNOWN)
    return [c.key for c in run.pending if c.status in started]


def outcome_unknown(run: AgentRun) -> OutcomeUnknown:
    """Why a run pauses in TOOL_RUN: its calls in doubt, and why a reconcile function left any of them so."""
    unknown = [c for c in run.pending if c.status is CALL_UNKNOWN]
    notes = {c.key: why(c.reconciled) for c in unknown if isinstance(c.reconciled, Unknown)}
    return OutcomeUnknown([c.key for c in unknown], [c.call.tool_name for c in unknown], notes)


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    return [] if config.recovers else [("calls_in_doubt", False)]


K = CallStatus.UNKNOWN

SLICE = Slice(
    "doubt",
    facts=(Fact("calls_in_doubt", "calls in doubt after a crash", "no call in doubt", calls_in_doubt),),
    # A call that may have run before a crash waits for a decision: run it again, or give its result.
    rules=(Rule(TOOL_RUN, 50, "in_doubt", PAUSED, when(calls_in_doubt=True), pause=outcome_unknown),),
    call_edges=(
        CallTransition("in_doubt", CallStatus.READY, K, "started before a crash, result not recorded"),
        CallTransition(
            "rerun", K, CallStatus.READY, "idempotent tool, decision execute=True, or reconcile NotHappened"
        ),
        CallTransition("modify", K, CallStatus.READY, "execute=True with new arguments that fit"),
        CallTransition("modify_refused", K, CallStatus.FAILED, "execute=True with new arguments that do not fit"),
        CallTransition(
            "settle", K, CallStatus.DONE, "decision execute=False, its feedback the result, or reconcile Happened"
        ),
    ),
    # No call runs until the calls in doubt are decided (nor does after_tool fire: ``slices.retries``'
    # ``results_outstanding`` skips it while a call has no result).
    skips={Work.RUN_TOOLS: ("calls_in_doubt", True)},
    constants=_constants,
)
