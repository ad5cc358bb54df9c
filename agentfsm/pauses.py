"""Why a run paused, and where a stored run stands: the one vocabulary of pauses and run statuses.

A paused run's snapshot says why it paused (``AgentSnapshot.pause``): a breakpoint matched
(``BreakpointHit``), calls wait for a confirmation decision (``AwaitingDecision``), or calls may have
run before a crash without their result being recorded (``OutcomeUnknown``). Each reason's
``kind`` is its ``"type"`` in the snapshot's ``break_point`` data, the form snapshots have always
stored it in (a breakpoint's ``type`` is its class name). ``RunStatus`` is what stores, durable
views, the CLI and the review page say of a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from agentfsm._core.phases import Phase


class RunStatus(StrEnum):
    """Where a stored run stands."""

    #: A process holds the run (or its durable workflow runs, is queued, or waits for recovery).
    ACTIVE = "active"
    #: It waits to be resumed: at a breakpoint, or for decisions.
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"

    @classmethod
    def ended_in(cls, phase: Phase) -> RunStatus:
        """The status of a run whose process let it go in ``phase``: done, paused, or else failed."""
        if phase is Phase.DONE:
            return cls.DONE
        return cls.PAUSED if phase is Phase.PAUSED else cls.FAILED


@dataclass(frozen=True, slots=True)
class BreakpointHit:
    """A breakpoint matched: ``breakpoint`` is its ``Breakpoint.to_dict()``."""

    kind: ClassVar[str] = "breakpoint"
    breakpoint: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data: the breakpoint's own."""
        return dict(self.breakpoint)


@dataclass(frozen=True, slots=True)
class AwaitingDecision:
    """Calls wait for a confirmation decision: ``waiting`` (their keys), the first of them named."""

    kind: ClassVar[str] = "confirmation"
    tool_name: str
    tool_call_id: str
    waiting: list[str]
    #: Where the confirmation strategy asked for the snapshot file, if it did.
    snapshot_file_path: str | None = None
    tool_descriptions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data."""
        return {"type": self.kind, **asdict(self)}


@dataclass(frozen=True, slots=True)
class OutcomeUnknown:
    """Calls started before a crash and their results were never recorded (in doubt)."""

    kind: ClassVar[str] = "outcome_unknown"
    tool_call_ids: list[str]
    tool_names: list[str]
    #: Why a call stays in doubt, by key, when its tool's reconcile function could not tell (its
    #: reason, or what went wrong with it: ``agentfsm.reconcile``).
    notes: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data (``notes`` only when there are some)."""
        data = {"type": self.kind, **asdict(self)}
        if not self.notes:
            del data["notes"]
        return data


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The run was cancelled from outside (``RunHandle.cancel()``, or its task): it resumes where it stopped."""

    kind: ClassVar[str] = "cancelled"

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data."""
        return {"type": self.kind}


PauseReason = BreakpointHit | AwaitingDecision | OutcomeUnknown | Cancelled


def pause_reason(data: Mapping[str, Any] | None) -> PauseReason | None:
    """The reason a snapshot's ``break_point`` data states (``None``: the run did not pause)."""
    if data is None:
        return None
    kind = data.get("type")
    if kind == AwaitingDecision.kind:
        return AwaitingDecision(
            data["tool_name"],
            data["tool_call_id"],
            list(data.get("waiting", ())),
            data.get("snapshot_file_path"),
            dict(data.get("tool_descriptions") or {}),
        )
    if kind == OutcomeUnknown.kind:
        return OutcomeUnknown(
            list(data["tool_call_ids"]), list(data.get("tool_names", ())), dict(data.get("notes") or {})
        )
    if kind == Cancelled.kind:
        return Cancelled()
    return BreakpointHit(dict(data))
