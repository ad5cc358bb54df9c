"""Where snapshots live: a directory of JSON files, or an embedded SQLite database."""

from agentfsm.stores.base import DurableSnapshotStore, RunInfo, SnapshotInfo, SnapshotStore
from agentfsm.stores.json_files import JsonFileStore
from agentfsm.stores.sqlite import SQLiteSnapshotStore

__all__ = [
    "DurableSnapshotStore",
    "JsonFileStore",
    "RunInfo",
    "SQLiteSnapshotStore",
    "SnapshotInfo",
    "SnapshotStore",
]
