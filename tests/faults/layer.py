"""The fault layer: every write a store makes can fail before it happens, fail after it happened, or stall.

A ``Plan`` numbers the writes of the stores that share it (0, 1, 2... in the order they are made)
and names each by what it records (``WRITE_KINDS``): the run's claim, the journal of the calls it
starts (the commit on entering TOOL_RUN), a call's result, a decision, any other transition, a
pause, the run's end. Its ``faults`` say what happens to which write:

- ``before``: the write fails before it happens: nothing is written, the caller gets the error a
  disk or a database gives (``sqlite3.OperationalError``, ``OSError(EIO)``);
- ``after``: the write happens (the commit is durable), then the caller gets that error (Temporal's
  ``ExecuteAndTimeout``: the database did it, the caller saw a timeout);
- ``stall``: the write waits, outside any transaction, while ``Plan.on_stall`` runs (another worker
  takes the run over, say), then goes on.

``FaultySQLiteStore`` puts the plan between the store and its SQLite connection: a write is one
transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) or one statement that commits on its own; it stalls
where it begins and fails at its commit. ``FaultyJsonFileStore`` puts it between the store and the
file system: a write is one file replaced atomically, a claim file created, or a claim file
removed. The layer changes nothing else: the stores are the library's, subclassed only to say which
write is which.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from agentfsm._core.records import RunDelta
from agentfsm.machine import Phase
from agentfsm.pauses import RunStatus
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore
from agentfsm.stores.base import SnapshotInfo


class Fault(StrEnum):
    """What happens to a write."""

    BEFORE = "before"
    AFTER = "after"
    STALL = "stall"
    #: Not a fault a disk makes: a broken store that says it wrote and wrote nothing (the checker must catch it).
    DROP = "drop"


#: What a write records, by the store call that makes it.
WRITE_KINDS = ("claim", "journal", "confirm", "call", "decision", "work", "delta", "pause", "end")


@dataclass(frozen=True, slots=True)
class Write:
    """One write a store made: its number in the plan, what it records, the run, and what it is (a file, a commit)."""

    number: int
    kind: str
    run_id: str
    what: str

    def __str__(self) -> str:
        return f"#{self.number} {self.kind} ({self.what})"


class InjectedFault(Exception):
    """Marks the errors the layer raises (the error the store sees is the driver's own type, raised from this)."""


@dataclass
class Plan:
    """Which writes fail and how (``faults``, by write number), and the record of every write the stores made."""

    faults: dict[int, Fault] = field(default_factory=dict)
    #: Called with the write at a stall, in the writer's thread, before the write begins.
    on_stall: Callable[[Write], None] | None = None
    #: Once a fault hit, every later write fails before it happens: the process stopped there (it
    #: lost its disk, or died), and another takes the run over.
    stop_after_fault: bool = False
    writes: list[Write] = field(default_factory=list)
    #: The faults that happened, in order.
    hit: list[tuple[Write, Fault]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _labels: threading.local = field(default_factory=threading.local, repr=False)

    @contextlib.contextmanager
    def labelled(self, kind: str, run_id: str) -> Iterator[None]:
        """Name the writes this thread makes within as ``kind`` writes of ``run_id`` (the innermost name holds)."""
        stack: list[tuple[str, str]] = self._labels.__dict__.setdefault("stack", [])
        stack.append((kind, run_id))
        try:
            yield
        finally:
            stack.pop()

    def label(self) -> tuple[str, str] | None:
        """The name of the writes this thread makes now; ``None`` outside a store's call (its events thread)."""
        stack: list[tuple[str, str]] = self._labels.__dict__.get("stack", [])
        return stack[-1] if stack else None

    def begin(self, what: str) -> tuple[Write, Fault | None] | None:
        """A write begins: its record and its fault (a stall runs here); ``None`` for a write of no store call."""
        label = self.label()
        if label is None:
            return None
        with self._lock:
            write = Write(len(self.writes), label[0], label[1], what)
            self.writes.append(write)
            fault = self.faults.get(write.number)
            if fault is not None:
                self.hit.append((write, fault))
            elif self.stop_after_fault and self.hit:
                fault = Fault.BEFORE
        if fault is Fault.STALL and self.on_stall is not None:
            self.on_stall(write)
        return write, fault

    def schedule(self) -> str:
        """The faults as the test that reproduces them names them: ``#3 after, #7 stall``."""
        return ", ".join(f"#{n} {f.value}" for n, f in sorted(self.faults.items())) or "no fault"


def _delta_kind(delta: RunDelta, decisions_before: int) -> str:
    """What a durable store's commit of ``delta`` records."""
    record = delta.record
    if record is not None:
        if record.dest is Phase.TOOL_RUN:
            return "journal"
        return "confirm" if record.dest is Phase.CONFIRM else "delta"
    fields = delta.fields or {}
    if len(fields.get("decisions") or ()) > decisions_before:
        return "decision"
    return "call" if fields.get("phase") is Phase.TOOL_RUN else "work"


class _DeltaKinds:
    """Names what the commit of each delta of a durable store records (``_delta_kind``), run by run."""

    def __init__(self) -> None:
        self._decisions: dict[str, int] = {}

    def of(self, delta: RunDelta) -> str:
        kind = _delta_kind(delta, self._decisions.get(delta.run_id, 0))
        if delta.fields is not None:
            self._decisions[delta.run_id] = len(delta.fields.get("decisions") or ())
        return kind


# -- SQLite: a write is a transaction, or a statement that commits on its own -------------------------


class _Dropped:
    """What a dropped write answers: it says it wrote its row."""

    rowcount = 1


class _FaultyRaw:
    """The store's ``sqlite3.Connection``, with the plan between it and every commit."""

    def __init__(self, raw: sqlite3.Connection, plan: Plan) -> None:
        self._raw, self._plan = raw, plan
        self._open: dict[int, tuple[Write, Fault | None] | None] = {}  # thread -> the transaction's write

    def execute(self, sql: str, parameters: Any = ()) -> sqlite3.Cursor:
        thread = threading.get_ident()
        if sql == "BEGIN IMMEDIATE":
            self._open[thread] = self._plan.begin("transaction")
            return self._raw.execute(sql, parameters)
        if sql == "ROLLBACK":
            self._open.pop(thread, None)
            return self._raw.execute(sql, parameters)
        if sql == "COMMIT":
            return self._fail(self._open.pop(thread, None), lambda: self._raw.execute(sql, parameters))
        if sql.startswith("INSERT INTO snapshot_batches SELECT") and not self._raw.in_transaction:
            return self._fail(self._plan.begin("batch"), lambda: self._raw.execute(sql, parameters))
        return self._raw.execute(sql, parameters)

    @staticmethod
    def _fail(begun: tuple[Write, Fault | None] | None, commit: Callable[[], sqlite3.Cursor]) -> sqlite3.Cursor:
        fault = begun[1] if begun else None
        if fault is Fault.DROP:
            return _Dropped()  # type: ignore[return-value]
        if fault is Fault.BEFORE:
            raise sqlite3.OperationalError(f"disk I/O error (injected before write {begun[0]})") from InjectedFault()
        cursor = commit()
        if fault is Fault.AFTER:
            raise sqlite3.OperationalError(f"disk I/O error (injected after write {begun[0]})") from InjectedFault()
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class FaultySQLiteStore(SQLiteSnapshotStore):
    """``SQLiteSnapshotStore`` whose writes go through ``plan``."""

    def __init__(self, path: str | os.PathLike[str], plan: Plan, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.plan = plan
        self._db.raw = _FaultyRaw(self._db.raw, plan)  # type: ignore[assignment]
        self._kinds = _DeltaKinds()

    def claim(
        self, run_id: str, seq: int | None, *, take_over: bool = False, parent: tuple[str, int | None] | None = None
    ) -> None:
        with self.plan.labelled("claim", run_id):
            super().claim(run_id, seq, take_over=take_over, parent=parent)

    def observe(self, delta: RunDelta) -> None:
        with self.plan.labelled(self._kinds.of(delta), delta.run_id):
            super().observe(delta)

    def save(self, snapshot: AgentSnapshot) -> SnapshotInfo:
        with self.plan.labelled("pause", snapshot.run_id):
            return super().save(snapshot)

    def release(
        self, run_id: str, status: RunStatus, exit_reason: str | None = None, *, snapshot: AgentSnapshot | None = None
    ) -> None:
        with self.plan.labelled("end", run_id):
            super().release(run_id, status, exit_reason, snapshot=snapshot)


# -- JSON files: a write is one file written, created or removed --------------------------------------

_ACTIVE = threading.local()  # the plan of the FaultyJsonFileStore call this thread is in


def _plan_here() -> Plan | None:
    return getattr(_ACTIVE, "plan", None)


def _io_error(when: str, write: Write) -> OSError:
    error = OSError(errno.EIO, f"Input/output error (injected {when} write {write})")
    error.__cause__ = InjectedFault()
    return error


def _faulty(begun: tuple[Write, Fault | None] | None, act: Callable[[], Any]) -> Any:
    fault = begun[1] if begun else None
    if fault is Fault.BEFORE:
        assert begun is not None
        raise _io_error("before", begun[0])
    done = act()
    if fault is Fault.AFTER:
        assert begun is not None
        raise _io_error("after", begun[0])
    return done


_real_replace = os.replace
_real_link = os.link
_real_unlink = os.unlink


def _replace(source: Any, target: Any, **kwargs: Any) -> None:
    plan = _plan_here()
    if plan is None:
        return _real_replace(source, target, **kwargs)
    begun = plan.begin(f"file {Path(target).name}")
    return _faulty(begun, lambda: _real_replace(source, target, **kwargs))  # type: ignore[no-any-return]


def _link(source: Any, target: Any, **kwargs: Any) -> None:
    plan = _plan_here()
    if plan is None or Path(target).name != "claim.json":
        return _real_link(source, target, **kwargs)
    begun = plan.begin("claim file created")
    return _faulty(begun, lambda: _real_link(source, target, **kwargs))  # type: ignore[no-any-return]


def _unlink(path: Any, **kwargs: Any) -> None:
    plan = _plan_here()
    if plan is None or Path(path).name != "claim.json":
        return _real_unlink(path, **kwargs)
    begun = plan.begin("claim file removed")
    return _faulty(begun, lambda: _real_unlink(path, **kwargs))  # type: ignore[no-any-return]


_installed = threading.Lock()
_install_count = [0]


@contextlib.contextmanager
def _faults_on_files(plan: Plan) -> Iterator[None]:
    """The file system's writes of this thread go through ``plan`` within (every other thread's as they were)."""
    with _installed:
        if _install_count[0] == 0:
            os.replace, os.link, os.unlink = _replace, _link, _unlink  # type: ignore[assignment]
        _install_count[0] += 1
    outer = _plan_here()
    _ACTIVE.plan = plan
    try:
        yield
    finally:
        _ACTIVE.plan = outer
        with _installed:
            _install_count[0] -= 1
            if _install_count[0] == 0:
                os.replace, os.link, os.unlink = _real_replace, _real_link, _real_unlink


class FaultyJsonFileStore(JsonFileStore):
    """``JsonFileStore`` whose writes (files replaced, claim files created and removed) go through ``plan``."""

    def __init__(self, directory: str | os.PathLike[str], plan: Plan, **kwargs: Any) -> None:
        super().__init__(directory, **kwargs)
        self.plan = plan
        self._kinds = _DeltaKinds()

    @contextlib.contextmanager
    def _writing(self, kind: str, run_id: str) -> Iterator[None]:
        with self.plan.labelled(kind, run_id), _faults_on_files(self.plan):
            yield

    def observe(self, delta: RunDelta) -> None:
        with self._writing(self._kinds.of(delta), delta.run_id):
            super().observe(delta)

    def claim(
        self, run_id: str, seq: int | None, *, take_over: bool = False, parent: tuple[str, int | None] | None = None
    ) -> None:
        with self._writing("claim", run_id):
            super().claim(run_id, seq, take_over=take_over, parent=parent)

    def save(self, snapshot: AgentSnapshot) -> SnapshotInfo:
        with self._writing("pause", snapshot.run_id):
            return super().save(snapshot)

    def release(
        self, run_id: str, status: RunStatus, exit_reason: str | None = None, *, snapshot: AgentSnapshot | None = None
    ) -> None:
        with self._writing("end", run_id):
            super().release(run_id, status, exit_reason, snapshot=snapshot)
