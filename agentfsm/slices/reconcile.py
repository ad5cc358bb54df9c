"""Settling calls in doubt in code: a tool's reconcile function answers for a call a crash left in doubt.

A run that recovers from a journal (``RunConfig.recovers``) and finds a call in doubt whose tool
has a reconcile function (``agentfsm.reconcile``) asks it, in TOOL_RUN's ``reconcile`` work (the
phase's last: a call in doubt skips the work before it). Each answer takes a call edge a person's
decision takes (``slices.doubt``): ``Happened(result)`` ``settle``, the result the call's;
``NotHappened()`` ``rerun``; ``Unknown`` none: the call stays in doubt, TOOL_RUN's ``in_doubt``
rule pauses the run for a person, and the pause says why (``OutcomeUnknown.notes``). Once no call
is in doubt, the ``reconciled`` rule takes the run back into TOOL_RUN, where the calls that did not
happen run and the step's results are recorded. A run that recovers nothing, or none of whose
tools has a reconcile function (and no dynamic toolset), never reads the slice's facts: its table
and plan leave them out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import CALL_UNKNOWN, TOOL_RUN, Work
from agentfsm._core.rules import Fact, Rule, Slice, when
from agentfsm.reconcile import Unknown

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig
    from agentfsm.tools.invoker import PreparedCall


def configured(config: RunConfig) -> bool:
    """Whether a run of ``config`` may ask a reconcile function: it recovers, and a tool (or a dynamic toolset) may have one."""
    return config.recovers and (bool(config.dynamic) or any(t.reconcile is not None for t in config.tools.values()))


def unasked(run: AgentRun) -> list[PreparedCall]:
    """The calls in doubt whose tool has a reconcile function that was not asked yet."""
    return [
        c
        for c in run.pending
        if c.status is CALL_UNKNOWN and c.reconciled is None and c.tool is not None and c.tool.reconcile is not None
    ]


def calls_to_reconcile(run: AgentRun) -> bool:
    """Whether a call in doubt waits for its tool's reconcile function."""
    return bool(unasked(run))


def calls_reconciled(run: AgentRun) -> bool:
    """Whether a reconcile function settled a call in doubt (it happened, or not), the step's results not recorded yet."""
    for c in run.pending:  # noqa: SIM110 (a loop, not any() over a generator: read at every step)
        if c.reconciled is not None and type(c.reconciled) is not Unknown:
            return True
    return False


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    return [] if configured(config) else [("calls_to_reconcile", False), ("calls_reconciled", False)]


SLICE = Slice(
    "reconcile",
    facts=(
        Fact(
            "calls_to_reconcile",
            "a call in doubt has a reconcile function",
            "no call in doubt to reconcile",
            calls_to_reconcile,
        ),
        Fact(
            "calls_reconciled",
            "a reconcile function settled a call in doubt",
            "no call settled in code",
            calls_reconciled,
        ),
    ),
    # After the last retry (whose edge runs the calls again itself): the calls that did not happen
    # run, and the step's results are recorded, on entering TOOL_RUN again.
    rules=(Rule(TOOL_RUN, 57, "reconciled", TOOL_RUN, when(calls_reconciled=True)),),
    skips={Work.RECONCILE: ("calls_to_reconcile", False)},
    constants=_constants,
)
