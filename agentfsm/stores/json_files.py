"""JsonFileStore: one readable JSON file per snapshot, and a claim file per run being run.

A run's folder holds its snapshots (``<seq>_<step>_<phase>.json``), ``run.json`` (its status and,
for a fork, where it started) and, while a process runs it, ``claim.json``. The claim is taken by
creating that file exclusively (``O_EXCL``, atomic on a local file system): of several processes
resuming the same snapshot, one gets it and the others get ``StaleSnapshotError``. Each write of a
run (a claim, a snapshot with the next number, its release) holds the run's lock (an OS lock on its
folder, which the process's end lets go of), so processes writing the same store never give two
snapshots one number nor write over one another. What this store does not guarantee: a claim whose lease expired is replaced by a rename, so two processes taking
over the same expired claim at the same instant may both succeed; and the lease is not renewed
while the run goes on (it is only given up at the end), so ``lease_seconds`` must outlast the run.
Use ``SQLiteSnapshotStore`` for runs that several processes may pick up.

With ``durable=True`` it also observes runs (``agentfsm._core.runtime.RunObserver``) and writes a
whole snapshot file whenever a durable SQLite store commits: before a reply's tools run or its
calls are confirmed (the journal of the calls it starts), as each call finishes, once hooks or
decisions are done. A run is then never taken back past a call that ran: after a crash, a call
that started and did not finish is in doubt, as in an SQLite store. Each of those writes checks
that this process's claim still holds the run (and renews its lease every third of it); a new
run's claim is written after its first snapshot file, so a process stopping in between leaves a
paused run to resume, never a claim with nothing behind it.

With ``record_events=True`` a run's folder also holds its events, ``events.jsonl``: one line each
(``agentfsm.events.stored_dict``), appended from a thread of the store's own as they happen.

Threads live in ``.threads/<thread id>/thread.json`` (the head, the number of turns, the thread a
fork came from), written holding that folder's lock; a run that is a thread's turn has a
``thread.json`` of its own (its thread, and the snapshot whose conversation it continued). Each
snapshot file holds its whole conversation, as ever: readable, not delta-stored.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson

from agentfsm._core.records import RunDelta
from agentfsm.errors import (
    ConfigurationError,
    DeserializationError,
    SerializationError,
    SnapshotError,
    StaleSnapshotError,
)
from agentfsm.files import atomic_write, exclusive_write, read_regular
from agentfsm.lifecycle import CANCELLED, Request, StoredRun, Trigger, claim_trigger, ending_trigger, move
from agentfsm.logs import logger
from agentfsm.machine import COMMIT_ON_ENTRY, TERMINAL_PHASES
from agentfsm.pauses import Cancelled, RunStatus
from agentfsm.serialization import dump_json, load_json
from agentfsm.snapshot import AgentSnapshot, iso_from_timestamp, now_iso
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

if TYPE_CHECKING:
    from agentfsm.events import Event

#: The fields of ``run.json`` but its status, in ``StoredRun``'s order.
_RUN_FIELDS = ("taken_over_from", "taken_over_by", "parent_run_id", "parent_seq", "exit_reason")
#: The fields of ``run.json`` and ``claim.json``, and their types.
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("status", "exit_reason", "taken_over_from", "taken_over_by", "parent_run_id"), (str, type(None))),
    "parent_seq": (int, type(None)),
    "owner": (str,),
    "lease_until": (int, float),
}
#: The statuses a ``run.json`` may hold.
_STATUSES = frozenset(status.value for status in RunStatus)


def _is_folder_name(run_id: object) -> bool:
    """Whether ``run_id`` can name a run's folder: a file name (never a path) the file system takes."""
    if not isinstance(run_id, str) or run_id in ("", ".", "..") or any(c in run_id for c in "/\\\x00"):
        return False
    try:
        return len(os.fsencode(run_id)) <= 200  # well within the 255 bytes file systems take
    except UnicodeError:
        return False


#: The folder of the threads, beside the runs' folders.
_THREADS = ".threads"
#: The fields of a thread's ``thread.json`` and of a turn's, and their types.
_THREAD_FIELDS: dict[str, tuple[type, ...]] = {
    "head_run_id": (str,),
    "head_seq": (int, type(None)),
    "turns": (int,),
    "parent_thread_id": (str, type(None)),
    "updated_at": (str,),
}
_TURN_FIELDS: dict[str, tuple[type, ...]] = {
    "thread_id": (str,),
    "base_run_id": (str, type(None)),
    "base_seq": (int, type(None)),
    "base_messages": (int,),
}


def _run_folder(directory: Path, run_id: str) -> Path:
    """The folder of ``run_id`` in ``directory``; ``SnapshotError`` for a run id that is not a plain file name."""
    if not _is_folder_name(run_id) or run_id == _THREADS:
        raise SnapshotError(
            f"Run id {str(run_id)[:80]!r} cannot name a folder of a JsonFileStore: it needs 1 to 200 "
            "bytes, no '/', '\\' or NUL, and is not '.', '..' or '.threads' (or keep such runs in an SQLiteSnapshotStore)."
        )
    return directory / run_id


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the run's lock (an OS lock on its folder) against every other process writing the run."""
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = _open_lock(folder)
    try:
        _lock(descriptor)
        try:
            yield
        finally:
            _unlock(descriptor)
    finally:
        os.close(descriptor)


if sys.platform == "win32":  # pragma: no cover (the tests run on POSIX)
    import msvcrt

    def _open_lock(folder: Path) -> int:
        return os.open(folder / ".lock", os.O_RDWR | os.O_CREAT)  # a folder cannot be opened there

    def _lock(descriptor: int) -> None:
        msvcrt.locking(descriptor, msvcrt.LK_LOCK, 1)

    def _unlock(descriptor: int) -> None:
        msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _open_lock(folder: Path) -> int:
        return os.open(folder, os.O_RDONLY)

    def _lock(descriptor: int) -> None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)

    def _unlock(descriptor: int) -> None:
        fcntl.flock(descriptor, fcntl.LOCK_UN)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _writes_the_run(method: _Method) -> _Method:
    """Run ``method`` (whose first argument is a run id or a snapshot) holding its run's lock, once per thread."""

    @functools.wraps(method)
    def locked(self: JsonFileStore, first: Any, *args: Any, **kwargs: Any) -> Any:
        run_id = first.run_id if isinstance(first, AgentSnapshot) else first
        held: set[str] | None = getattr(self._held, "runs", None)
        if held is None:
            held = self._held.runs = set()
        if run_id in held:  # a write within another (a save releasing its claim)
            return method(self, first, *args, **kwargs)
        with _locked(self._folder(run_id)):
            held.add(run_id)
            try:
                return method(self, first, *args, **kwargs)
            finally:
                held.discard(run_id)

    return cast("_Method", locked)


if sys.platform == "win32":  # pragma: no cover (the tests run on POSIX)
    import msvcrt

    def _lock(descriptor: int) -> None:
        msvcrt.locking(descriptor, msvcrt.LK_LOCK, 1)

    def _unlock(descriptor: int) -> None:
        msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock(descriptor: int) -> None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)

    def _unlock(descriptor: int) -> None:
        fcntl.flock(descriptor, fcntl.LOCK_UN)


#: The end of the name of a finished run's record (its newest snapshot file once it is done).
_DONE_FILE = "_DONE.json"


def _ended_in(files: list[Path]) -> str | None:
    """``done`` for a run whose newest snapshot (of ``files``) is the record of a finished run, else ``None``.

    That record is written before ``run.json`` says the run is done: once it is, the run is done (nothing
    moves it any more), even when writing ``run.json`` or removing the claim failed after it, or the
    process died there. (A failed run's record is no such end: the run is claimed again from it.)
    """
    return RunStatus.DONE.value if files and files[-1].name.endswith(_DONE_FILE) else None


#: A run's events, one JSON line each, in its folder.
_EVENTS_FILE = "events.jsonl"


def _append_events(directory: Path, run_id: str, encoded: list[bytes]) -> None:
    """Append a run's events to its ``events.jsonl`` in one write (the writer thread of ``EventWriter``)."""
    folder = _run_folder(directory, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / _EVENTS_FILE, "ab") as file:
        file.write(b"".join(data + b"\n" for data in encoded))


@dataclass(slots=True)
class _Live:
    """A run that a durable store observes, as it stands: the snapshot it writes at the run's next commit."""

    messages: list[Any]
    trace: list[dict[str, Any]]
    fields: dict[str, Any] | None = None
    #: Observed since the last snapshot file was written (the run's release writes it).
    unwritten: bool = False
    #: When this process's claim must be renewed (its next commit renews it).
    renew_at: float = 0.0


class JsonFileStore:
    """One readable JSON file per snapshot: ``<directory>/<run id>/<seq>_<step>_<phase>.json``.

    ``durable=True`` also writes a snapshot file at each of the run's commits (see the module
    docstring), so that a crash never runs a finished call again. ``record_events=True`` keeps the events of the runs of agents whose store it is in each run's
    ``events.jsonl`` (an ``EventStore``); every instance reads them (``events``).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        durable: bool = False,
        lease_seconds: float = 3600.0,
        record_events: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.durable = durable
        self.lease_seconds = lease_seconds
        self.record_events = record_events
        #: The runs a durable store observes, as they stand.
        self._live: dict[str, _Live] = {}
        #: The runs this store runs, and the claim under which it does.
        self._claims: dict[str, str] = {}
        #: Runs this store ran until another process took them over, and the claim each lost: its
        #: writes are refused from now on (``WRITERS_CLAIM``).
        self._lost: dict[str, str] = {}
        #: The runs whose lock each thread holds (``runs``): a write within another takes it once.
        self._held = threading.local()
        # Its thread starts with the first event; what it holds at exit is written then.
        self._events = EventWriter(functools.partial(_append_events, self.directory), name="agentfsm-json-events")
        weakref.finalize(self, self._events.stop)

    def _folder(self, run_id: str) -> Path:
        """The run's folder; ``SnapshotError`` for a run id that is not a plain file name."""
        return _run_folder(self.directory, run_id)

    def _files(self, run_id: str) -> list[Path]:
        return sorted(self._folder(run_id).glob("[0-9]*.json"))

    def _read(self, path: Path) -> dict[str, Any] | None:
        """A ``run.json`` or ``claim.json``, None when there is none; ``SnapshotError`` when it is damaged."""
        try:
            data = load_json(read_regular(path))
        except FileNotFoundError:
            return None
        except OSError as exc:  # a folder where the file should be, a file that cannot be read
            raise SnapshotError(f"{path} cannot be read ({type(exc).__name__}: {exc.strerror}).") from None
        except DeserializationError as exc:
            raise SnapshotError(f"{path} is damaged ({exc}).") from None
        if not isinstance(data, dict):
            raise SnapshotError(f"{path} is damaged (not a JSON object).")
        for key, value in data.items():
            kinds = _RECORD_FIELDS.get(key)
            if kinds is None or not isinstance(value, kinds) or isinstance(value, bool):
                raise SnapshotError(f"{path} is damaged ({key!r} is not one of its fields, or not of its type).")
        if "status" in data and data["status"] not in _STATUSES:
            raise SnapshotError(f"{path} is damaged (status {data['status']!r} is none of {sorted(_STATUSES)}).")
        return data

    def _record(self, run_id: str) -> dict[str, Any]:
        """The run's ``run.json``: its status, and where a fork started."""
        return self._read(self._folder(run_id) / "run.json") or {}

    def _stored(self, run_id: str) -> StoredRun:
        """The run's record, as the lifecycle reads it: ``run.json``, its claim and its head."""
        record = self._record(run_id)
        holder = self._read(self._folder(run_id) / "claim.json") or {}
        files = self._files(run_id)
        head = len(files) - 1
        status = _ended_in(files) or record.get("status") or (RunStatus.PAUSED.value if head >= 0 else None)
        ended = status != record.get("status") and status == RunStatus.DONE.value
        return StoredRun(
            RunStatus(status) if status else None,
            head,
            None if ended else holder.get("owner"),
            None if ended else holder.get("lease_until"),
            *(record.get(name) for name in _RUN_FIELDS),
        )

    def _write(self, run_id: str, before: StoredRun, after: StoredRun) -> None:
        """Write what the lifecycle decided: the claim file (created exclusively by a first claim), then ``run.json``."""
        path = self._folder(run_id) / "claim.json"
        if after.owner is not None and after.owner != before.owner:
            claim = orjson.dumps({"owner": after.owner, "lease_until": after.lease_until})
            path.parent.mkdir(parents=True, exist_ok=True)
            if before.owner is None:
                # Created whole or not at all: a claim file left empty (a write failed, or the process
                # died, between creating it and filling it) would hold the run for ever.
                try:
                    exclusive_write(path, claim)
                except FileExistsError:
                    raise StaleSnapshotError(
                        f"Run {run_id!r} was claimed by another process just now; nothing ran.",
                        run_id,
                        head=before.head,
                    ) from None
            else:
                atomic_write(path, claim)
        assert after.status is not None
        record = {"status": after.status.value, **{name: getattr(after, name) for name in _RUN_FIELDS}}
        atomic_write(self._folder(run_id) / "run.json", dump_json(record))
        if after.owner is None and before.owner is not None:
            path.unlink(missing_ok=True)

    # -- claims -------------------------------------------------------------------------------------

    @_writes_the_run
    def claim(
        self, run_id: str, seq: int | None, *, take_over: bool = False, parent: tuple[str, int | None] | None = None
    ) -> None:
        """Take the run from its snapshot ``seq`` to run it in this process (see ``SnapshotStore.claim``)."""
        owner = new_claim()
        before = self._stored(run_id)
        request = Request(
            claim_trigger(take_over, parent), owner, time.time() + self.lease_seconds, seq=seq, parent=parent
        )
        self._write(run_id, before, move(run_id, before, request))
        self._claims[run_id] = owner
        self._lost.pop(run_id, None)
        self._live.pop(run_id, None)

    def _fenced(self, run_id: str, before: StoredRun, request: Request) -> StoredRun:
        """``move`` for a request of this process's claim; a refusal means the claim was lost: nothing more is written."""
        try:
            return move(run_id, before, request)
        except StaleSnapshotError as exc:
            logger.warning("a write was refused: the run was taken over", run_id=run_id, error=str(exc)[:300])
            self._lost[run_id] = request.owner
            self._claims.pop(run_id, None)
            self._live.pop(run_id, None)
            raise

    @_writes_the_run
    def release(
        self,
        run_id: str,
        status: RunStatus,
        exit_reason: str | None = None,
        *,
        snapshot: AgentSnapshot | None = None,
        appended: bool = False,
    ) -> None:
        """Give up this process's claim on the run, leaving it ``status`` and its exit reason (and ``snapshot``, its record).

        ``appended`` changes nothing here: every snapshot file holds its whole conversation.
        """
        owner = self._claims.pop(run_id, None)
        live = self._live.pop(run_id, None)
        if owner is None:
            return
        before = self._stored(run_id)
        request = Request(ending_trigger(status, exit_reason), owner, exit_reason=exit_reason)
        after = self._fenced(run_id, before, request)
        if snapshot is None and live is not None and live.unwritten and live.fields is not None:
            # A durable run's record of its end, or where it stood when it failed.
            if live.fields["phase"] in TERMINAL_PHASES:
                live.fields = {**live.fields, "exit_reason": exit_reason}
            snapshot = self._snapshot_of(live)
        if snapshot is not None:
            self._write_file(before.head + 1, snapshot)
        self._write(run_id, before, after)

    # -- a durable store: the run observed, and written at its commits -----------------------------

    def observe(self, delta: RunDelta) -> None:
        """Follow a run; write its snapshot file at each of its commits (see the module docstring).

        A run this store does not know is checked now (a run id in use is refused before the run
        does anything) and claimed by its first commit.
        """
        run_id = delta.run_id
        live = self._live.get(run_id)
        if live is None:
            if run_id not in self._claims and run_id not in self._lost:
                move(
                    run_id, self._stored(run_id), Request(Trigger.CLAIM, new_claim(), time.time() + self.lease_seconds)
                )
            # A claim was just taken (by a resume, or the first commit will take it): renewed a third of the lease on.
            live = self._live[run_id] = _Live([], [], renew_at=time.time() + self.lease_seconds / 3)
        messages = [m.to_dict() for m in delta.messages]
        trace = [r.to_dict() for r in delta.trace]
        if delta.rewritten:
            live.messages, live.trace = messages, trace
        else:
            live.messages += messages
            live.trace += trace
        record = delta.record
        if delta.fields is not None:
            live.fields = delta.fields
        elif record is not None and record.dest in TERMINAL_PHASES and live.fields is not None:
            # Where it stood before its last edge, that edge taken: in DONE or FAILED, its stage kept.
            live.fields = {**live.fields, "phase": record.dest, "exit_reason": delta.exit_reason, "break_point": None}
        else:
            return  # paused: the driver saves the pause
        live.unwritten = True
        if delta.fields is not None and (record is None or record.dest in COMMIT_ON_ENTRY):
            self._commit(run_id, live)

    @staticmethod
    def _snapshot_of(live: _Live) -> AgentSnapshot:
        assert live.fields is not None
        return AgentSnapshot.from_dict(
            {**live.fields, "messages": live.messages, "trace": live.trace, "created_at": now_iso()}
        )

    @_writes_the_run
    def _commit(self, run_id: str, live: _Live) -> None:
        """Write the run as it stands as its next snapshot file, while this process's claim holds it.

        A new run's claim is written after its first snapshot file; a commit a third of the lease
        after the last renewal renews it.
        """
        snapshot = self._snapshot_of(live)
        before = self._stored(run_id)
        owner = self._claims.get(run_id) or self._lost.get(run_id)
        now = time.time()
        if owner is None:
            owner = new_claim()
            after = move(run_id, before, Request(Trigger.CLAIM, owner, now + self.lease_seconds))
            self._write_file(before.head + 1, snapshot)
            live.unwritten = False
            self._write(run_id, before, after)
            self._claims[run_id] = owner
        else:
            after = self._fenced(run_id, before, Request(Trigger.RENEW, owner, now + self.lease_seconds))
            self._write_file(before.head + 1, snapshot)
            live.unwritten = False
            if now < live.renew_at:
                return
            atomic_write(
                self._folder(run_id) / "claim.json", orjson.dumps({"owner": owner, "lease_until": after.lease_until})
            )
        live.renew_at = now + self.lease_seconds / 3

    # -- snapshots ----------------------------------------------------------------------------------

    @_writes_the_run
    def save(self, snapshot: AgentSnapshot, *, appended: bool = False) -> SnapshotInfo:
        """Write the snapshot atomically as the next file of its run, which is then paused.

        The snapshot of a run this process runs is its pause (its cancel, for a run cancelled from
        outside); any other is saved from outside the run, refused while another process's claim holds it.
        ``appended`` changes nothing here: every snapshot file holds its whole conversation.
        """
        run_id = snapshot.run_id
        reason = CANCELLED if isinstance(snapshot.pause, Cancelled) else None
        self._live.pop(run_id, None)
        owner = self._claims.pop(run_id, None) or self._lost.get(run_id)
        before = self._stored(run_id)
        if owner is None:
            after = move(run_id, before, Request(Trigger.SAVE, new_claim(), exit_reason=reason))
        else:
            trigger = Trigger.CANCEL if reason else Trigger.PAUSE
            after = self._fenced(run_id, before, Request(trigger, owner, exit_reason=reason))
        seq = before.head + 1
        try:
            self._write_file(seq, snapshot)
        except SerializationError:
            if owner is not None:  # the pause cannot be kept: the run failed
                self._write(run_id, before, move(run_id, before, Request(Trigger.FAIL, owner)))
            raise
        self._write(run_id, before, after)
        return SnapshotInfo(run_id, seq, snapshot.phase, snapshot.step, snapshot.created_at)

    def _write_file(self, seq: int, snapshot: AgentSnapshot) -> None:
        """Write ``snapshot`` atomically as its run's snapshot number ``seq``."""
        name = f"{seq:06d}_{snapshot.step:04d}_{snapshot.phase.value}.json"
        snapshot.model_copy(update={"seq": None}).to_file(self._folder(snapshot.run_id) / name)

    def _load_file(self, run_id: str, path: Path, seq: int) -> AgentSnapshot:
        return of_run(AgentSnapshot.from_file(path), run_id, path).model_copy(update={"seq": seq})

    def latest(self, run_id: str) -> AgentSnapshot:
        """The newest snapshot file of the run."""
        files = self._files(run_id)
        if not files:
            raise SnapshotError(f"No snapshot of run {run_id!r} in {self.directory}.")
        return self._load_file(run_id, files[-1], len(files) - 1)

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """The ``seq``-th snapshot file of the run."""
        files = self._files(run_id)
        if not 0 <= seq < len(files):
            raise SnapshotError(f"Run {run_id!r} has {len(files)} snapshots; there is no number {seq}.")
        return self._load_file(run_id, files[seq], seq)

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """Every snapshot file of the run, read and validated."""
        infos = []
        for seq, path in enumerate(self._files(run_id)):
            snapshot = AgentSnapshot.from_file(path)
            infos.append(SnapshotInfo(run_id, seq, snapshot.phase, snapshot.step, snapshot.created_at))
        return infos

    def runs(self) -> list[RunInfo]:
        """Runs with a snapshot file or a record (a claimed run may have no snapshot yet).

        A run whose newest snapshot or record cannot be read is left out (and logged): reading it
        (``latest``, ``claim``...) says why, and the other runs are listed.
        """
        found = []
        for folder in self.directory.iterdir() if self.directory.exists() else []:
            if not _is_folder_name(folder.name) or not folder.is_dir():
                continue  # not a run's folder
            try:
                info = self._run_info(folder)
            except SnapshotError as exc:
                logger.warning("run left out of the listing", run_id=folder.name[:80], error=str(exc)[:300])
                continue
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda r: r.updated_at, reverse=True)

    def _run_info(self, folder: Path) -> RunInfo | None:
        """What the run of ``folder`` is (``None``: no run, nothing in it); ``SnapshotError`` when it cannot be read."""
        files = self._files(folder.name)
        record = self._record(folder.name)
        if not (files or record):
            return None
        newest = AgentSnapshot.from_file(files[-1]) if files else None
        holder = self._read(folder / "claim.json") or {}
        updated = newest.created_at if newest else iso_from_timestamp((folder / "run.json").stat().st_mtime)
        status = _ended_in(files) or record.get("status", RunStatus.PAUSED.value)
        if status != record.get("status", RunStatus.PAUSED.value):  # its end is stored, not yet its record
            holder = {}
        return RunInfo(
            folder.name,
            RunStatus(status),
            newest.phase if newest else None,
            newest.step if newest else 0,
            len(files),
            updated,
            holder.get("owner"),
            record.get("taken_over_from"),
            record.get("taken_over_by"),
            record.get("parent_run_id"),
            record.get("parent_seq"),
            record.get("exit_reason"),
        )

    # -- threads ------------------------------------------------------------------------------------

    def _thread_folder(self, thread_id: str) -> Path:
        """The thread's folder; ``SnapshotError`` for a thread id that is not a plain file name."""
        return _run_folder(self.directory / _THREADS, thread_id)

    def _read_fields(self, path: Path, fields: dict[str, tuple[type, ...]]) -> dict[str, Any] | None:
        """A thread's or a turn's ``thread.json`` (None: none); ``SnapshotError`` when it is damaged."""
        try:
            data = load_json(read_regular(path))
        except FileNotFoundError:
            return None
        except (OSError, DeserializationError) as exc:
            raise SnapshotError(f"{path} cannot be read ({exc}).") from None
        if not isinstance(data, dict) or set(data) != set(fields):
            raise SnapshotError(f"{path} is damaged (not an object with the fields {sorted(fields)}).")
        for key, kinds in fields.items():
            if not isinstance(data[key], kinds) or isinstance(data[key], bool):
                raise SnapshotError(f"{path} is damaged ({key!r} is not of its type).")
        return data

    def _thread_info(self, thread_id: str) -> ThreadInfo | None:
        data = self._read_fields(self._thread_folder(thread_id) / "thread.json", _THREAD_FIELDS)
        if data is None:
            return None
        status = self._stored(data["head_run_id"]).status
        return ThreadInfo(
            thread_id,
            data["head_run_id"],
            data["head_seq"],
            data["turns"],
            status,
            data["parent_thread_id"],
            data["updated_at"],
        )

    def thread(self, thread_id: str) -> ThreadInfo | None:
        """The thread, or ``None`` for one no run went on in yet."""
        return self._thread_info(thread_id)

    def threads(self) -> list[ThreadInfo]:
        """Every thread, most recently updated first (one that cannot be read is left out, and logged)."""
        folder = self.directory / _THREADS
        found = []
        for entry in folder.iterdir() if folder.is_dir() else []:
            try:
                info = self._thread_info(entry.name) if _is_folder_name(entry.name) else None
            except SnapshotError as exc:
                logger.warning("thread left out of the listing", thread_id=entry.name[:80], error=str(exc)[:300])
                continue
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda t: t.updated_at, reverse=True)

    def thread_turns(self, thread_id: str) -> list[ThreadTurn]:
        """The runs of the thread's chain, oldest first, read back from its head along each run's base."""
        info = self._thread_info(thread_id)
        if info is None:
            return []
        chain: list[ThreadTurn] = []
        at: str | None = info.head_run_id
        until = info.head_seq
        while at is not None:
            turn = self._read_fields(self._folder(at) / "thread.json", _TURN_FIELDS)
            if turn is None:
                raise SnapshotError(
                    f"Thread {thread_id!r} names run {at!r}, which is no thread's turn in {self.directory}."
                )
            base, base_seq = turn["base_run_id"], turn["base_seq"]
            chain.append(ThreadTurn(0, at, self._stored(at).status, base, base_seq, turn["base_messages"], until))
            at, until = base, base_seq
        return [replace(t, number=n) for n, t in enumerate(reversed(chain), start=1)]

    def begin_turn(
        self, thread_id: str, run_id: str, *, head: ThreadInfo | None, base_messages: int, fork: bool = False
    ) -> None:
        """Claim new run ``run_id`` as the thread's next turn, continuing ``head`` (see ``ThreadStore.begin_turn``)."""
        with _locked(self._thread_folder(thread_id)):
            now = self._thread_info(thread_id)
            if head is None:
                if now is not None:
                    raise thread_moved(thread_id, now.head_run_id)
                base_run, base_seq, turns = None, None, 0
            else:
                if now is None or (now.head_run_id, now.head_seq) != (head.head_run_id, head.head_seq):
                    raise thread_moved(thread_id, None if now is None else now.head_run_id)
                base_run, base_seq, turns = now.head_run_id, now.head_seq, now.turns
                if base_seq is None:
                    stored = self._stored(base_run)
                    if stored.status is not RunStatus.DONE:
                        raise thread_busy(thread_id, base_run, stored.status and stored.status.value)
                    base_seq = stored.head
            if self._stored(run_id).status is not None:
                raise ConfigurationError(f"Run {run_id!r} is stored already: a thread's next turn is a new run.")
            parent = (base_run, base_seq) if fork and base_run is not None else None
            self.claim(run_id, None, parent=parent)
            turn = {
                "thread_id": thread_id,
                "base_run_id": base_run,
                "base_seq": base_seq,
                "base_messages": base_messages if base_run is not None else 0,
            }
            atomic_write(self._folder(run_id) / "thread.json", dump_json(turn))
            parent_thread = None if now is None else now.parent_thread_id
            self._write_thread(thread_id, run_id, None, turns + 1, parent_thread)

    def _write_thread(self, thread_id: str, run_id: str, seq: int | None, turns: int, parent: str | None) -> None:
        record = {
            "head_run_id": run_id,
            "head_seq": seq,
            "turns": turns,
            "parent_thread_id": parent,
            "updated_at": now_iso(),
        }
        atomic_write(self._thread_folder(thread_id) / "thread.json", dump_json(record))

    def fork_thread(
        self, thread_id: str, run_id: str | None = None, seq: int | None = None, *, new_thread_id: str | None = None
    ) -> ThreadInfo:
        """A new thread sharing ``thread_id``'s chain up to snapshot ``seq`` of its run ``run_id`` (see ``ThreadStore``)."""
        run, point, number = fork_point(thread_id, self.thread_turns(thread_id), run_id, seq, self.history)
        new_id = new_thread_id or uuid.uuid4().hex
        with _locked(self._thread_folder(new_id)):
            if self._thread_info(new_id) is not None:
                raise ConfigurationError(f"Thread {new_id!r} exists already: fork into a new thread id.")
            self._write_thread(new_id, run, point, number, thread_id)
        info = self._thread_info(new_id)
        assert info is not None
        return info

    # -- events -------------------------------------------------------------------------------------

    def record_event(self, event: Event) -> None:
        """Keep ``event`` as the next line of its run's ``events.jsonl``; written from a thread of the store's own.

        The runs of an agent whose store this is call it when the store was made with
        ``record_events=True``; it is also a handler of its own: ``run(on_event=store.record_event)``.
        """
        self._events.record(event)

    def _event_lines(self, run_id: str) -> tuple[Path, list[bytes]]:
        """The run's events file and its whole lines (a line still being written is not one yet)."""
        path = self._folder(run_id) / _EVENTS_FILE
        self._events.flush()
        try:
            written = read_regular(path)
        except FileNotFoundError:
            return path, []
        except OSError as exc:
            raise SnapshotError(f"{path} cannot be read ({type(exc).__name__}: {exc.strerror}).") from None
        return path, written.split(b"\n")[:-1]  # the last piece: empty, or a line being written

    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> list[StoredEvent]:
        """The run's stored events numbered above ``after``, oldest first, at most ``limit`` (see ``EventStore``).

        Events this store queued are written first. ``DeserializationError`` for a stored event that
        cannot be read back (damaged, or naming a class the allow-list refuses).
        """
        check_window(after, limit)
        path, lines = self._event_lines(run_id)
        chosen = lines[after : None if limit is None else after + limit]
        return [
            read_event(run_id, number, line, self.load, path) for number, line in enumerate(chosen, start=after + 1)
        ]

    def event_count(self, run_id: str) -> int:
        """How many events of the run are stored (events this store queued are written first)."""
        return len(self._event_lines(run_id)[1])
