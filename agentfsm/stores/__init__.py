"""Where snapshots live: a directory of JSON files, or an embedded SQLite database.

A store of your own follows ``SnapshotStore`` (and ``DurableSnapshotStore``, whose ``observe`` is
given each ``RunDelta`` of a run). Both stores here can also keep the events of their runs for other
processes to read (``record_events=True``: an ``EventStore``), as the review page's live view does,
and both hold threads, chains of runs that continue one conversation (a ``ThreadStore``).
"""

from agentfsm._core.records import RunDelta
from agentfsm.stores.base import (
    DurableSnapshotStore,
    EventStore,
    RunInfo,
    SnapshotInfo,
    SnapshotStore,
    StoredEvent,
    ThreadInfo,
    ThreadStore,
    ThreadTurn,
)
from agentfsm.stores.json_files import JsonFileStore
from agentfsm.stores.sqlite import SQLiteSnapshotStore

__all__ = [
    "DurableSnapshotStore",
    "EventStore",
    "JsonFileStore",
    "RunDelta",
    "RunInfo",
    "SQLiteSnapshotStore",
    "SnapshotInfo",
    "SnapshotStore",
    "StoredEvent",
    "ThreadInfo",
    "ThreadStore",
    "ThreadTurn",
]
