"""A stored run's life, declared once: its statuses, the requests that move it, and what each request checks.

Everything that decides what a store does with a run's record lives here, as data (as
``agentfsm.machine`` holds the run's own tables): the statuses a stored run can have
(``RunStatus``, and ``None`` for a run the store does not know yet), the requests that move it
(``Trigger``), the checks a request makes before it moves a run (``TRIGGER_CHECKS``: each edge's
guard is its trigger's checks) and the edges themselves (``LIFECYCLE``). ``move`` is the one
function that reads them: given a run's stored record and a request, it returns the run's new
record, or raises the typed error of the first check that refuses. ``SQLiteSnapshotStore`` and
``JsonFileStore`` read a run's record, ``move`` it and write what comes back; the DBOS records
(``agentfsm.durable.records``) derive a durable run's record with it, and check a continuation
and a cancellation against it.

A claim is a lease: the claiming requests (``claim``, ``take_over``, ``fork``) give the run to a
new claim until ``lease_until``, and only the claim that holds the run may renew it, pause,
cancel, finish or fail it (``WRITERS_CLAIM``): the store applies that check to the record as it
is when it writes (SQLite in the same transaction, and on every batch of snapshots it commits),
so a process whose claim was taken over writes nothing more. Nothing moves a run that is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from agentfsm.errors import MachineError, StaleSnapshotError
from agentfsm.pauses import RunStatus
from agentfsm.snapshot import iso_from_timestamp


class Trigger(StrEnum):
    """What a request asks of a stored run."""

    #: Resume the run from its head (a run the store does not know is registered): this process claims it.
    CLAIM = "claim"
    #: The same, although another process's claim holds the run (``take_over=True``).
    TAKE_OVER = "take_over"
    #: Start a new run from a snapshot of another (``fork=True``): its record names its parent.
    FORK = "fork"
    #: Keep a snapshot from outside the run (a process that does not run it) as its head: it is paused.
    SAVE = "save"
    #: The claim's holder committed: its lease starts again.
    RENEW = "renew"
    #: The holder paused the run (a breakpoint, decisions to take, calls in doubt).
    PAUSE = "pause"
    #: The holder's run was cancelled from outside: it paused on its ``cancel`` edge.
    CANCEL = "cancel"
    #: The holder's run ended in DONE.
    FINISH = "finish"
    #: The holder's run ended in FAILED.
    FAIL = "fail"


#: What a cancelled run's record says of it (its ``exit_reason``).
CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run's record, as a store keeps it and the table reads it."""

    #: ``None`` for a run the store does not know yet.
    status: RunStatus | None = None
    #: The number (``seq``) of the run's newest snapshot, its head; -1 when it has none.
    head: int = -1
    #: The claim that holds the run while it is active, and the ``time.time()`` until which it holds
    #: unless renewed.
    owner: str | None = None
    lease_until: float | None = None
    #: The claims of the last take-over: the one taken over, and the one that took it.
    taken_over_from: str | None = None
    taken_over_by: str | None = None
    #: The run and snapshot a fork started from.
    parent_run_id: str | None = None
    parent_seq: int | None = None
    #: What the run's last ending said: a done run's exit reason, a failed run's error, ``cancelled``.
    exit_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """A request to move a stored run: ``trigger``, made by the claim ``owner``."""

    trigger: Trigger
    #: A new claim for ``claim``, ``take_over``, ``fork`` and ``save``; the holder's own for the others.
    owner: str
    #: Until when the claim holds unless renewed (``claim``, ``take_over``, ``fork``, ``renew``).
    lease_until: float | None = None
    #: The snapshot a claim resumes from (``None``: it does not say).
    seq: int | None = None
    #: The run and snapshot a fork starts from.
    parent: tuple[str, int | None] | None = None
    #: What the run's ending says (``pause``, ``cancel``, ``finish``, ``fail``, ``save``).
    exit_reason: str | None = None
    now: float = field(default_factory=time.time)


def _held(run: StoredRun, request: Request) -> bool:
    """A live claim of another process holds the run."""
    return run.owner is not None and run.owner != request.owner and (run.lease_until or 0.0) > request.now


@dataclass(frozen=True, slots=True)
class Check:
    """A named check of a request: when ``refuses`` holds, ``error`` is raised and the run does not move."""

    name: str
    refuses: Callable[[StoredRun, Request], bool]
    error: Callable[[str, StoredRun, Request], StaleSnapshotError]


NOT_HELD = Check(
    "no other live claim",
    _held,
    lambda run_id, run, request: StaleSnapshotError(
        f"Run {run_id!r} is being run by {run.owner} (its claim holds until "
        f"{iso_from_timestamp(run.lease_until or 0.0)} unless renewed); nothing ran. If that process is gone, "
        "take the run over (take_over=True, or agentfsm resume --take-over).",
        run_id,
        request.seq,
        run.head,
        run.owner,
    ),
)
#: ``NOT_HELD`` for a snapshot saved from outside the run.
NOT_RUNNING = Check(
    "no live claim",
    _held,
    lambda run_id, run, request: StaleSnapshotError(
        f"Run {run_id!r} is being run by {run.owner}: a snapshot cannot be saved into it now.",
        run_id,
        request.seq,
        owner=run.owner,
    ),
)
KNOWS_SEQ = Check(
    "its seq given",
    lambda run, request: run.status is not None and request.seq is None,
    lambda run_id, run, request: StaleSnapshotError(
        f"This snapshot of run {run_id!r} does not say which of its {run.head + 1} stored snapshots it is "
        f"(no seq); nothing ran. Resume store.latest({run_id!r}), or start a new run from it (fork=True).",
        run_id,
        request.seq,
        run.head,
    ),
)
FROM_HEAD = Check(
    "from its head",
    lambda run, request: run.status is not None and request.seq != run.head,
    lambda run_id, run, request: StaleSnapshotError(
        f"Snapshot {request.seq} of run {run_id!r} is not its newest ({run.head}): the run moved on from it "
        "already; nothing ran. Resume the newest, or start a new run from this point (fork=True).",
        run_id,
        request.seq,
        run.head,
    ),
)
WRITERS_CLAIM = Check(
    "the writer's claim",
    lambda run, request: run.owner != request.owner,
    lambda run_id, run, request: StaleSnapshotError(
        f"Run {run_id!r} was taken over by {run.owner or run.taken_over_by or 'another process'} while this "
        f"process ran it (claim {request.owner}); what this process did since it last wrote is not stored.",
        run_id,
        owner=run.owner,
    ),
)


def run_done(run_id: str, seq: int | None, head: int | None) -> StaleSnapshotError:
    """The refusal of anything asked of a run that is done (its snapshot ``seq``; its head)."""
    return StaleSnapshotError(
        f"Run {run_id!r} is done; nothing ran. Start a new run from any of its snapshots (fork=True).",
        run_id,
        seq,
        head,
    )


#: The refusal of any request on a run that is done (the table declares no edge out of it).
ENDED = Check(
    "the run is not done",
    lambda run, request: run.status is RunStatus.DONE,
    lambda run_id, run, request: run_done(run_id, request.seq, run.head),
)

#: What each trigger checks, in order: the first check that refuses raises its error.
TRIGGER_CHECKS: Mapping[Trigger, tuple[Check, ...]] = MappingProxyType(
    {
        Trigger.CLAIM: (NOT_HELD, KNOWS_SEQ, FROM_HEAD),
        Trigger.TAKE_OVER: (KNOWS_SEQ, FROM_HEAD),
        Trigger.FORK: (),
        Trigger.SAVE: (NOT_RUNNING,),
        **dict.fromkeys((Trigger.RENEW, Trigger.PAUSE, Trigger.CANCEL, Trigger.FINISH, Trigger.FAIL), (WRITERS_CLAIM,)),
    }
)


@dataclass(frozen=True, slots=True)
class LifecycleEdge:
    """One declared edge: ``trigger`` moves a stored run from ``source`` (``None``: not stored yet) to ``dest``."""

    trigger: Trigger
    source: RunStatus | None
    dest: RunStatus

    @property
    def condition(self) -> str:
        """What the edge checks, in words (nothing for a run the store does not know: there is nothing to check)."""
        return "; ".join(c.name for c in TRIGGER_CHECKS[self.trigger]) if self.source is not None else ""


S = RunStatus
#: Statuses a stored run never leaves.
TERMINAL_STATUSES: frozenset[RunStatus] = frozenset({S.DONE})

#: A stored run's life. A trigger names one edge out of each status it leaves (``Lifecycle`` checks it).
#: A run the store does not know is registered by the claim that resumes it (or by a snapshot saved
#: into it); a failed run is claimed again from its head (the failed run's record resumes where it failed).
LIFECYCLE: tuple[LifecycleEdge, ...] = (
    *[LifecycleEdge(t, s, S.ACTIVE) for t in (Trigger.CLAIM, Trigger.TAKE_OVER) for s in (None, S.PAUSED, S.FAILED)],
    # A claim whose lease expired is taken over by a claim; a live one by take_over only.
    LifecycleEdge(Trigger.CLAIM, S.ACTIVE, S.ACTIVE),
    LifecycleEdge(Trigger.TAKE_OVER, S.ACTIVE, S.ACTIVE),
    LifecycleEdge(Trigger.FORK, None, S.ACTIVE),
    *[LifecycleEdge(Trigger.SAVE, s, S.PAUSED) for s in (None, S.PAUSED, S.FAILED, S.ACTIVE)],
    LifecycleEdge(Trigger.RENEW, S.ACTIVE, S.ACTIVE),
    LifecycleEdge(Trigger.PAUSE, S.ACTIVE, S.PAUSED),
    LifecycleEdge(Trigger.CANCEL, S.ACTIVE, S.PAUSED),
    LifecycleEdge(Trigger.FINISH, S.ACTIVE, S.DONE),
    LifecycleEdge(Trigger.FAIL, S.ACTIVE, S.FAILED),
)


class Lifecycle:
    """``LIFECYCLE`` as a lookup from (status, trigger) to the status it leads to, checked when built.

    Building it refuses a table with a duplicate edge, an edge out of a terminal status, a trigger
    whose checks are not declared, a status never reached from ``None``, or a status other than
    the terminal ones without a way out.
    """

    __slots__ = ("edges", "moves")

    def __init__(self, edges: Iterable[LifecycleEdge], checks: Mapping[Trigger, tuple[Check, ...]]) -> None:
        """Compile and check ``edges``, whose triggers check ``checks``."""
        self.edges = tuple(edges)
        moves: dict[tuple[RunStatus | None, Trigger], RunStatus] = {}
        for e in self.edges:
            named = e.source.value if e.source else "an unknown run"
            if (e.source, e.trigger) in moves:
                raise MachineError(f"Two lifecycle edges leave {named} on {e.trigger.value!r}; keep one.")
            if e.source in TERMINAL_STATUSES:
                raise MachineError(
                    f"Lifecycle edge {e.trigger.value!r} leaves {named}, a terminal status; "
                    "drop it or take the status out of TERMINAL_STATUSES."
                )
            if e.trigger not in checks:
                raise MachineError(
                    f"Lifecycle trigger {e.trigger.value!r} has no checks declared: give it its entry in "
                    "TRIGGER_CHECKS (an empty tuple when it checks nothing)."
                )
            moves[(e.source, e.trigger)] = e.dest
        reached: set[RunStatus | None] = {None}
        frontier: list[RunStatus | None] = [None]
        while frontier:
            source = frontier.pop()
            for (s, _), dest in moves.items():
                if s == source and dest not in reached:
                    reached.add(dest)
                    frontier.append(dest)
        unreached = sorted(s.value for s in set(RunStatus) - reached if s is not None)
        if unreached:
            raise MachineError(
                f"Stored-run statuses {unreached} are never reached from an unknown run; "
                "declare an edge into them in LIFECYCLE."
            )
        stuck = sorted(s.value for s in set(RunStatus) - TERMINAL_STATUSES - {s for s, _ in moves})
        if stuck:
            raise MachineError(
                f"Stored-run statuses {stuck} have no way out; declare one in LIFECYCLE "
                "or list them in TERMINAL_STATUSES."
            )
        #: (status, trigger) -> the status it leads to.
        self.moves: Mapping[tuple[RunStatus | None, Trigger], RunStatus] = MappingProxyType(moves)


LIFECYCLE_TABLE = Lifecycle(LIFECYCLE, TRIGGER_CHECKS)


def move(run_id: str, run: StoredRun, request: Request) -> StoredRun:
    """The record of ``run`` once ``request`` moved it; the typed error of the first check that refuses.

    The new claim holds an active run until the request's lease; any other status is held by none.
    A request of another claim than the one holding the run takes it over (recorded), a fork names
    its parent, and an ending keeps what it says (``exit_reason``); a claim clears it.
    """
    for check in (*TRIGGER_CHECKS[request.trigger], ENDED):
        if check.refuses(run, request):
            raise check.error(run_id, run, request)
    dest = LIFECYCLE_TABLE.moves.get((run.status, request.trigger))
    if dest is None:
        raise StaleSnapshotError(
            f"Run {run_id!r} is {run.status.value if run.status else 'not stored'}: it cannot {request.trigger.value}; "
            "nothing ran.",
            run_id,
            request.seq,
            run.head,
            run.owner,
        )
    claimed = dest is RunStatus.ACTIVE
    took = run.owner is not None and run.owner != request.owner
    parent = request.parent if run.status is None and request.parent else (run.parent_run_id, run.parent_seq)
    return replace(
        run,
        status=dest,
        owner=request.owner if claimed else None,
        lease_until=request.lease_until if claimed else None,
        taken_over_from=run.owner if took else run.taken_over_from,
        taken_over_by=request.owner if took else run.taken_over_by,
        parent_run_id=parent[0],
        parent_seq=parent[1],
        exit_reason=None if claimed else request.exit_reason,
    )


def claim_trigger(take_over: bool, parent: tuple[str, int | None] | None) -> Trigger:
    """The trigger of ``SnapshotStore.claim``: a fork's, a take-over's, or a plain claim."""
    if parent is not None:
        return Trigger.FORK
    return Trigger.TAKE_OVER if take_over else Trigger.CLAIM


def ending_trigger(status: RunStatus, exit_reason: str | None = None) -> Trigger:
    """The trigger of ``SnapshotStore.release`` leaving the run ``status`` (a cancelled pause is a cancel)."""
    if status is RunStatus.PAUSED:
        return Trigger.CANCEL if exit_reason == CANCELLED else Trigger.PAUSE
    if status is RunStatus.DONE:
        return Trigger.FINISH
    if status is RunStatus.FAILED:
        return Trigger.FAIL
    raise MachineError(f"A run is released done, failed or paused, not {status.value}.")
