"""Where snapshots live: a directory of JSON files, or an embedded SQLite database.

A store of your own follows ``SnapshotStore`` (and ``DurableSnapshotStore``, whose ``observe`` is
given each ``RunDelta`` of a run).
"""

from agentfsm._core.runtime import RunDelta
from agentfsm.stores.base import DurableSnapshotStore, RunInfo, SnapshotInfo, SnapshotStore
from agentfsm.stores.json_files import JsonFileStore
from agentfsm.stores.sqlite import SQLiteSnapshotStore

__all__ = [
    "DurableSnapshotStore",
    "JsonFileStore",
    "RunDelta",
    "RunInfo",
    "SQLiteSnapshotStore",
    "SnapshotInfo",
    "SnapshotStore",
]
