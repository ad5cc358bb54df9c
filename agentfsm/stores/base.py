"""What a snapshot store is: the protocol every store follows, and what it says about runs."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentfsm._core.records import RunDelta
from agentfsm.errors import SnapshotError
from agentfsm.machine import Phase
from agentfsm.pauses import RunStatus
from agentfsm.snapshot import AgentSnapshot

if TYPE_CHECKING:
    from agentfsm.events import Event


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
    """A run known to a store: its newest snapshot and its status (active, paused, done or failed).

    ``owner`` is the claim of the process running it (while active), ``taken_over_from`` and
    ``taken_over_by`` the claims of the last take-over, and ``parent_run_id`` / ``parent_seq`` the
    snapshot a fork started from.
    """

    run_id: str
    status: RunStatus
    phase: Phase | None
    step: int
    snapshots: int
    updated_at: str
    owner: str | None = None
    taken_over_from: str | None = None
    taken_over_by: str | None = None
    parent_run_id: str | None = None
    parent_seq: int | None = None
    #: What the run's last ending said: how a finished run ended (``text``, ``max_agent_steps``..., as
    #: its result says), a failed run's error, or ``cancelled`` for a run cancelled from outside.
    exit_reason: str | None = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event of a run as a store keeps it (``record_events=True``): its number among the run's events, and the event.

    Read back from a store, a ``run_ended`` event has no ``result`` (``None``: the run's last
    snapshot holds it) and a ``paused`` event carries the snapshot stored at its ``seq``
    (``agentfsm.events.stored_dict``).
    """

    #: 1 for the run's first stored event, then 2, 3...: in the order the events were written.
    number: int
    event: Event


def new_claim() -> str:
    """A claim's owner id: this host and process, and a token of its own."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def of_run(snapshot: AgentSnapshot, run_id: str, where: object) -> AgentSnapshot:
    """``snapshot``, read from ``where`` among the run's snapshots; ``SnapshotError`` when it is another run's.

    A snapshot that names another run (a file copied into the wrong folder, a tampered row) would
    resume that run under this one's claim.
    """
    if snapshot.run_id != run_id:
        raise SnapshotError(
            f"{where} is stored as a snapshot of run {run_id!r} but is one of run {snapshot.run_id[:80]!r}: the "
            "store is damaged or was tampered with; nothing was resumed."
        )
    return snapshot


@runtime_checkable
class SnapshotStore(Protocol):
    """A place to keep snapshots. ``durable`` stores are also told about every transition.

    A stored run has one head, its newest snapshot, and one process at a time runs it: resuming
    ``claim``s the run (only from its head, and only when no live claim holds it), and the end of
    the run, or its pause, ``release``s it.
    """

    durable: bool

    def save(self, snapshot: AgentSnapshot) -> SnapshotInfo:
        """Keep ``snapshot`` as the newest of its run, which is then paused (and no longer claimed)."""
        ...

    def claim(
        self, run_id: str, seq: int | None, *, take_over: bool = False, parent: tuple[str, int | None] | None = None
    ) -> None:
        """Take the run from its snapshot ``seq`` to run it here; ``StaleSnapshotError`` if that is not the head.

        Also refused while another process's claim is live, unless ``take_over``. A run the store
        does not know is registered (``parent``: the run and snapshot a fork starts from).
        """
        ...

    def release(
        self, run_id: str, status: RunStatus, exit_reason: str | None = None, *, snapshot: AgentSnapshot | None = None
    ) -> None:
        """Give up this process's claim on the run, leaving it ``status`` (done, failed or paused) and its exit reason.

        ``snapshot``: a finished run's record (in DONE or FAILED), kept as its newest snapshot.
        """
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
        """Record what changed in a run; see ``agentfsm._core.runtime.RunObserver``."""
        ...


@runtime_checkable
class EventStore(Protocol):
    """A store that keeps the events of runs, for other processes to read (the review page's live view).

    With ``record_events`` true, the runs of an agent whose ``snapshot_store`` it is hand each event
    to ``record_event``; without, they record none (and pay nothing for them). Any instance reads
    the events that any process recorded into the same store.
    """

    record_events: bool

    def record_event(self, event: Event) -> None:
        """Keep ``event`` as the next of its run's events (``stored_dict``), without waiting for the disk."""
        ...

    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> list[StoredEvent]:
        """The run's stored events numbered above ``after``, oldest first, at most ``limit`` of them.

        Raises ``DeserializationError`` for a stored event that cannot be read back: damaged, or
        naming a class the allow-list refuses (``agentfsm.serialization``).
        """
        ...

    def event_count(self, run_id: str) -> int:
        """How many events of the run are stored: the number of the newest (0 when none)."""
        ...
