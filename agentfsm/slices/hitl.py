"""Human in the loop: calls a confirmation strategy covers go through CONFIRM, and none runs without a decision.

CONFIRM is a guard state. Its work asks each call's strategy (``agentfsm.hitl``); a strategy that
defers leaves its call undecided, and the run pauses (``hitl_pause``) until a decision comes, from
this process or another. A decision is bound to the exact call it was taken for and used once
(``agentfsm._core.decisions``). An agent without strategies never confirms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import CALL_UNDECIDED, CONFIRM, PAUSED, TOOL_PENDING, TOOL_RUN, CallStatus
from agentfsm._core.rules import OTHERWISE, CallTransition, Fact, Rule, Slice, when
from agentfsm.pauses import AwaitingDecision

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig


def undecided(run: AgentRun) -> bool:
    """Whether a pending call waits for a decision (a strategy covers it, and none was taken)."""
    for c in run.pending:  # noqa: SIM110 (a loop, not any() over a generator: read at every step)
        if c.status is CALL_UNDECIDED:
            return True
    return False


def awaiting_decision(run: AgentRun) -> AwaitingDecision:
    """Why a run pauses in CONFIRM: the calls its strategies deferred."""
    waiting = [c for c in run.pending if c.status is CALL_UNDECIDED]
    first = waiting[0]
    strategy = run.config.confirmation.strategy_for(first.call.tool_name)
    return AwaitingDecision(
        first.call.tool_name,
        first.key,
        [c.key for c in waiting],
        getattr(strategy, "snapshot_file_path", None),
        {c.call.tool_name: c.tool.description if c.tool else "" for c in waiting},
    )


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    if not config.confirmation:
        return [("needs_confirmation", False), ("strategy_paused", False)]
    return []


U = CallStatus.UNDECIDED

SLICE = Slice(
    "hitl",
    facts=(
        Fact("needs_confirmation", "a strategy covers a call", "no strategy applies", undecided),
        Fact("strategy_paused", "a decision is deferred", "every call decided", undecided),
    ),
    rules=(
        Rule(TOOL_PENDING, 50, "confirm", CONFIRM, when(needs_confirmation=True)),
        Rule(CONFIRM, 50, "hitl_pause", PAUSED, when(strategy_paused=True), pause=awaiting_decision),
        Rule(CONFIRM, OTHERWISE, "decided", TOOL_RUN),
    ),
    call_edges=(
        CallTransition("ask", CallStatus.READY, U, "a confirmation strategy covers its tool"),
        CallTransition("approve", U, CallStatus.READY, "decision execute=True"),
        CallTransition("modify", U, CallStatus.READY, "execute=True with new arguments that fit"),
        CallTransition("modify_refused", U, CallStatus.FAILED, "execute=True with new arguments that do not fit"),
        CallTransition("reject", U, CallStatus.REJECTED, "decision execute=False"),
    ),
    constants=_constants,
)
