"""Cancelling a run from outside: its ``RunHandle`` (any thread), or the task of ``run_async`` being cancelled.

A cancelled run takes the ``cancel`` interrupt from the phase it is in to PAUSED, at its next
transition (or at once when its task is cancelled), and resumes like any paused run. Until its
handle is cancelled a run does not read the fact (``NOT_CANCELLED``): a handle never cancelled
costs it nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentfsm._core.phases import ACTIVE_PHASES, PAUSED
from agentfsm._core.rules import ConstantFacts, Fact, Interrupt, Slice, when
from agentfsm.pauses import Cancelled

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun

#: What a run's watch of its interrupts assumes until its handle is cancelled.
NOT_CANCELLED: Final[ConstantFacts] = frozenset({("cancel_requested", False)})


def _cancel_requested(run: AgentRun) -> bool:
    handle = run.config.cancel
    return run.task_cancelled_flag or (handle is not None and handle.cancelled)


def _cancelled(run: AgentRun) -> Cancelled:
    return Cancelled()


SLICE = Slice(
    "cancel",
    facts=(Fact("cancel_requested", "cancellation requested", "not cancelled", _cancel_requested),),
    interrupts=(Interrupt("cancel", ACTIVE_PHASES, (PAUSED,), when(cancel_requested=True), pause=_cancelled),),
)
