"""What a snapshot store is: the protocol every store follows, and what it says about runs."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentfsm._core.records import RunDelta
from agentfsm.errors import SnapshotError, ThreadBusyError
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


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A thread a store holds: a chain of runs, its head the run the next turn continues from.

    ``head_seq`` is ``None`` while the head is the head run's newest snapshot (the thread goes on
    with that run); a fork pins it to the snapshot it was made at (``ThreadStore.fork_thread``).
    """

    thread_id: str
    head_run_id: str
    head_seq: int | None
    #: How many runs the chain holds, the runs before a fork point included.
    turns: int
    #: The head run's status: ``done`` (the next messages start a new turn), ``paused`` (decisions
    #: resume it), ``failed`` (it is retried), ``active`` (a run goes on: the thread is busy).
    status: RunStatus | None
    #: The thread this one was forked from.
    parent_thread_id: str | None
    updated_at: str


@dataclass(frozen=True, slots=True)
class ThreadTurn:
    """One run of a thread's chain, oldest first: the messages of its conversation from ``first_message`` on are its own."""

    #: 1 for the thread's first run, then 2, 3...
    number: int
    run_id: str
    status: RunStatus | None
    #: The snapshot whose conversation and State the run continued (``None`` for the thread's first run).
    base_run_id: str | None
    base_seq: int | None
    #: How many messages of the run's conversation came before it (its base's conversation).
    first_message: int
    #: The run's snapshot the next turn of this thread continued from (``None``: its newest).
    until_seq: int | None


def thread_moved(thread_id: str, head_run_id: str | None) -> ThreadBusyError:
    """The refusal of a turn onto a head the thread has left (another run began on it since it was read)."""
    now = f"its head is run {head_run_id!r} now" if head_run_id else "it was removed"
    return ThreadBusyError(
        f"Thread {thread_id!r} moved on since this run read it ({now}): one thread, one timeline. Read the "
        "thread again and send the next messages once its run ended. Nothing ran."
    )


def thread_busy(thread_id: str, run_id: str, status: str | None) -> ThreadBusyError:
    """The refusal of a turn onto a thread whose head run is not done (``status``: the run's)."""
    if status == RunStatus.PAUSED.value:
        why = "is paused: resume it (run(thread=..., decisions=[...]), no messages) before the next turn"
    elif status == RunStatus.FAILED.value:
        why = "failed: retry it (run(thread=...), no messages), or fork the thread at an earlier run"
    else:
        why = (
            "goes on: one thread, one timeline. Wait for it to end; if its process is gone, take it over "
            "(run(thread=..., take_over=True))"
        )
    return ThreadBusyError(f"Thread {thread_id!r}: its run {run_id!r} {why}. Nothing ran.")


def fork_point(
    thread_id: str,
    turns: list[ThreadTurn],
    run_id: str | None,
    seq: int | None,
    history: Callable[[str], list[SnapshotInfo]],
) -> tuple[str, int, int]:
    """Where a fork of the thread whose chain is ``turns`` starts: the run, its snapshot, the turns it shares.

    Raises:
        SnapshotError: the thread is not stored, or the run or snapshot is not of its chain.
    """
    if not turns:
        raise SnapshotError(f"There is no thread {thread_id!r} to fork.")
    chosen = turns[-1] if run_id is None else next((t for t in reversed(turns) if t.run_id == run_id), None)
    if chosen is None:
        raise SnapshotError(
            f"Run {run_id!r} is no turn of thread {thread_id!r}; its turns are {[t.run_id for t in turns]}."
        )
    last = len(history(chosen.run_id)) - 1 if chosen.until_seq is None else chosen.until_seq
    point = last if seq is None else seq
    if last < 0 or not 0 <= point <= last:
        raise SnapshotError(
            f"Run {chosen.run_id!r} of thread {thread_id!r} has snapshots 0 to {last} in this thread; there is no "
            f"number {point} to fork at."
        )
    return chosen.run_id, point, chosen.number


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
class ThreadStore(SnapshotStore, Protocol):
    """A store that holds threads: chains of runs, each continuing the conversation and State of the one before.

    ``begin_turn`` adds a run to a thread in one step with its claim, and only onto the head the
    caller read (``ThreadBusyError`` otherwise: one thread, one timeline). ``save`` and ``release``
    take ``appended``: the run's conversation was only appended to since it started, so the store
    may keep only the messages after those it holds already (a thread's turn costs what it adds).
    """

    def save(self, snapshot: AgentSnapshot, *, appended: bool = False) -> SnapshotInfo:
        """``SnapshotStore.save``; ``appended``: the run's conversation was only appended to since it started."""
        ...

    def release(
        self,
        run_id: str,
        status: RunStatus,
        exit_reason: str | None = None,
        *,
        snapshot: AgentSnapshot | None = None,
        appended: bool = False,
    ) -> None:
        """``SnapshotStore.release``; ``appended`` as for ``save``."""
        ...

    def thread(self, thread_id: str) -> ThreadInfo | None:
        """The thread, or ``None`` for one no run went on in yet."""
        ...

    def threads(self) -> list[ThreadInfo]:
        """Every thread, most recently updated first."""
        ...

    def thread_turns(self, thread_id: str) -> list[ThreadTurn]:
        """The runs of the thread's chain, oldest first (``[]`` for a thread the store does not hold)."""
        ...

    def begin_turn(
        self, thread_id: str, run_id: str, *, head: ThreadInfo | None, base_messages: int, fork: bool = False
    ) -> None:
        """Claim new run ``run_id`` as the thread's next turn, continuing ``head`` (``None``: a new thread).

        ``base_messages``: the messages of the conversation it continues; ``fork``: the run is a fork of
        the head's snapshot (a thread forked mid-run). Raises ``ThreadBusyError`` when the thread's head
        is not ``head`` any more, or its run is active or not done (and the head is not a fork's point).
        """
        ...

    def fork_thread(
        self, thread_id: str, run_id: str | None = None, seq: int | None = None, *, new_thread_id: str | None = None
    ) -> ThreadInfo:
        """A new thread sharing ``thread_id``'s chain up to snapshot ``seq`` of its run ``run_id`` (default: the head run, newest).

        The thread forked is left as it is. ``SnapshotError`` for a run or snapshot that is not of the thread.
        """
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
