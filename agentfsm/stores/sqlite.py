"""SQLiteSnapshotStore: snapshots in one embedded SQLite database, optionally recording every transition.

It keeps every snapshot saved for a run (``history``), returns the newest (``latest``) and lists
runs (``runs``). In *durable* mode it observes runs (``agentfsm.runtime.RunObserver``): it records
a snapshot at every transition and every finished tool call, storing only what changed (new
messages, new trace entries, the fields that differ from the snapshot before), so the cost per
transition does not grow with the conversation. After a crash, ``latest(run_id)`` resumes the run
without repeating finished tool calls.

A durable store commits a run's snapshots when they must be durable: before the run's tools or
decisions start (``agentfsm.machine.COMMIT_ON_ENTRY``, so that the model reply that asked for them
is never requested again), as each tool call finishes, and when the run ends, pauses or fails.
Snapshots of the transitions in between, which follow from the committed ones without any I/O,
are committed with the next of those: a crash can lose them, and resuming re-derives them. Each
commit is one row, whatever the number of snapshots it holds.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from agentfsm.errors import ConfigurationError, SnapshotError
from agentfsm.machine import COMMIT_ON_ENTRY, Phase
from agentfsm.runtime import RunDelta, TransitionRecord
from agentfsm.snapshot import AgentSnapshot, iso_from_timestamp, now_iso
from agentfsm.stores._checkpoint import WAL_RESTART_BYTES, Checkpointer
from agentfsm.stores.base import RunInfo, SnapshotInfo

#: ``PRAGMA user_version`` of the database layout below.
_LAYOUT_VERSION = 3
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    number INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,       -- active, paused, done, failed
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- The key packs the run's number and the number of the batch's first snapshot: a batch is one row
-- of one B-tree (no separate index to update), and a run's batches are one key range.
CREATE TABLE IF NOT EXISTS snapshot_batches (
    key INTEGER PRIMARY KEY,    -- (run number << 32) + seq; the batch holds seq .. seq + count - 1
    count INTEGER NOT NULL,
    phase TEXT NOT NULL,        -- phase and step of the last snapshot held
    step INTEGER NOT NULL,
    full INTEGER NOT NULL,      -- 1: the first snapshot's messages and trace are the whole history
    -- JSON [[new messages, new trace entries, changed fields, created_at], ...]: trace entries are
    -- [step, source, dest, trigger, duration_us]; the first snapshot of a batch has every other
    -- field, the next ones those that changed; created_at is a time.time() value for recorded
    -- snapshots, the snapshot's own string for saved ones.
    entries BLOB NOT NULL
);
PRAGMA user_version = {_LAYOUT_VERSION};
"""
#: Snapshot numbers within a run's key range.
_SEQ_BITS = 32
_LAST_SEQ = (1 << _SEQ_BITS) - 1

#: A stored trace entry's values, in order.
_TRACE_FIELDS = TransitionRecord._fields
_INSERT = "INSERT INTO snapshot_batches VALUES (?, ?, ?, ?, ?, ?)"
_SET_STATUS = "UPDATE runs SET status = ?, updated_at = ? WHERE number = ?"


@dataclass(slots=True)
class _Cursor:
    """What the store will hold of a live run: the snapshots recorded since the last commit."""

    number: int  # the run's row in ``runs``
    next_seq: int
    #: Snapshots recorded but not committed yet (they start at ``next_seq - len(entries)``), and the
    #: run status to commit with them.
    entries: list[list[Any]] = field(default_factory=list)
    full: bool = False
    status: str | None = None
    #: The fields of the last snapshot recorded in ``entries``: the next one stores what differs.
    body: dict[str, Any] | None = None


def _created_at(stored: str | float) -> str:
    """A stored ``created_at`` as the snapshot field: recorded snapshots keep a ``time.time()`` value."""
    return stored if isinstance(stored, str) else iso_from_timestamp(stored)


class SQLiteSnapshotStore:
    """Snapshots in one SQLite file (WAL mode); ``durable=True`` records every transition.

    Each commit writes one row, holding the snapshots recorded since the last commit (a durable
    run commits about twice a step; see the module docstring). One process writes a given run at
    a time (the next snapshot number is kept in memory).

    ``synchronous`` is SQLite's setting, in WAL mode: with ``"NORMAL"`` (the default) a commit
    survives a crash of the process, and a power loss may only roll back the last commits;
    ``"FULL"`` survives a power loss too (an fsync per commit); ``"OFF"`` never waits for the disk,
    survives a crash of the process, but a power loss may corrupt the file.

    >>> store = SQLiteSnapshotStore(":memory:", durable=True)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durable: bool = False,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL"):
            raise ConfigurationError(f"synchronous must be 'OFF', 'NORMAL' or 'FULL', got {synchronous!r}.")
        self.path = os.fspath(path)
        self.durable = durable
        self.synchronous = synchronous
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            new = self._check_layout()  # before any change to a file that may not be ours
        except BaseException:
            self._db.close()
            raise
        wal = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        if new:
            self._db.executescript(_SCHEMA)
        self._cursors: dict[str, _Cursor] = {}
        self._checkpointer: Checkpointer | None = None
        if wal:  # not for ":memory:"
            # A checkpoint copies the WAL into the database and waits for the disk: done in a thread
            # of its own, no commit of a run pays for it (SQLite's advice for low-latency writers).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            # The WAL file is cut back to this size when it starts over (it keeps its largest size otherwise).
            self._db.execute(f"PRAGMA journal_size_limit={WAL_RESTART_BYTES}")
            self._checkpointer = Checkpointer(self.path)
            self._closer = weakref.finalize(self, self._checkpointer.stop)

    def _check_layout(self) -> bool:
        """True for an empty database (the tables are to be made); SnapshotError for someone else's."""
        try:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            tables = self._db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise SnapshotError(f"{self.path} is not an SQLite database: {exc}.") from exc
        if version == _LAYOUT_VERSION:
            return False
        if version == 0 and tables == 0:
            return True
        raise SnapshotError(
            f"{self.path} is not a snapshot database of this agentfsm version (layout {version}, "
            f"expected {_LAYOUT_VERSION}). Use a new file; older snapshots can be moved with "
            "load() and save() from the agentfsm version that wrote them."
        )

    def _number(self, run_id: str) -> int | None:
        """The run's row number in ``runs``, or None for a run this database does not know."""
        with self._lock:
            row = self._db.execute("SELECT number FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        """Commit what is recorded, stop the checkpoint thread and close the database."""
        for run_id, cursor in list(self._cursors.items()):
            self._commit(run_id, cursor)
        if self._checkpointer is not None:
            self._closer()
        self._db.close()

    # -- writing ----------------------------------------------------------------------------------

    def _cursor(self, run_id: str) -> _Cursor:
        """The run's cursor; the first write of a run in this process marks it active."""
        cursor = self._cursors.get(run_id)
        if cursor is None:
            number = self._number(run_id)
            if number is None:
                now = now_iso()
                with self._lock:
                    inserted = self._db.execute(
                        "INSERT INTO runs (run_id, status, created_at, updated_at) VALUES (?, 'active', ?, ?) "
                        "RETURNING number",
                        (run_id, now, now),
                    ).fetchone()
                cursor = _Cursor(number=int(inserted[0]), next_seq=0)
            else:
                cursor = _Cursor(number=number, next_seq=self._count(number), status="active")
            self._cursors[run_id] = cursor
        return cursor

    def _add(
        self,
        run_id: str,
        cursor: _Cursor,
        full: bool,
        messages: list[Any],
        trace: list[Any],
        body: dict[str, Any],
        created_at: str | float,
    ) -> int:
        """Record a snapshot, committed by the next ``_commit``; returns its number. A full one starts a batch."""
        if cursor.next_seq > _LAST_SEQ:
            raise SnapshotError(f"Run {run_id!r} has {cursor.next_seq} snapshots, the most one run can keep.")
        if full and cursor.entries:
            self._commit(run_id, cursor)
        last = cursor.body
        cursor.body = body
        if cursor.entries:
            assert last is not None
            body = {key: value for key, value in body.items() if value != last[key]}
        else:
            cursor.full = full
        cursor.entries.append([messages, trace, body, created_at])
        cursor.next_seq += 1
        return cursor.next_seq - 1

    def _commit(self, run_id: str, cursor: _Cursor) -> None:
        """Commit the run's recorded snapshots as one row, with its status, in one transaction."""
        entries, status = cursor.entries, cursor.status
        if not entries and status is None:
            return
        row = None
        if entries:
            last = cursor.body
            assert last is not None
            first_seq = cursor.next_seq - len(entries)
            blob = orjson.dumps(entries)
            key = (cursor.number << _SEQ_BITS) + first_seq
            row = (key, len(entries), last["phase"], last["step"], cursor.full, blob)
        with self._lock:
            if row is not None and status is None:
                self._db.execute(_INSERT, row)  # autocommit: one statement is atomic on its own
            else:
                now = now_iso()
                self._db.execute("BEGIN")
                try:
                    if row is not None:
                        self._db.execute(_INSERT, row)
                    self._db.execute(_SET_STATUS, (status, now, cursor.number))
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
        # Only once written: a failed commit keeps the snapshots for the next one.
        cursor.entries, cursor.status, cursor.body = [], None, None
        if self._checkpointer is not None:
            self._checkpointer.committed()

    def save(self, snapshot: AgentSnapshot) -> SnapshotInfo:
        """Store a whole snapshot as the newest of its run."""
        data = snapshot.to_dict()
        messages, trace, created_at = data.pop("messages"), data.pop("trace"), data.pop("created_at")
        trace = [[r[name] for name in _TRACE_FIELDS] for r in trace]
        cursor = self._cursor(snapshot.run_id)
        seq = self._add(snapshot.run_id, cursor, True, messages, trace, data, created_at)
        self._commit(snapshot.run_id, cursor)
        return SnapshotInfo(snapshot.run_id, seq, snapshot.phase, snapshot.step, snapshot.created_at)

    def _set_status(self, run_id: str, status: str) -> None:
        cursor = self._cursor(run_id)
        cursor.status = status
        self._commit(run_id, cursor)
        self._cursors.pop(run_id, None)  # the run is no longer written by this process

    def observe(self, delta: RunDelta) -> None:
        """Record a run's snapshot where it now stands; mark the run on reaching an end or a pause."""
        if delta.snapshot is not None:  # the run paused: its snapshot is stored whole
            self.save(delta.snapshot)
            self._set_status(delta.run_id, "paused")
        elif delta.fields is not None:
            cursor = self._cursor(delta.run_id)
            messages = [m.to_dict() for m in delta.messages]
            trace = [list(r) for r in delta.trace]
            # A number, formatted when read: formatting the time costs more than the rest of the snapshot.
            self._add(delta.run_id, cursor, delta.rewritten, messages, trace, delta.fields, time.time())
            if delta.record is None or delta.record.dest in COMMIT_ON_ENTRY:
                self._commit(delta.run_id, cursor)
        elif delta.record is not None:
            self._set_status(delta.run_id, "done" if delta.record.dest is Phase.DONE else "failed")

    # -- reading ----------------------------------------------------------------------------------

    def _batches(self, number: int, seq: int | None = None) -> list[tuple[int, bytes]]:
        """``(first seq, entries)`` of the batches of run ``number`` needed to rebuild snapshot ``seq`` (default: all)."""
        first = number << _SEQ_BITS
        with self._lock:
            if seq is None:
                query = "SELECT key - ?, entries FROM snapshot_batches WHERE key BETWEEN ? AND ? ORDER BY key"
                return self._db.execute(query, (first, first, first + _LAST_SEQ)).fetchall()
            upto = first + min(seq, _LAST_SEQ)
            return self._db.execute(
                "SELECT key - ?, entries FROM snapshot_batches WHERE key <= ? AND key >= "
                "(SELECT COALESCE(MAX(key), ?) FROM snapshot_batches WHERE key BETWEEN ? AND ? AND full = 1) "
                "ORDER BY key",
                (first, upto, first, first, upto),
            ).fetchall()

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """Rebuild snapshot ``seq`` of the run from its last full snapshot and the deltas after it."""
        number = self._number(run_id)
        if number is None:
            raise SnapshotError(f"Run {run_id!r} has no snapshot number {seq}.")
        return self._load(run_id, number, seq)

    def _load(self, run_id: str, run_number: int, seq: int) -> AgentSnapshot:
        messages: list[Any] = []
        trace: list[Any] = []
        for number, new_messages, new_trace, body, created_at in self._replay(run_number, seq):
            messages.extend(new_messages)
            trace.extend(new_trace)
            if number == seq:
                try:
                    fields = [dict(zip(_TRACE_FIELDS, r, strict=True)) for r in trace]
                    created = _created_at(created_at)
                except (TypeError, ValueError) as exc:
                    raise self._damaged(exc) from None
                return AgentSnapshot.from_dict({**body, "messages": messages, "trace": fields, "created_at": created})
        raise SnapshotError(f"Run {run_id!r} has no snapshot number {seq}.")

    def _replay(
        self, run_number: int, seq: int | None = None
    ) -> Iterator[tuple[int, list[Any], list[Any], dict[str, Any], str | float]]:
        """``(number, new messages, new trace, fields, created_at)`` of each stored snapshot needed for ``seq``.

        ``fields`` is every field but messages, trace and created_at: a batch's first snapshot holds
        them all, the next ones what changed (one dict per batch, updated in place: read it before
        the next). ``created_at`` is as stored (see ``_created_at``).
        """
        for first, blob in self._batches(run_number, seq):
            try:
                entries = orjson.loads(blob)
                decoded = [(list(m), list(t), dict(c), at) for m, t, c, at in entries]
            except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
                raise self._damaged(exc) from None
            body: dict[str, Any] = {}
            for number, (new_messages, new_trace, changed, created_at) in enumerate(decoded, start=first):
                body.update(changed)
                yield number, new_messages, new_trace, body, created_at

    def _damaged(self, exc: Exception) -> SnapshotError:
        return SnapshotError(f"A stored snapshot in {self.path} is damaged ({exc}); it cannot be read.")

    def _count(self, number: int) -> int:
        """How many snapshots the run numbered ``number`` has."""
        first = number << _SEQ_BITS
        with self._lock:
            row = self._db.execute(
                "SELECT key - ? + count FROM snapshot_batches WHERE key BETWEEN ? AND ? ORDER BY key DESC LIMIT 1",
                (first, first, first + _LAST_SEQ),
            ).fetchone()
        return 0 if row is None else int(row[0])

    def latest(self, run_id: str) -> AgentSnapshot:
        """The newest snapshot of the run."""
        number = self._number(run_id)
        if number is None or (count := self._count(number)) == 0:
            raise SnapshotError(f"No snapshot of run {run_id!r} in {self.path}.")
        return self._load(run_id, number, count - 1)

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """Every snapshot of the run, oldest first."""
        run_number = self._number(run_id)
        if run_number is None:
            return []
        infos = []
        for number, _messages, _trace, body, created_at in self._replay(run_number):
            try:
                infos.append(SnapshotInfo(run_id, number, Phase(body["phase"]), body["step"], _created_at(created_at)))
            except (KeyError, TypeError, ValueError) as exc:
                raise self._damaged(exc) from None
        return infos

    def runs(self) -> list[RunInfo]:
        """Every run, most recently updated first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT r.run_id, r.status, b.phase, b.step, r.updated_at, b.key - (r.number << ?) + b.count "
                "FROM runs r JOIN snapshot_batches b ON b.key = (SELECT MAX(key) FROM snapshot_batches "
                "WHERE key BETWEEN r.number << ? AND (r.number << ?) + ?) "
                "ORDER BY r.updated_at DESC",
                (_SEQ_BITS, _SEQ_BITS, _SEQ_BITS, _LAST_SEQ),
            ).fetchall()
        return [
            RunInfo(run_id, status, Phase(phase), step, count, updated)
            for run_id, status, phase, step, updated, count in rows
        ]
