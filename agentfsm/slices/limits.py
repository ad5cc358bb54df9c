"""Usage limits: each limit reached ends the run through a declared edge, and the run counts what they read.

The run reads one fact, ``usage_limit_reached``, before every model call: on its way out of
EXIT_CHECK (``go_on``'s ``limited``), and on entering LLM_CALL (a guarded interrupt, for a run
resumed there with a smaller limit than it paused with). A tool call that would go past
``UsageLimits(tool_calls=...)`` never runs: it takes its ``over_limit`` edge, and its result says
why. What the limits count lives in the run's State (``agentfsm.limits``), so a resumed run counts on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import CALL_READY, DONE, LLM_CALL, CallStatus
from agentfsm._core.rules import CallTransition, Fact, Interrupt, Rule, Slice, when
from agentfsm.errors import ToolCallLimitError
from agentfsm.limits import RUN_USAGE_KEY, UsageLimits
from agentfsm.slices.loop import ENDING, GO_ON

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig
    from agentfsm.messages import ChatMessage
    from agentfsm.tools.invoker import CallOutcome

#: The exit reason of a run a usage limit ended (``{usage_limit}``: the limit's field name).
LIMIT_REACHED = "usage_limit:{usage_limit}"


def counted(limits: UsageLimits | None) -> UsageLimits | None:
    """The limits a run counts for: ``None`` when none is set and no prices are given (nothing to count)."""
    return limits if limits is not None and limits.configured else None


def usage_limit(run: AgentRun) -> str | None:
    """The first limit of the run's ``UsageLimits`` that is reached (its field name), or ``None``."""
    limits = run.limits
    return None if limits is None else limits.reached(run.step, run.data)


def _usage_limit_reached(run: AgentRun) -> bool:
    limits = run.limits
    return limits is not None and limits.reached(run.step, run.data) is not None


def _usage(run: AgentRun) -> dict[str, Any]:
    return dict(run.data.get(RUN_USAGE_KEY) or {})


def start_clock(run: AgentRun) -> None:
    """Start the wall clock of a run's first start; a resumed run's goes on from its snapshot."""
    usage = _usage(run)
    if "started_at" not in usage:
        run.clock_started = time.time()
        run.state.set(RUN_USAGE_KEY, {**usage, "started_at": run.clock_started})


def clock_started_at(run: AgentRun, started_at: float) -> None:
    """Count the wall clock from ``started_at`` (epoch seconds): a durable run's first start, read back on recovery."""
    run.clock_started = started_at
    run.state.set(RUN_USAGE_KEY, {**_usage(run), "started_at": started_at})


def resumed_after(run: AgentRun, paused_at: float) -> None:
    """Leave the time since ``paused_at`` (the pause snapshot's time, epoch seconds) off the run's wall clock."""
    usage = _usage(run)
    if "started_at" in usage:
        paused = usage.get("paused_seconds", 0.0) + max(0.0, time.time() - paused_at)
        run.state.set(RUN_USAGE_KEY, {**usage, "paused_seconds": paused})


def count_replies(run: AgentRun, limits: UsageLimits, replies: list[ChatMessage]) -> None:
    """Check that the replies report what the limits count, and add up their cost (with prices)."""
    if limits.counts_tokens:
        cost = limits.replies_cost(replies)
        if limits.tracks_cost:
            usage = _usage(run)
            run.state.set(RUN_USAGE_KEY, {**usage, "cost": usage.get("cost", 0.0) + cost})


def refuse_over_limit(run: AgentRun, limit: int, completed: Mapping[str, CallOutcome] | None) -> None:
    """Refuse the ready calls past ``UsageLimits(tool_calls=limit)``: they never run, and their results say why."""
    left = limit - sum((run.data.get("tool_call_counts") or {}).values())
    if len(run.pending) <= left:  # every call fits
        return
    counts = [c for c in run.pending if c.tool is None or not c.tool.is_answer]
    if len(counts) <= left:
        return
    refused = 0
    for c in counts:
        if c.status is not CALL_READY:
            continue
        # A call that finished before a resume took its place under the limit (the step's calls
        # are counted in tool_call_counts only once all of them are done).
        if left > 0 or (completed and c.key in completed):
            left -= 1
            continue
        c.error = ToolCallLimitError(
            f"Tool call {c.call.tool_name!r} was not run: the run reached its limit of "
            f"{limit} tool calls (UsageLimits(tool_calls=...))."
        )
        run.move_call(c, "over_limit")
        refused += 1
    if refused and completed is None:  # a resumed run's State counted them when they were first refused
        usage = _usage(run)
        run.state.set(RUN_USAGE_KEY, {**usage, "refused_tool_calls": usage.get("refused_tool_calls", 0) + refused})


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    limits = config.usage_limits
    return [] if limits is not None and limits.bounded else [("usage_limit_reached", False)]


SLICE = Slice(
    "limits",
    facts=(Fact("usage_limit_reached", "a usage limit reached", "within usage limits", _usage_limit_reached),),
    rules=(Rule(GO_ON.name, 20, "limited", ENDING.name, when(usage_limit_reached=True), exit_reason=LIMIT_REACHED),),
    interrupts=(
        # A run that enters LLM_CALL past a usage limit (resumed there, with a smaller limit than it
        # paused with) ends before the model is called. The other ways into LLM_CALL are guarded by
        # the limit already; with the reply's tool calls still to answer (resumed after the model
        # call), the run goes on to answer them, and ends in EXIT_CHECK.
        Interrupt(
            "usage_limit",
            (LLM_CALL,),
            (DONE,),
            when(usage_limit_reached=True, has_tool_calls=False),
            exit_reason=LIMIT_REACHED,
        ),
    ),
    call_edges=(
        CallTransition(
            "over_limit", CallStatus.READY, CallStatus.FAILED, "it would go past UsageLimits(tool_calls=...)"
        ),
    ),
    exit_fields={"usage_limit": usage_limit},
    constants=_constants,
)
