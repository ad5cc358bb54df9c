"""JsonFileStore: one readable JSON file per snapshot."""

from __future__ import annotations

import os
from pathlib import Path

from agentfsm.errors import SnapshotError
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores.base import RunInfo, SnapshotInfo


class JsonFileStore:
    """One readable JSON file per snapshot: ``<directory>/<run id>/<seq>_<step>_<phase>.json``."""

    durable = False

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _files(self, run_id: str) -> list[Path]:
        return sorted((self.directory / run_id).glob("*.json"))

    def save(self, snapshot: AgentSnapshot) -> SnapshotInfo:
        """Write the snapshot atomically as the next file of its run."""
        seq = len(self._files(snapshot.run_id))
        name = f"{seq:06d}_{snapshot.step:04d}_{snapshot.phase.value}.json"
        snapshot.to_file(self.directory / snapshot.run_id / name)
        return SnapshotInfo(snapshot.run_id, seq, snapshot.phase, snapshot.step, snapshot.created_at)

    def latest(self, run_id: str) -> AgentSnapshot:
        """The newest snapshot file of the run."""
        files = self._files(run_id)
        if not files:
            raise SnapshotError(f"No snapshot of run {run_id!r} in {self.directory}.")
        return AgentSnapshot.from_file(files[-1])

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """The ``seq``-th snapshot file of the run."""
        files = self._files(run_id)
        if not 0 <= seq < len(files):
            raise SnapshotError(f"Run {run_id!r} has {len(files)} snapshots; there is no number {seq}.")
        return AgentSnapshot.from_file(files[seq])

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """Every snapshot file of the run, read and validated."""
        infos = []
        for seq, path in enumerate(self._files(run_id)):
            snapshot = AgentSnapshot.from_file(path)
            infos.append(SnapshotInfo(run_id, seq, snapshot.phase, snapshot.step, snapshot.created_at))
        return infos

    def runs(self) -> list[RunInfo]:
        """Runs with at least one snapshot file."""
        found = []
        for folder in self.directory.iterdir() if self.directory.exists() else []:
            files = self._files(folder.name)
            if files:
                newest = AgentSnapshot.from_file(files[-1])
                found.append(RunInfo(folder.name, "paused", newest.phase, newest.step, len(files), newest.created_at))
        return sorted(found, key=lambda r: r.updated_at, reverse=True)
