"""How stores keep the events of runs (``record_events=True``): written from a thread of their own, read back typed.

A run's thread only turns each event into its stored form (``agentfsm.events.stored_dict``, as
JSON) and queues it: it never waits for the disk for an event, and under ``run_async`` the event
loop is not held up. The writer thread writes what is queued in one go, each run's events in the
order they happened. An event that cannot be stored is logged (the run, the event's kind and the
error, never its content) and left out: the events are an account of a run, its snapshots are the
run itself, so keeping an account never fails a run.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentfsm.errors import DeserializationError, SerializationError, SnapshotError, check_int
from agentfsm.events import error_text, event_from_stored, stored_dict
from agentfsm.logs import logger
from agentfsm.serialization import dump_json, load_json
from agentfsm.stores.base import StoredEvent

if TYPE_CHECKING:
    from agentfsm.events import Event
    from agentfsm.snapshot import AgentSnapshot

#: Writes the encoded events of one run after its stored ones, oldest first.
WriteEvents = Callable[[str, list[bytes]], None]


class EventWriter:
    """Queues a store's events and writes them from a thread of its own, which the first event starts."""

    def __init__(self, write: WriteEvents, name: str) -> None:
        self._write = write
        self._name = name
        self._queue: deque[tuple[str, bytes]] = deque()
        self._changed = threading.Condition()
        self._queued = 0
        self._handled = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    def record(self, event: Event) -> None:
        """Queue ``event`` for the writer thread; its stored form is made here, as the event stands now."""
        try:
            encoded = dump_json(stored_dict(event))
        except SerializationError as exc:  # a tool's result of a type that has no JSON form
            logger.error("event not stored", run_id=event.run_id, kind=event.kind, error=error_text(exc))
            return
        with self._changed:
            self._queue.append((event.run_id, encoded))
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self) -> None:
        """Wait until every event queued so far is written (or was found impossible to write)."""
        with self._changed:
            target = self._queued
            self._changed.wait_for(lambda: self._handled >= target or self._thread is None)

    def stop(self) -> None:
        """Write what is queued and end the thread (a later event starts another)."""
        with self._changed:
            thread = self._thread
            self._stopping = True
            self._changed.notify_all()
        if thread is not None:
            thread.join()
        with self._changed:
            self._stopping = False

    def _next_batch(self) -> list[tuple[str, bytes]]:
        """Everything queued, once there is something (nothing: the writer is stopping)."""
        with self._changed:
            while not self._queue and not self._stopping:
                self._changed.wait()
            batch = list(self._queue)
            self._queue.clear()
            return batch

    def _loop(self) -> None:
        try:
            while batch := self._next_batch():
                by_run: dict[str, list[bytes]] = {}
                for run_id, encoded in batch:
                    by_run.setdefault(run_id, []).append(encoded)
                for run_id, encoded_events in by_run.items():
                    try:
                        self._write(run_id, encoded_events)
                    except Exception as exc:  # the disk, the database: the run goes on without them
                        logger.error(
                            "events not stored", run_id=run_id, events=len(encoded_events), error=error_text(exc)
                        )
                with self._changed:
                    self._handled += len(batch)
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._thread = None
                self._changed.notify_all()


def check_window(after: int, limit: int | None) -> None:
    """Refuse, with a typed error, an ``events(run_id, after, limit)`` window that is not ``after >= 0``, ``limit >= 1``."""
    check_int("after", after, 0)
    if limit is not None:
        check_int("limit", limit, 1)


def read_event(
    run_id: str, number: int, data: bytes, load: Callable[[str, int], AgentSnapshot], where: object
) -> StoredEvent:
    """Stored event ``number`` of ``run_id``, read back from ``data`` (``load``: the store's snapshots, for a pause).

    Raises:
        DeserializationError: the event is damaged, another run's, or names a class the allow-list
            refuses; nothing it names is imported unless the allow-list allows it.
    """
    try:
        decoded = load_json(data)
        if not isinstance(decoded, dict):
            raise DeserializationError("it is not a JSON object")
        if decoded.get("run_id") != run_id:
            raise DeserializationError(f"it is an event of run {str(decoded.get('run_id'))[:80]!r}")
        step, at = decoded.get("step"), decoded.get("at")
        if type(step) is not int or type(at) not in (int, float):
            raise DeserializationError("its step or time is not a number")
        snapshot = None
        if decoded.get("kind") == "paused" and "snapshot" not in decoded:
            seq = decoded.get("seq")
            if type(seq) is not int:
                raise DeserializationError(f"its seq {str(seq)[:40]!r} is not a snapshot number")
            snapshot = load(run_id, seq)
        return StoredEvent(number, event_from_stored(decoded, snapshot))
    except (DeserializationError, SnapshotError) as exc:
        raise DeserializationError(f"Stored event {number} of run {run_id!r} in {where} cannot be read: {exc}") from exc
