"""SQLiteSnapshotStore: snapshots in one embedded SQLite database, optionally recording every transition.

It keeps every snapshot saved for a run (``history``), returns the newest (``latest``) and lists
runs (``runs``). In *durable* mode it observes runs (``agentfsm._core.runtime.RunObserver``): it records
a snapshot at every transition and every finished tool call, storing only what changed (new
messages, new trace entries, the fields that differ from the snapshot before), so the cost per
transition does not grow with the conversation. After a crash, ``latest(run_id)`` resumes the run
without repeating finished tool calls.

One process at a time runs a stored run, from its newest snapshot (its head): resuming claims
the run in one transaction (``claim``: the snapshot must be the head, and no live claim may hold
the run), every commit of the run is written only while that claim still holds it, and the claim
is a lease that commits renew (``lease_seconds``): once it has expired, another process may take
a crashed run over, and ``take_over=True`` does so before. A process whose claim was taken over
gets ``StaleSnapshotError`` at its next commit, and writes nothing more.

A durable store commits a run's snapshots when they must be durable: before the run's tools or
decisions start (``agentfsm.machine.COMMIT_ON_ENTRY``, so that the model reply that asked for them
is never requested again), as each tool call finishes, and when the run ends, pauses or fails.
Snapshots of the transitions in between, which follow from the committed ones without any I/O,
are committed with the next of those: a crash can lose them, and resuming re-derives them. Each
commit is one row, whatever the number of snapshots it holds.

With ``record_events=True`` it also keeps the events of the runs it stores (``agentfsm.events``),
one row each, numbered per run (``events``, ``event_count``): any process that opens the file, the
review page's live view among them, reads them as they are written. They are written from a
thread of their own (``agentfsm.stores._events``), so no run waits for them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentfsm._core.records import RunDelta, TransitionRecord
from agentfsm.errors import ConfigurationError, SerializationError, SnapshotError, StaleSnapshotError, StoreError
from agentfsm.lifecycle import CANCELLED, Request, StoredRun, Trigger, claim_trigger, ending_trigger, move
from agentfsm.logs import logger
from agentfsm.machine import COMMIT_ON_ENTRY, TERMINAL_PHASES, Phase
from agentfsm.pauses import Cancelled, RunStatus
from agentfsm.serialization import dump_json, load_json
from agentfsm.snapshot import AgentSnapshot, iso_from_timestamp, now_iso
from agentfsm.stores._checkpoint import WAL_RESTART_BYTES, Checkpointer
from agentfsm.stores._events import EventWriter, check_window, read_event
from agentfsm.stores.base import (
    RunInfo,
    SnapshotInfo,
    StoredEvent,
    ThreadInfo,
    ThreadTurn,
    fork_point,
    new_claim,
    of_run,
    thread_busy,
    thread_moved,
)
from agentfsm.stores.summaries import Finding, RunSummary, Summary, waits_for_person

if TYPE_CHECKING:
    from agentfsm.events import Event

#: ``PRAGMA user_version`` of the database layout below.
_LAYOUT_VERSION = 7
#: The columns that layout 4 added to ``runs`` (a layout-3 file gets them when opened): the claim
#: running the run (``host:pid:token``, while it is active), the time.time() until which that claim
#: holds unless renewed, the claim it was last taken over from and the claim that took it over,
#: for a fork, the run and the snapshot it started from, and how a finished run ended.
_CLAIM_COLUMNS = (
    ("owner", "TEXT"),
    ("lease_until", "REAL"),
    ("taken_over_from", "TEXT"),
    ("taken_over_by", "TEXT"),
    ("parent_run_id", "TEXT"),
    ("parent_seq", "INTEGER"),
    ("exit_reason", "TEXT"),
)
#: The table that layout 5 added (a layout-3 or layout-4 file gets it when opened): the events of runs
#: whose store records them, keyed by run, then numbered in the order they were written.
_EVENTS_TABLE = """
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    number INTEGER NOT NULL,    -- 1, 2, ...: the run's events in the order they were written
    data BLOB NOT NULL,         -- the event as agentfsm.events.stored_dict gives it, as JSON
    PRIMARY KEY (run_id, number)
) WITHOUT ROWID;
"""
#: The columns that layout 6 added to ``runs`` (an older file gets them when opened): the thread the
#: run is a turn of, the snapshot whose conversation and State it continued, and how many messages
#: that conversation held (a run's first batch that is not ``full`` holds the messages after them).
_THREAD_COLUMNS = (
    ("thread_id", "TEXT"),
    ("base_run_id", "TEXT"),
    ("base_seq", "INTEGER"),
    ("base_messages", "INTEGER"),
)
#: The table that layout 6 added (an older file gets it when opened): each thread's head.
_THREADS_TABLE = """
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY,
    head_run_id TEXT NOT NULL,
    head_seq INTEGER,           -- NULL: the head run's newest snapshot; a number: a fork's point
    turns INTEGER NOT NULL,
    parent_thread_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
"""
#: The columns that layout 7 added to ``runs`` (an older file gets them when opened, filled from each
#: run's newest snapshot): the run's summary (``agentfsm.stores.summaries``), written with its snapshots.
_SUMMARY_COLUMNS = (
    ("title", "TEXT NOT NULL DEFAULT ''"),  # its first user message, as a title
    ("tools", "TEXT NOT NULL DEFAULT ''"),  # the tools its conversation called, one a line, first called first
    ("waits", "INTEGER NOT NULL DEFAULT 0"),  # 1: its newest snapshot waits for a person (read when paused)
)
#: The table that layout 7 added: what a run's search matches, besides its id. A batch that adds
#: texts or tools adds a row; a batch holding the whole conversation replaces the run's rows.
_TEXTS_TABLE = """
CREATE TABLE IF NOT EXISTS run_texts (
    number INTEGER NOT NULL,    -- the run's number in runs
    part INTEGER NOT NULL,      -- the first snapshot of the batch that added them; -1: those before it
                                -- (a thread's earlier turns, or what an upgraded file held)
    text TEXT NOT NULL,         -- the messages' texts and new tools' names, lower-cased, one a line
    PRIMARY KEY (number, part)
) WITHOUT ROWID;
"""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    number INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,       -- active, paused, done, failed
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    {", ".join(f"{name} {kind}" for name, kind in (*_CLAIM_COLUMNS, *_THREAD_COLUMNS, *_SUMMARY_COLUMNS))}
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
{_EVENTS_TABLE}
{_THREADS_TABLE}
{_TEXTS_TABLE}
PRAGMA user_version = {_LAYOUT_VERSION};
"""
#: The columns of each table of the current layout: a file without one of them is not a store of this layout.
_COLUMNS = {
    "runs": (
        "number",
        "run_id",
        "status",
        "created_at",
        "updated_at",
        *(name for name, _ in (*_CLAIM_COLUMNS, *_THREAD_COLUMNS, *_SUMMARY_COLUMNS)),
    ),
    "snapshot_batches": ("key", "count", "phase", "step", "full", "entries"),
    "events": ("run_id", "number", "data"),
    "threads": ("thread_id", "head_run_id", "head_seq", "turns", "parent_thread_id", "created_at", "updated_at"),
    "run_texts": ("number", "part", "text"),
}
#: Conversations rebuilt for threads' turns, kept by (run id, seq): a stored snapshot never changes.
_KEPT_CONVERSATIONS = 8
#: Snapshot numbers within a run's key range.
_SEQ_BITS = 32
_LAST_SEQ = (1 << _SEQ_BITS) - 1

#: A stored trace entry's values, in order.
_TRACE_FIELDS = TransitionRecord._fields
#: A batch of snapshots: written by the holder of the run's claim only, which the statement checks
#: itself (the lifecycle's ``WRITERS_CLAIM``, applied by the database: one statement is atomic on its own).
_INSERT = (
    "INSERT INTO snapshot_batches SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS "
    "(SELECT 1 FROM runs WHERE number = ? AND owner = ?)"
)
_INSERT_CHECKED = "INSERT INTO snapshot_batches VALUES (?, ?, ?, ?, ?, ?)"
#: A run's record, as the lifecycle has it (``agentfsm.lifecycle.StoredRun``), but its head.
_RECORD = (
    "status",
    "owner",
    "lease_until",
    "taken_over_from",
    "taken_over_by",
    "parent_run_id",
    "parent_seq",
    "exit_reason",
)
_SELECT_RECORD = f"SELECT number, {', '.join(_RECORD)} FROM runs WHERE run_id = ?"
_INSERT_RECORD = (
    f"INSERT INTO runs (run_id, created_at, updated_at, {', '.join(_RECORD)}) VALUES ({', '.join('?' * 11)})"
)
_UPDATE_RECORD = f"UPDATE runs SET updated_at = ?, {', '.join(f'{name} = ?' for name in _RECORD)} WHERE number = ?"
#: A run as ``RunInfo`` has it, and its summary: its newest batch gives its phase, step and number of snapshots.
_SELECT_RUNS = (
    f"SELECT r.run_id, r.status, b.phase, b.step, b.key - (r.number << {_SEQ_BITS}) + b.count, r.updated_at, "
    "r.owner, r.taken_over_from, r.taken_over_by, r.parent_run_id, r.parent_seq, r.exit_reason, "
    "r.title, r.tools, r.waits FROM runs r LEFT JOIN snapshot_batches b ON b.key = (SELECT MAX(key) "
    f"FROM snapshot_batches WHERE key BETWEEN r.number << {_SEQ_BITS} AND (r.number << {_SEQ_BITS}) + {_LAST_SEQ}) "
)
#: A run's status as a list names it (``agentfsm.stores.summaries.named_status``).
_NAMED_STATUS = (
    "(CASE WHEN r.status = 'active' THEN 'running' WHEN r.status = 'paused' AND r.waits THEN 'waiting for approval' "
    "ELSE r.status END)"
)
#: The orders of a list (``agentfsm.web.finding.SORTS``), ties in the order of the last change, newest first.
_ORDERS = {
    "updated": "r.updated_at DESC, r.number DESC",
    "oldest": "r.updated_at, r.number DESC",
    "steps": (
        "COALESCE((SELECT b.step FROM snapshot_batches b WHERE b.key = (SELECT MAX(key) FROM snapshot_batches "
        f"WHERE key BETWEEN r.number << {_SEQ_BITS} AND (r.number << {_SEQ_BITS}) + {_LAST_SEQ})), 0) DESC, "
        "r.updated_at DESC, r.number DESC"
    ),
    "title": "CASE WHEN r.title = '' THEN char(65535) ELSE agentfsm_lower(r.title) END, r.run_id",
}
#: A word of a search, found in a run's id or among its texts.
_WORD_FOUND = (
    "(instr(agentfsm_lower(r.run_id), ?) > 0 OR EXISTS "
    "(SELECT 1 FROM run_texts t WHERE t.number = r.number AND instr(t.text, ?) > 0))"
)
#: The next event of a run: numbered after its newest, in the same statement (atomic on its own).
_INSERT_EVENT = "INSERT INTO events SELECT ?, COALESCE(MAX(number), 0) + 1, ? FROM events WHERE run_id = ?"


class _Connection:
    """The store's SQLite connection: an error SQLite raises is a ``StoreError`` saying why, never ``sqlite3``'s own.

    An ``IntegrityError`` (a snapshot's number taken) is the store's to read, and passes as it is.
    """

    __slots__ = ("lock_timeout", "path", "raw")

    def __init__(self, path: str, lock_timeout: float) -> None:
        # Another process's transaction is waited for (it is short) rather than failed, up to lock_timeout.
        self.raw = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=lock_timeout)
        # Searches lower-case a run's id as Python does (SQLite's lower() knows ASCII only).
        self.raw.create_function("agentfsm_lower", 1, _lower, deterministic=True)
        self.path, self.lock_timeout = path, lock_timeout

    def execute(self, sql: str, parameters: Iterable[Any] = ()) -> _Rows:
        """``sqlite3.Connection.execute``, its errors as ``StoreError``."""
        with self.mapped():
            return _Rows(self.raw.execute(sql, tuple(parameters)), self)

    def executemany(self, sql: str, rows: Iterable[tuple[Any, ...]]) -> _Rows:
        """``sqlite3.Connection.executemany``, its errors as ``StoreError``."""
        with self.mapped():
            return _Rows(self.raw.executemany(sql, rows), self)

    def executescript(self, script: str) -> None:
        """``sqlite3.Connection.executescript``, its errors as ``StoreError``."""
        with self.mapped():
            self.raw.executescript(script)

    def close(self) -> None:
        """Close the connection."""
        self.raw.close()

    @contextlib.contextmanager
    def mapped(self) -> Iterator[None]:
        """Raise what SQLite raises within as a ``StoreError`` (but an ``IntegrityError``)."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise self.error(str(exc)) from None
        except UnicodeEncodeError:
            raise StoreError(
                f"{self.path} cannot store a text holding a lone surrogate (a run id made from a file name that "
                "is not UTF-8?): SQLite keeps text as UTF-8. Nothing was written."
            ) from None

    def error(self, reason: str) -> StoreError:
        """The ``StoreError`` for what SQLite said, with the likely cause."""
        if "locked" in reason:
            return StoreError(
                f"{self.path} is locked by another process past the store's lock_timeout of {self.lock_timeout:g} s "
                f"({reason}): nothing was written. Try again once it lets go, or raise lock_timeout."
            )
        if "malformed" in reason or "not a database" in reason or "disk I/O" in reason:
            return StoreError(f"{self.path} is damaged ({reason}): what it holds there cannot be read.")
        if "no such" in reason:
            return StoreError(f"{self.path} is not a snapshot database of this layout ({reason}).")
        return StoreError(f"{self.path} cannot be used: {reason}.")


def _lower(value: str | None) -> str | None:
    return value.lower() if isinstance(value, str) else value


class _Rows:
    """A query's rows, read as ``sqlite3.Cursor`` reads them, their errors as ``StoreError``."""

    __slots__ = ("_connection", "_cursor")

    def __init__(self, cursor: sqlite3.Cursor, connection: _Connection) -> None:
        self._cursor, self._connection = cursor, connection

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        with self._connection.mapped():
            return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        """The rows left."""
        with self._connection.mapped():
            return self._cursor.fetchall()

    @property
    def rowcount(self) -> int:
        """The rows the statement changed."""
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        """The row the statement inserted."""
        return self._cursor.lastrowid


@dataclass(slots=True)
class _Cursor:
    """What the store will hold of a live run: the snapshots recorded since the last commit."""

    number: int | None  # the run's row in ``runs``; None for a new run until its first commit registers it
    next_seq: int
    #: The claim under which this process writes the run, and when to renew its lease.
    owner: str
    renew_at: float
    #: Snapshots recorded but not committed yet (they start at ``next_seq - len(entries)``), and the
    #: ending (a pause, a cancel, the run's end) to commit with them.
    entries: list[list[Any]] = field(default_factory=list)
    full: bool = False
    ending: Request | None = None
    #: The fields of the last snapshot recorded in ``entries``: the next one stores what differs.
    body: dict[str, Any] | None = None
    #: How many messages and trace entries the run's stored and recorded snapshots hold, up to the
    #: last one (``None``: not counted yet; ``_held`` counts them when a write needs them).
    messages: int | None = None
    trace: int | None = None
    #: Whether the last snapshot recorded waits for a person (``waits_for_person``; only saved ones can).
    waits: bool = False


def _insert_events(db: _Connection, lock: threading.RLock, run_id: str, encoded: list[bytes]) -> None:
    """Write a run's events after its stored ones, in one transaction (the writer thread of ``EventWriter``)."""
    with lock, _writing(db):
        db.executemany(_INSERT_EVENT, [(run_id, data, run_id) for data in encoded])


@contextlib.contextmanager
def _writing(db: _Connection) -> Iterator[None]:
    """One transaction begun for writing (no other writer comes between its reads and its writes), committed at the end.

    Rolled back if the block raises. A ``COMMIT`` that raised may have committed all the same (the
    database did it, the caller got an error): there is nothing to roll back then, and the error the
    caller sees must be the commit's, not "cannot rollback - no transaction is active".
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.raw.in_transaction:
            db.execute("ROLLBACK")
        raise


def _tells(entries: list[list[Any]]) -> bool:
    """Whether recorded snapshots add messages with a text or a tool call: what a run's summary is made of."""
    return any(
        isinstance(part, dict) and ("text" in part or "tool_call" in part)
        for entry in entries
        for message in entry[0]
        for part in message.get("content") or ()
    )


def _created_at(stored: str | float) -> str:
    """A stored ``created_at`` as the snapshot field: recorded snapshots keep a ``time.time()`` value."""
    return stored if isinstance(stored, str) else iso_from_timestamp(stored)


class SQLiteSnapshotStore:
    """Snapshots in one SQLite file (WAL mode); ``durable=True`` records every transition.

    Each commit writes one row, holding the snapshots recorded since the last commit (a durable
    run commits about twice a step; see the module docstring). One claim writes a given run at a
    time; ``lease_seconds`` is how long a claim holds without a commit (commits renew it).

    ``synchronous`` is SQLite's setting, in WAL mode: with ``"NORMAL"`` (the default) a commit
    survives a crash of the process, and a power loss may only roll back the last commits;
    ``"FULL"`` survives a power loss too (an fsync per commit); ``"OFF"`` never waits for the disk,
    survives a crash of the process, but a power loss may corrupt the file.

    ``record_events=True`` keeps the events of the runs of agents whose store it is (an
    ``EventStore``; see the module docstring); every instance reads them (``events``).

    >>> store = SQLiteSnapshotStore(":memory:", durable=True)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durable: bool = False,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        lease_seconds: float = 60.0,
        record_events: bool = False,
        lock_timeout: float = 30.0,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL"):
            raise ConfigurationError(f"synchronous must be 'OFF', 'NORMAL' or 'FULL', got {synchronous!r}.")
        if not lease_seconds > 0:
            raise ConfigurationError(f"lease_seconds must be > 0, got {lease_seconds!r}.")
        self.path = os.fspath(path)
        self.durable = durable
        self.synchronous = synchronous
        self.lease_seconds = lease_seconds
        self.record_events = record_events
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, int | float) or not lock_timeout >= 0:
            raise ConfigurationError(f"lock_timeout must be a number of seconds >= 0, got {lock_timeout!r}.")
        self._lock = threading.RLock()
        self._db = _Connection(self.path, lock_timeout)
        try:
            layout = self._check_layout()  # before any change to a file that may not be ours
        except BaseException:
            self._db.close()
            raise
        wal = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        if layout == 0:
            self._db.executescript(_SCHEMA)
        self._cursors: dict[str, _Cursor] = {}
        #: Conversations of threads' turns rebuilt lately (``_conversation``), newest last.
        self._conversations: dict[tuple[str, int], list[Any]] = {}
        #: The runs this store runs, and the claim under which it does.
        self._claims: dict[str, str] = {}
        #: Runs this store ran until another process took them over, and the claim each lost.
        self._lost: dict[str, str] = {}
        if layout not in (0, _LAYOUT_VERSION):
            self._upgrade(layout)
        self._checkpointer: Checkpointer | None = None
        if wal:  # not for ":memory:"
            # A checkpoint copies the WAL into the database and waits for the disk: done in a thread
            # of its own, no commit of a run pays for it (SQLite's advice for low-latency writers).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            # The WAL file is cut back to this size when it starts over (it keeps its largest size otherwise).
            self._db.execute(f"PRAGMA journal_size_limit={WAL_RESTART_BYTES}")
            self._checkpointer = Checkpointer(self.path)
            self._closer = weakref.finalize(self, self._checkpointer.stop)
        # Its thread starts with the first event; what it holds at exit is written then.
        self._events = EventWriter(
            functools.partial(_insert_events, self._db, self._lock), name="agentfsm-sqlite-events"
        )
        self._events_closer = weakref.finalize(self, self._events.stop)

    def _check_layout(self) -> int:
        """The layout to bring up to date (0: an empty database); SnapshotError for someone else's."""
        try:
            version = self._db.raw.execute("PRAGMA user_version").fetchone()[0]
            tables = self._db.raw.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not an SQLite database: {exc}.") from None
        if version == _LAYOUT_VERSION:
            for table, columns in _COLUMNS.items():
                found = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})").fetchall()}
                missing = [column for column in columns if column not in found]
                if missing:
                    raise StoreError(
                        f"{self.path} is not a snapshot database of this layout: table {table} has no column "
                        f"{missing[0]} (someone changed its tables)."
                    )
            return _LAYOUT_VERSION
        if version == 0 and tables == 0:
            return 0
        if version in (
            3,
            4,
            5,
            6,
        ):  # without the claims' columns (3), the events (3, 4), threads (3-5), summaries (3-6)
            return int(version)
        raise SnapshotError(
            f"{self.path} is not a snapshot database of this agentfsm version (layout {version}, "
            f"expected {_LAYOUT_VERSION}). Use a new file; older snapshots can be moved with "
            "load() and save() from the agentfsm version that wrote them."
        )

    def _upgrade(self, layout: int) -> None:
        """Bring a file of an older layout (3 to 6) up to date, in one transaction: each run's summary from its newest snapshot."""
        columns = [
            *(_CLAIM_COLUMNS if layout == 3 else ()),
            *(_THREAD_COLUMNS if layout < 6 else ()),
            *_SUMMARY_COLUMNS,
        ]
        with self._lock, _writing(self._db):
            for name, kind in columns:
                self._db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
            for table in (_EVENTS_TABLE, _THREADS_TABLE, _TEXTS_TABLE):
                self._db.execute(table)
            for number, run_id in self._db.execute("SELECT number, run_id FROM runs").fetchall():
                self._summarise_stored(number, run_id)
            self._db.execute(f"PRAGMA user_version = {_LAYOUT_VERSION}")

    def _summarise_stored(self, number: int, run_id: str, seq: int | None = None) -> None:
        """Write the summary of the run's snapshot ``seq`` (default: its newest), a run it cannot read left unsummarised."""
        count = self._count(number)
        if count == 0:
            return
        try:
            snapshot = self._load(run_id, number, count - 1 if seq is None else seq)
        except (SnapshotError, StoreError) as exc:  # reading the run says so; the others are summarised
            logger.warning("run left unsummarised", run_id=str(run_id)[:80], error=str(exc)[:200])
            return
        self._write_summary(number, -1, Summary.of(snapshot.messages), waits_for_person(snapshot), whole=True)

    def _write_summary(self, number: int, part: int, summary: Summary, waits: bool, *, whole: bool) -> None:
        """Write the run's summary (within a transaction); ``whole``: its texts replace those stored, else they add to them."""
        if whole:
            self._db.execute("DELETE FROM run_texts WHERE number = ?", (number,))
        if summary.texts:
            self._db.execute("INSERT INTO run_texts VALUES (?, ?, ?)", (number, part, "\n".join(summary.texts)))
        self._db.execute(
            "UPDATE runs SET title = ?, tools = ?, waits = ? WHERE number = ?",
            (summary.title, "\n".join(summary.tools), int(waits), number),
        )

    def _summarise(self, number: int, first_seq: int, entries: list[list[Any]], full: bool, waits: bool) -> None:
        """Write what a batch of snapshots changes in the run's summary, in the transaction that writes the batch."""
        messages = (m for entry in entries for m in entry[0])
        if full:
            self._write_summary(number, first_seq, Summary.of(messages), waits, whole=True)
            return
        title, tools = self._db.execute("SELECT title, tools FROM runs WHERE number = ?", (number,)).fetchone()
        summary = Summary(title, tools.split("\n") if tools else [])
        summary.texts = summary.add(messages)
        self._write_summary(number, first_seq, summary, waits, whole=False)

    def _number(self, run_id: str) -> int | None:
        """The run's row number in ``runs``, or None for a run this database does not know."""
        with self._lock:
            row = self._db.execute("SELECT number FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        """Commit what is recorded, write the events queued, stop the threads and close the database."""
        for run_id, cursor in list(self._cursors.items()):
            self._commit(run_id, cursor)
        self._events_closer()
        if self._checkpointer is not None:
            self._closer()
        self._db.close()

    # -- the run's record: read, moved by the lifecycle, written -------------------------------------

    def _stored(self, run_id: str) -> tuple[int | None, StoredRun]:
        """The run's row number (None: not stored) and its record, as the lifecycle reads it."""
        row = self._db.execute(_SELECT_RECORD, (run_id,)).fetchone()
        if row is None:
            return None, StoredRun()
        number, status, *rest = row
        try:
            return number, StoredRun(RunStatus(status), self._count(number) - 1, *rest)
        except ValueError as exc:
            raise self._damaged(exc) from None

    def _move(
        self,
        run_id: str,
        request: Request | None,
        batch: Callable[[int, int], tuple[Any, ...]] | None = None,
        *,
        claim: Request | None = None,
        within: Callable[[int], None] | None = None,
    ) -> int:
        """Move the run as the lifecycle decides and write its new record, and ``batch``'s row: the run's number.

        ``batch(number, head)`` is the row of snapshots to write with it (the run's number, its head
        before); ``claim``, a new run's claim, moves it first; ``within(number)`` writes more in the
        same transaction (a thread's turn), or raises to write nothing. One transaction, begun for
        writing: no other writer comes between the check and the write.
        """
        with self._lock, _writing(self._db):
            number, run = self._stored(run_id)
            moved = run
            for step in (claim, request):
                if step is not None:
                    moved = move(run_id, moved, step)
            values = [getattr(moved, name) for name in _RECORD]
            if number is None:
                number = self._db.execute(_INSERT_RECORD, (run_id, now_iso(), now_iso(), *values)).lastrowid
                assert number is not None
            else:
                self._db.execute(_UPDATE_RECORD, (now_iso(), *values, number))
            if batch is not None:
                self._db.execute(_INSERT_CHECKED, batch(number, run.head))
            if within is not None:
                within(number)
        return number

    # -- claims ---------------------------------------------------------------------------------

    def claim(
        self, run_id: str, seq: int | None, *, take_over: bool = False, parent: tuple[str, int | None] | None = None
    ) -> None:
        """Take the run from its snapshot ``seq`` to run it in this process (see ``SnapshotStore.claim``)."""
        owner = new_claim()
        request = Request(
            claim_trigger(take_over, parent), owner, time.time() + self.lease_seconds, seq=seq, parent=parent
        )
        try:
            self._move(run_id, request)
        except StoreError:
            # A commit that reported an error may have happened: the run is this claim's if the record says so.
            if self._record_of(run_id).owner != owner:
                raise
            logger.warning("a claim's commit reported an error, yet it is stored", run_id=run_id)
        self._claims[run_id] = owner
        self._lost.pop(run_id, None)
        self._cursors.pop(run_id, None)

    def release(
        self,
        run_id: str,
        status: RunStatus,
        exit_reason: str | None = None,
        *,
        snapshot: AgentSnapshot | None = None,
        appended: bool = False,
    ) -> None:
        """Commit what is recorded of the run and give up this process's claim, leaving the run ``status``.

        A finished run's record is ``snapshot`` or, in a durable store, the one recorded at its last edge
        (``observe``), which keeps ``exit_reason`` (a failed run's error) too. ``appended``: the run's
        conversation was only appended to since it started (a thread's turn): only what it added is written.
        """
        if run_id not in self._claims:
            return
        cursor = self._cursor(run_id)
        if snapshot is not None:
            self._add_whole(cursor, snapshot, appended)
        elif cursor.entries and cursor.body is not None and cursor.body["phase"] in TERMINAL_PHASES:
            cursor.entries[-1][2]["exit_reason"] = cursor.body["exit_reason"] = exit_reason
        cursor.ending = Request(ending_trigger(status, exit_reason), cursor.owner, exit_reason=exit_reason)
        self._commit(run_id, cursor)

    # -- threads ----------------------------------------------------------------------------------

    def thread(self, thread_id: str) -> ThreadInfo | None:
        """The thread, or ``None`` for one no run went on in yet."""
        found = self._threads("WHERE t.thread_id = ?", (thread_id,))
        return found[0] if found else None

    def threads(self) -> list[ThreadInfo]:
        """Every thread, most recently updated first."""
        return self._threads("ORDER BY t.updated_at DESC", ())

    def _threads(self, where: str, parameters: tuple[Any, ...]) -> list[ThreadInfo]:
        with self._lock:
            rows = self._db.execute(
                "SELECT t.thread_id, t.head_run_id, t.head_seq, t.turns, r.status, t.parent_thread_id, t.updated_at "
                f"FROM threads t LEFT JOIN runs r ON r.run_id = t.head_run_id {where}",
                parameters,
            ).fetchall()
        try:
            return [
                ThreadInfo(t, run, seq, turns, status and RunStatus(status), *rest)
                for t, run, seq, turns, status, *rest in rows
            ]
        except ValueError as exc:
            raise self._damaged(exc) from None

    def thread_turns(self, thread_id: str) -> list[ThreadTurn]:
        """The runs of the thread's chain, oldest first, read back from its head along each run's base."""
        info = self.thread(thread_id)
        if info is None:
            return []
        chain: list[tuple[str, RunStatus | None, str | None, int | None, int, int | None]] = []
        at, until = info.head_run_id, info.head_seq
        with self._lock:
            while at is not None:
                row = self._db.execute(
                    "SELECT status, base_run_id, base_seq, base_messages FROM runs WHERE run_id = ?", (at,)
                ).fetchone()
                if row is None:
                    raise self._damaged(ValueError(f"thread {thread_id!r} names run {at!r}, which is not stored"))
                status, base_run, base_seq, count = row
                chain.append((at, status and RunStatus(status), base_run, base_seq, int(count or 0), until))
                at, until = base_run, base_seq
        return [ThreadTurn(number, *entry) for number, entry in enumerate(reversed(chain), start=1)]

    def begin_turn(
        self, thread_id: str, run_id: str, *, head: ThreadInfo | None, base_messages: int, fork: bool = False
    ) -> None:
        """Claim new run ``run_id`` as the thread's next turn, continuing ``head`` (see ``ThreadStore.begin_turn``)."""
        owner = new_claim()
        parent = (head.head_run_id, head.head_seq) if fork and head is not None else None
        request = Request(claim_trigger(False, parent), owner, time.time() + self.lease_seconds, parent=parent)

        def add_turn(number: int) -> None:
            base_run, base_seq, turns = self._check_head(thread_id, head)
            now = now_iso()
            self._db.execute(
                "UPDATE runs SET thread_id = ?, base_run_id = ?, base_seq = ?, base_messages = ? WHERE number = ?",
                (thread_id, base_run, base_seq, base_messages if base_run is not None else 0, number),
            )
            if base_run is not None and base_seq is not None:
                self._continue_summary(number, base_run, base_seq)
            self._db.execute(
                "INSERT INTO threads VALUES (?, ?, NULL, ?, NULL, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET "
                "head_run_id = excluded.head_run_id, head_seq = NULL, turns = excluded.turns, updated_at = excluded.updated_at",
                (thread_id, run_id, turns + 1, now, now),
            )

        with self._lock:
            if self._number(run_id) is not None:
                raise ConfigurationError(f"Run {run_id!r} is stored already: a thread's next turn is a new run.")
            self._move(run_id, request, within=add_turn)
        self._claims[run_id] = owner
        self._lost.pop(run_id, None)
        self._cursors.pop(run_id, None)

    def _check_head(self, thread_id: str, head: ThreadInfo | None) -> tuple[str | None, int | None, int]:
        """The base and the turns of a thread standing where ``head`` says (in a write's transaction); else ``ThreadBusyError``."""
        row = self._db.execute(
            "SELECT t.head_run_id, t.head_seq, t.turns, r.status, r.number FROM threads t "
            "LEFT JOIN runs r ON r.run_id = t.head_run_id WHERE t.thread_id = ?",
            (thread_id,),
        ).fetchone()
        if head is None:
            if row is not None:
                raise thread_moved(thread_id, str(row[0]))
            return None, None, 0
        if row is None or (row[0], row[1]) != (head.head_run_id, head.head_seq):
            raise thread_moved(thread_id, None if row is None else str(row[0]))
        head_run, head_seq, turns, status, number = row
        if head_seq is None:
            if status != RunStatus.DONE.value:
                raise thread_busy(thread_id, head_run, status)
            head_seq = self._count(number) - 1
        return head_run, head_seq, int(turns)

    def _continue_summary(self, number: int, base_run: str, base_seq: int) -> None:
        """Begin a thread's turn's summary with that of the conversation it continues (snapshot ``base_seq`` of ``base_run``).

        Copied from the base run's when that is its newest snapshot; else (a fork's point) made from its conversation.
        """
        base = self._number(base_run)
        if base is not None and self._count(base) - 1 == base_seq:
            self._db.execute(
                "UPDATE runs SET (title, tools) = (SELECT title, tools FROM runs WHERE number = ?) WHERE number = ?",
                (base, number),
            )
            self._db.execute(
                "INSERT INTO run_texts SELECT ?, -1, group_concat(text, char(10)) FROM run_texts WHERE number = ? "
                "HAVING COUNT(*) > 0",
                (number, base),
            )
        else:
            self._write_summary(number, -1, Summary.of(self._conversation(base_run, base_seq)), False, whole=True)

    def fork_thread(
        self, thread_id: str, run_id: str | None = None, seq: int | None = None, *, new_thread_id: str | None = None
    ) -> ThreadInfo:
        """A new thread sharing ``thread_id``'s chain up to snapshot ``seq`` of its run ``run_id`` (see ``ThreadStore``)."""
        turns = self.thread_turns(thread_id)
        run, point, number = fork_point(thread_id, turns, run_id, seq, self.history)
        new_id = new_thread_id or uuid.uuid4().hex
        now = now_iso()
        with self._lock, _writing(self._db):
            if self._db.execute("SELECT 1 FROM threads WHERE thread_id = ?", (new_id,)).fetchone():
                raise ConfigurationError(f"Thread {new_id!r} exists already: fork into a new thread id.")
            self._db.execute(
                "INSERT INTO threads VALUES (?, ?, ?, ?, ?, ?, ?)",
                (new_id, run, point, number, thread_id, now, now),
            )
        info = self.thread(new_id)
        assert info is not None
        return info

    def _lose(self, run_id: str, owner: str) -> None:
        """This process lost the run (another took its claim ``owner`` over): its writes are refused from now on."""
        self._cursors.pop(run_id, None)
        self._claims.pop(run_id, None)
        self._lost[run_id] = owner

    # -- writing ----------------------------------------------------------------------------------

    def _cursor(self, run_id: str) -> _Cursor:
        """The run's cursor; a run this store does not know is claimed by its first commit (``_commit``).

        A run this process lost keeps the claim it lost: its commits are refused (``WRITERS_CLAIM``).
        """
        cursor = self._cursors.get(run_id)
        if cursor is None:
            owner = self._claims.get(run_id) or self._lost.get(run_id)
            if owner is None:
                return self._new_run(run_id)
            number = self._number(run_id)
            assert number is not None
            renew_at = time.time() + self.lease_seconds / 3
            cursor = _Cursor(number, self._count(number), owner, renew_at)
            self._cursors[run_id] = cursor
        return cursor

    def _new_run(self, run_id: str) -> _Cursor:
        """The cursor of a run to register: a run id in use is refused now, before the run does anything.

        Its claim is written by its first commit, in the same transaction as its first snapshots: a
        process that stops before that leaves nothing stored, never a run claimed with nothing to resume.
        """
        owner = new_claim()
        with self._lock:
            move(run_id, self._stored(run_id)[1], Request(Trigger.CLAIM, owner, time.time() + self.lease_seconds))
        cursor = _Cursor(None, 0, owner, 0.0)
        self._claims[run_id] = owner
        self._lost.pop(run_id, None)
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
        waits: bool = False,
    ) -> int:
        """Record a snapshot, committed by the next ``_commit``; returns its number. A full one starts a batch.

        ``waits``: the snapshot waits for a person (``waits_for_person``).
        """
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
        if full:
            cursor.messages, cursor.trace = len(messages), len(trace)
        elif cursor.messages is not None and cursor.trace is not None:
            cursor.messages, cursor.trace = cursor.messages + len(messages), cursor.trace + len(trace)
        cursor.entries.append([messages, trace, body, created_at])
        cursor.waits = waits
        cursor.next_seq += 1
        return cursor.next_seq - 1

    def _commit(self, run_id: str, cursor: _Cursor) -> None:
        """Commit the run's recorded snapshots as one row, in one transaction with its ending, if any.

        Written only while this process's claim holds the run (else the lifecycle's
        ``StaleSnapshotError``): a batch alone is one statement that checks the claim itself; an
        ending (pause, cancel, end), and a commit after a third of the lease (which renews it), move
        the run's record in the same transaction.
        """
        entries, ending = cursor.entries, cursor.ending
        if not entries and ending is None:
            return
        batch: Callable[[int], tuple[Any, ...]] | None = None
        summarise: Callable[[int], None] | None = None
        if entries:
            last = cursor.body
            assert last is not None
            first_seq = cursor.next_seq - len(entries)
            try:
                encoded = dump_json(entries)
            except SerializationError:
                self._give_up(run_id, cursor, first_seq)
                raise
            phase, step, full, count = last["phase"], last["step"], cursor.full, len(entries)

            def batch(number: int) -> tuple[Any, ...]:
                return ((number << _SEQ_BITS) + first_seq, count, phase, step, full, encoded)

            if full or _tells(entries):
                waits = cursor.waits

                def summarise(number: int) -> None:
                    self._summarise(number, first_seq, entries, full, waits)

        now = time.time()
        try:
            with self._lock:
                if cursor.number is None:  # a new run: its claim, its first snapshots (and its ending) at once
                    claim = Request(Trigger.CLAIM, cursor.owner, now + self.lease_seconds)
                    rows = None if batch is None else (lambda number, head: batch(number))
                    cursor.number = self._move(run_id, ending, rows, claim=claim, within=summarise)
                    cursor.renew_at = now + self.lease_seconds / 3
                # A batch that the claim's check refused (taken over) goes the checked way: the lifecycle says why.
                elif not (
                    ending is None
                    and now < cursor.renew_at
                    and batch is not None
                    and self._append(cursor.number, cursor.owner, batch(cursor.number), summarise)
                ):
                    request = ending or Request(Trigger.RENEW, cursor.owner, now + self.lease_seconds)
                    rows = None if batch is None else (lambda number, head: batch(number))
                    self._move(run_id, request, rows, within=summarise)
                    cursor.renew_at = now + self.lease_seconds / 3
        except (StoreError, StaleSnapshotError, sqlite3.IntegrityError) as exc:
            # The write reported an error, yet it may have happened (the database committed, the caller
            # got an error; a retry of it then finds its own rows): written is written, and the run goes on.
            if not self._committed_before(run_id, cursor, batch, ending):
                self._failed_commit(run_id, cursor, exc)
            logger.warning("a commit reported an error, yet it is stored", run_id=run_id, error=str(exc)[:200])
        # Only once written: a failed commit keeps the snapshots for the next one. The last one's fields
        # stay (``body``): the record of the run's end is written from them.
        cursor.entries, cursor.ending = [], None
        if ending is not None:  # the run is no longer written by this process
            self._cursors.pop(run_id, None)
            self._claims.pop(run_id, None)
        if self._checkpointer is not None:
            self._checkpointer.committed()

    def _append(self, number: int, owner: str, row: tuple[Any, ...], summarise: Callable[[int], None] | None) -> bool:
        """Write a batch while claim ``owner`` holds the run, and what it changes in the run's summary: whether it did.

        A batch alone is one statement, which checks the claim itself; with its summary, one transaction.
        """
        if summarise is None:
            return bool(self._db.execute(_INSERT, (*row, number, owner)).rowcount == 1)
        with _writing(self._db):
            if self._db.execute(_INSERT, (*row, number, owner)).rowcount != 1:
                return False  # nothing was written (another claim holds the run): an empty transaction ends
            summarise(number)
        return True

    def _failed_commit(self, run_id: str, cursor: _Cursor, exc: BaseException) -> None:
        """Raise for a commit that did not happen: the snapshots recorded stay for the next commit."""
        if isinstance(exc, sqlite3.IntegrityError):  # the snapshots' numbers are taken: the file was changed
            if cursor.entries:
                self._give_up(run_id, cursor, cursor.next_seq - len(cursor.entries))
            raise self._damaged(exc) from None
        if isinstance(exc, StaleSnapshotError):
            logger.warning("a write was refused: the run was taken over", run_id=run_id, error=str(exc)[:300])
            self._lose(run_id, cursor.owner)
        raise exc

    def _record_of(self, run_id: str) -> StoredRun:
        """The run's record as stored now (an empty one for a run not stored, or when it cannot be read)."""
        try:
            with self._lock:
                return self._stored(run_id)[1]
        except (StoreError, SnapshotError):
            return StoredRun()

    def _committed_before(
        self, run_id: str, cursor: _Cursor, batch: Callable[[int], tuple[Any, ...]] | None, ending: Request | None
    ) -> bool:
        """Whether a commit that reported an error is stored all the same: its batch, and the record its ending moves.

        A batch is the commit's when the row at its key holds the very entries written; an ending, when
        the run's record is where it leads and no other claim took the run from this one. A new run's
        first commit is stored when the run's record is there with that batch (or, without one, that ending).
        """
        try:
            with self._lock:
                number = cursor.number if cursor.number is not None else self._number(run_id)
                if number is None:
                    return False
                if batch is not None:
                    row = batch(number)
                    found = self._db.execute("SELECT entries FROM snapshot_batches WHERE key = ?", (row[0],)).fetchone()
                    if found is None or bytes(found[0]) != bytes(row[5]):
                        return False
        except StoreError:
            return False
        record = self._record_of(run_id)
        if cursor.number is None:
            cursor.number = number
        if ending is None:
            return True
        expected = {Trigger.PAUSE: RunStatus.PAUSED, Trigger.CANCEL: RunStatus.PAUSED, Trigger.FINISH: RunStatus.DONE}
        return (
            record.owner is None
            and record.taken_over_from != cursor.owner
            and record.status is expected.get(ending.trigger, RunStatus.FAILED)
            and record.exit_reason == ending.exit_reason
        )

    def _give_up(self, run_id: str, cursor: _Cursor, first_seq: int) -> None:
        """The recorded snapshots can never be written: the run fails, and gives its claim up, with what is stored."""
        cursor.next_seq, cursor.entries, cursor.body = first_seq, [], None
        cursor.ending = Request(Trigger.FAIL, cursor.owner)
        self._commit(run_id, cursor)

    def _whole(self, snapshot: AgentSnapshot, skip: tuple[int, int] = (0, 0)) -> list[Any]:
        """``snapshot`` as a batch's entry: messages, trace, the other fields, created_at (all but the ``skip`` first ones).

        The messages skipped are not even encoded: a thread's long conversation costs its turn nothing.
        """
        data = snapshot.model_dump(mode="json", exclude={"messages", "trace"})
        created_at = data.pop("created_at")
        del data["seq"]  # the snapshot's number is where it is stored
        messages = snapshot.messages[skip[0] :] if skip[0] else snapshot.to_dict()["messages"]
        trace = [
            [r["step"], r["source"].value, r["dest"].value, r["trigger"], r["duration_us"]]  # _TRACE_FIELDS' order
            for r in snapshot.trace[skip[1] :]
        ]
        return [messages, trace, data, created_at]

    def _add_whole(self, cursor: _Cursor, snapshot: AgentSnapshot, appended: bool = False) -> int:
        """Record ``snapshot`` as the run's next snapshot: its number.

        All of it, starting a batch; or, when the run's conversation was only ``appended`` to since it
        started, the messages and trace entries after those the run's snapshots hold already.
        """
        held = self._held(snapshot.run_id, cursor) if appended else None
        waits = waits_for_person(snapshot)
        if held is not None and held[0] <= len(snapshot.messages) and held[1] <= len(snapshot.trace):
            messages, trace, body, created_at = self._whole(snapshot, held)
            return self._add(snapshot.run_id, cursor, False, messages, trace, body, created_at, waits)
        messages, trace, body, created_at = self._whole(snapshot)
        return self._add(snapshot.run_id, cursor, True, messages, trace, body, created_at, waits)

    def _held(self, run_id: str, cursor: _Cursor) -> tuple[int, int] | None:
        """How many messages and trace entries the run's snapshots hold (its base's messages included); ``None``: none.

        Counted once from what is stored (the run's own batches since its last whole one, and its
        base's number of messages), then kept up to date by ``_add``.
        """
        if cursor.number is None:  # a new run, registered by its first commit: no turn (a turn is, at its claim)
            return None
        if cursor.messages is None or cursor.trace is None:
            messages = trace = 0
            started = False
            for _number, whole, new_messages, new_trace, *_rest in self._replay(cursor.number, _LAST_SEQ):
                if not started:
                    started = True
                    messages = 0 if whole else self._base(cursor.number)[2]
                messages, trace = messages + len(new_messages), trace + len(new_trace)
            if not started:  # nothing stored yet: a turn holds its base's messages, another run nothing
                base_run, _seq, count = self._base(cursor.number)
                if base_run is None:
                    return None
                messages = count
            if cursor.entries and cursor.full:  # recorded, not committed yet: a whole snapshot first
                messages = trace = 0
            for entry in cursor.entries:
                messages, trace = messages + len(entry[0]), trace + len(entry[1])
            cursor.messages, cursor.trace = messages, trace
        return cursor.messages, cursor.trace

    def save(self, snapshot: AgentSnapshot, *, appended: bool = False) -> SnapshotInfo:
        """Store a snapshot as the newest of its run, which is then paused.

        The snapshot of a run this process runs is its pause (its cancel, for a run cancelled from
        outside); any other is saved from outside the run, refused (``StaleSnapshotError``) while
        another process's claim holds it. ``appended``: the run's conversation was only appended to
        since it started (a thread's turn), so only what it added is written; else all of it.
        """
        run_id, reason = snapshot.run_id, CANCELLED if isinstance(snapshot.pause, Cancelled) else None
        if run_id not in self._claims and run_id not in self._lost:
            encoded, phase, step = dump_json([self._whole(snapshot)]), snapshot.phase.value, snapshot.step
            request = Request(Trigger.SAVE, new_claim(), exit_reason=reason)
            summary, waits = Summary.of(snapshot.messages), waits_for_person(snapshot)
            number = self._move(
                run_id,
                request,
                lambda n, head: ((n << _SEQ_BITS) + head + 1, 1, phase, step, 1, encoded),
                within=lambda n: self._write_summary(n, self._count(n) - 1, summary, waits, whole=True),
            )
            seq = self._count(number) - 1
        else:
            cursor = self._cursor(run_id)
            seq = self._add_whole(cursor, snapshot, appended)
            trigger = Trigger.CANCEL if reason else Trigger.PAUSE
            cursor.ending = Request(trigger, cursor.owner, exit_reason=reason)
            self._commit(run_id, cursor)
        return SnapshotInfo(run_id, seq, snapshot.phase, snapshot.step, snapshot.created_at)

    def observe(self, delta: RunDelta) -> None:
        """Record a run's snapshot where it now stands; at its end, the record of how it ended.

        A run that pauses is saved (``save``) by the driver, with the snapshot it pauses with; the
        record of a finished run is committed when the driver releases it (``release``), with its exit
        reason or error.
        """
        record = delta.record
        cursor = self._cursors.get(delta.run_id)
        if delta.fields is not None:
            fields = delta.fields
            cursor = self._cursor(delta.run_id)
        elif record is not None and record.dest in TERMINAL_PHASES and cursor is not None and cursor.body:
            # Where it stood before its last edge, that edge taken: in DONE or FAILED, its stage kept.
            fields = {**cursor.body, "phase": record.dest, "exit_reason": delta.exit_reason, "break_point": None}
        else:
            return
        messages = [m.to_dict() for m in delta.messages]
        trace = [list(r) for r in delta.trace]
        # A number, formatted when read: formatting the time costs more than the rest of the snapshot.
        self._add(delta.run_id, cursor, delta.rewritten, messages, trace, fields, time.time())
        if delta.fields is not None and (record is None or record.dest in COMMIT_ON_ENTRY):
            self._commit(delta.run_id, cursor)

    # -- reading ----------------------------------------------------------------------------------

    def _batches(self, number: int, seq: int | None = None) -> list[tuple[int, bytes, int]]:
        """``(first seq, entries, full)`` of the batches of run ``number`` needed to rebuild snapshot ``seq`` (default: all)."""
        first = number << _SEQ_BITS
        with self._lock:
            if seq is None:
                query = "SELECT key - ?, entries, full FROM snapshot_batches WHERE key BETWEEN ? AND ? ORDER BY key"
                return self._db.execute(query, (first, first, first + _LAST_SEQ)).fetchall()
            upto = first + min(seq, _LAST_SEQ)
            return self._db.execute(
                "SELECT key - ?, entries, full FROM snapshot_batches WHERE key <= ? AND key >= "
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
        started = False
        for number, whole, new_messages, new_trace, body, created_at in self._replay(run_number, seq):
            if not started:  # a thread's turn that kept only what it added: its base's conversation first
                started = True
                messages = [] if whole else list(self._base_conversation(run_id, run_number))
            messages.extend(new_messages)
            trace.extend(new_trace)
            if number == seq:
                if not whole:
                    self._keep_conversation((run_id, seq), messages)
                try:
                    fields = [dict(zip(_TRACE_FIELDS, r, strict=True)) for r in trace]
                    created = _created_at(created_at)
                except (TypeError, ValueError) as exc:
                    raise self._damaged(exc) from None
                snapshot = AgentSnapshot.from_dict(
                    {**body, "messages": messages, "trace": fields, "created_at": created, "seq": seq}
                )
                return of_run(snapshot, run_id, f"Snapshot {seq} of {self.path}")
        raise SnapshotError(f"Run {run_id!r} has no snapshot number {seq}.")

    def _replay(
        self, run_number: int, seq: int | None = None
    ) -> Iterator[tuple[int, bool, list[Any], list[Any], dict[str, Any], str | float]]:
        """``(number, whole, new messages, new trace, fields, created_at)`` of each stored snapshot needed for ``seq``.

        ``whole``: the first batch read holds the whole conversation (else the messages follow the
        run's base's, a thread's earlier turns). ``fields`` is every field but messages, trace and
        created_at: a batch's first snapshot holds them all, the next ones what changed (one dict per
        batch, updated in place: read it before the next). ``created_at`` is as stored (see ``_created_at``).
        """
        batches = self._batches(run_number, seq)
        whole = not batches or bool(batches[0][2])
        for first, blob, _full in batches:
            try:
                entries = load_json(blob)
                decoded = [(list(m), list(t), dict(c), at) for m, t, c, at in entries]
            except (TypeError, ValueError) as exc:  # DeserializationError is a ValueError
                raise self._damaged(exc) from None
            body: dict[str, Any] = {}
            for number, (new_messages, new_trace, changed, created_at) in enumerate(decoded, start=first):
                body.update(changed)
                yield number, whole, new_messages, new_trace, body, created_at

    # -- threads' conversations ----------------------------------------------------------------------

    def _base(self, run_number: int) -> tuple[str | None, int | None, int]:
        """The run's base, the snapshot a thread's turn continued (``None``s: it has none), and its messages."""
        with self._lock:
            row = self._db.execute(
                "SELECT base_run_id, base_seq, base_messages FROM runs WHERE number = ?", (run_number,)
            ).fetchone()
        if row is None:
            return None, None, 0
        return row[0], row[1], int(row[2] or 0)

    def _base_conversation(self, run_id: str, run_number: int) -> list[Any]:
        """The conversation a thread's turn continued: its base's messages (``StoreError`` when they do not add up)."""
        base_run, base_seq, count = self._base(run_number)
        if base_run is None or base_seq is None:
            return []
        messages = self._conversation(base_run, base_seq)
        if len(messages) != count:
            raise self._damaged(
                ValueError(f"run {run_id!r} continues {count} messages, its base holds {len(messages)}")
            )
        return messages

    def _conversation(self, run_id: str, seq: int) -> list[Any]:
        """The messages of snapshot ``seq`` of ``run_id``, the thread's earlier turns first.

        Read turn by turn back to a run that holds its whole conversation (or one read lately), in a
        loop: a thread of a thousand turns is no recursion a thousand deep.
        """
        parts: list[list[Any]] = []
        at: tuple[str, int] | None = (run_id, seq)
        while at is not None:
            kept = self._conversations.get(at)
            if kept is not None:
                parts.append(kept)
                break
            number = self._number(at[0])
            if number is None:
                raise SnapshotError(f"Run {at[0]!r} has no snapshot number {at[1]}: a thread's turn continued it.")
            own, whole = self._own_messages(at[0], number, at[1])
            parts.append(own)
            base_run, base_seq, _count = self._base(number)
            at = None if whole or base_run is None or base_seq is None else (base_run, base_seq)
        messages = [m for part in reversed(parts) for m in part]
        self._keep_conversation((run_id, seq), messages)
        return messages

    def _own_messages(self, run_id: str, run_number: int, seq: int) -> tuple[list[Any], bool]:
        """The messages the run's batches hold up to snapshot ``seq``, and whether they are the whole conversation."""
        messages: list[Any] = []
        for number, whole, new_messages, *_rest in self._replay(run_number, seq):
            messages.extend(new_messages)
            if number == seq:
                return messages, whole
        raise SnapshotError(f"Run {run_id!r} has no snapshot number {seq}.")

    def _keep_conversation(self, key: tuple[str, int], messages: list[Any]) -> None:
        """Keep a rebuilt conversation for the next turns (a stored snapshot never changes, whoever reads it)."""
        with self._lock:
            self._conversations.pop(key, None)
            self._conversations[key] = list(messages)
            while len(self._conversations) > _KEPT_CONVERSATIONS:
                del self._conversations[next(iter(self._conversations))]

    # -- events -----------------------------------------------------------------------------------

    def record_event(self, event: Event) -> None:
        """Keep ``event`` as the next of its run's events; written from a thread of the store's own.

        The runs of an agent whose store this is call it when the store was made with
        ``record_events=True``; it is also a handler of its own: ``run(on_event=store.record_event)``.
        """
        self._events.record(event)

    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> list[StoredEvent]:
        """The run's stored events numbered above ``after``, oldest first, at most ``limit`` (see ``EventStore``).

        Events this store queued are written first. ``DeserializationError`` for a stored event that
        cannot be read back (damaged, or naming a class the allow-list refuses).
        """
        check_window(after, limit)
        self._events.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT number, data FROM events WHERE run_id = ? AND number > ? ORDER BY number LIMIT ?",
                (run_id, after, -1 if limit is None else limit),
            ).fetchall()
        return [read_event(run_id, number, data, self.load, self.path) for number, data in rows]

    def event_count(self, run_id: str) -> int:
        """How many events of the run are stored (events this store queued are written first)."""
        self._events.flush()
        with self._lock:
            row = self._db.execute("SELECT COALESCE(MAX(number), 0) FROM events WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0])

    def _damaged(self, exc: Exception) -> StoreError:
        return StoreError(f"A stored snapshot in {self.path} is damaged ({exc}); it cannot be read.")

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
        for number, _whole, _messages, _trace, body, created_at in self._replay(run_number):
            try:
                infos.append(SnapshotInfo(run_id, number, Phase(body["phase"]), body["step"], _created_at(created_at)))
            except (KeyError, TypeError, ValueError) as exc:
                raise self._damaged(exc) from None
        return infos

    def runs(self) -> list[RunInfo]:
        """Every run, most recently updated first."""
        return [found.info for found in self._summaries("ORDER BY r.updated_at DESC, r.number DESC", ())]

    def run_info(self, run_id: str) -> RunInfo | None:
        """The run's record, or ``None`` for a run this database does not know."""
        found = self._summaries("WHERE r.run_id = ?", (run_id,))
        return found[0].info if found else None

    def summaries(
        self, finding: Finding, *, status: str = "", sort: str = "updated", offset: int = 0, limit: int | None = None
    ) -> list[RunSummary]:
        """The summaries of the runs ``finding`` asks for, in the order ``sort`` names (see ``SummaryStore``).

        The runs are picked and ordered from their records alone; only those returned are read whole.
        """
        where, parameters = self._where(finding)
        if status:
            where += f" AND {_NAMED_STATUS} = ?"
            parameters += (status,)
        query = f"SELECT r.number, r.run_id FROM runs r WHERE {where} ORDER BY {_ORDERS[sort]} LIMIT ? OFFSET ?"
        with self._lock:
            picked = self._db.execute(query, (*parameters, -1 if limit is None else limit, offset)).fetchall()
            found: dict[str, RunSummary] = {}
            for at in range(0, len(picked), 500):  # SQLite takes that many parameters, whatever its version
                chunk = [number for number, _ in picked[at : at + 500]]
                marks = ", ".join("?" * len(chunk))
                found.update((s.info.run_id, s) for s in self._summaries(f"WHERE r.number IN ({marks})", tuple(chunk)))
        return [found[run_id] for _, run_id in picked if run_id in found]

    def counts(self, finding: Finding) -> dict[str, int]:
        """How many of the runs ``finding`` asks for are in each status (as ``named_status`` names them)."""
        where, parameters = self._where(finding)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_NAMED_STATUS}, COUNT(*) FROM runs r WHERE {where} GROUP BY 1", parameters
            ).fetchall()
        return {str(status): int(count) for status, count in rows}

    @staticmethod
    def _where(finding: Finding) -> tuple[str, tuple[Any, ...]]:
        where, parameters = ["1"], []
        if finding.since:
            where.append("substr(r.updated_at, 1, 10) >= ?")
            parameters.append(finding.since)
        if finding.until:
            where.append("substr(r.updated_at, 1, 10) <= ?")
            parameters.append(finding.until)
        for word in finding.words:
            where.append(_WORD_FOUND)
            parameters += [word, word]
        return " AND ".join(where), tuple(parameters)

    def _summaries(self, where: str, parameters: tuple[Any, ...]) -> list[RunSummary]:
        with self._lock:
            rows = self._db.execute(_SELECT_RUNS + where, parameters).fetchall()
        # A run without snapshots yet (claimed, or a fork in a store that keeps pauses only): no phase.
        found = []
        for run_id, status, phase, step, count, *rest, title, tools, waits in rows:
            try:
                info = RunInfo(run_id, RunStatus(status), phase and Phase(phase), step or 0, count or 0, *rest)
            except ValueError as exc:  # a row someone changed: reading the run says so, the others are listed
                logger.warning("run left out of the listing", run_id=str(run_id)[:80], error=str(self._damaged(exc)))
                continue
            tools_called = tuple(tools.split("\n")) if tools else ()
            found.append(RunSummary(info, title, tools_called, bool(waits), info.exit_reason))
        return found
