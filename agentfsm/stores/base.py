"""What a snapshot store is: the protocol every store follows, and what it says about runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentfsm.machine import Phase
from agentfsm.runtime import RunDelta
from agentfsm.snapshot import AgentSnapshot


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One stored snapshot of a run: its position in the run's history and where it resumes."""

    run_id: str
    seq: int
    phase: Phase
    step: int
    created_at: str


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run known to a store: its newest snapshot and its status (active, paused, done or failed)."""

    run_id: str
    status: str
    phase: Phase | None
    step: int
    snapshots: int
    updated_at: str


@runtime_checkable
class SnapshotStore(Protocol):
    """A place to keep snapshots. ``durable`` stores are also told about every transition."""

    durable: bool

    def save(self, snapshot: AgentSnapshot) -> SnapshotInfo:
        """Keep ``snapshot`` as the newest of its run."""
        ...

    def latest(self, run_id: str) -> AgentSnapshot:
        """The newest snapshot of ``run_id``; ``SnapshotError`` if there is none."""
        ...

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """The snapshot number ``seq`` of ``run_id`` (time travel: resume or fork from any point)."""
        ...

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """Every snapshot of ``run_id``, oldest first."""
        ...

    def runs(self) -> list[RunInfo]:
        """Every run, most recently updated first."""
        ...


@runtime_checkable
class DurableSnapshotStore(SnapshotStore, Protocol):
    """A store that records the run at every transition and every finished tool call (a ``RunObserver``)."""

    def observe(self, delta: RunDelta) -> None:
        """Record what changed in a run; see ``agentfsm.runtime.RunObserver``."""
        ...
