"""Durable runs read the way the review page and the command line read a snapshot store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentfsm.durable.agent import DurableAgent
from agentfsm.durable.records import RunRecord, continue_run, newest_workflows, run_workflows
from agentfsm.errors import SnapshotError
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores.base import RunInfo, SnapshotInfo


class DurableRuns:
    """Durable runs read the way the review page reads a snapshot store (``runs``, ``latest``, ``history``, ``load``).

    ``db``: DBOS launched in this process, or a ``DBOSClient``. ``durable``: the runs' DurableAgent,
    which derives where a running run stands (without it, only paused and finished runs have a
    snapshot). Snapshot ``N`` of a run is the pause that ended its workflow ``N``, or where its
    newest workflow stands. A decision (``decide``) goes to the run's queue, for a worker.
    """

    def __init__(self, db: Any, durable: DurableAgent | None = None) -> None:
        self.db = db
        self.durable = durable

    def _view(self, record: RunRecord) -> AgentSnapshot:
        if self.durable is not None:
            return self.durable.view(record, self.db)
        if record.ended is not None:
            return record.ended
        raise SnapshotError(f"Run {record.run_id} is {record.status}: its DurableAgent derives where it stands.")

    def runs(self) -> list[RunInfo]:
        """Every run, most recently updated first (``active`` while its workflow runs or waits to)."""
        infos = []
        for record in newest_workflows(self.db):
            try:
                snapshot: AgentSnapshot | None = self._view(record)
            except SnapshotError:
                snapshot = None
            infos.append(
                RunInfo(
                    record.run_id,
                    record.status,
                    snapshot.phase if snapshot else record.phase,
                    snapshot.step if snapshot else 0,
                    record.segment + 1,
                    record.updated_at,
                    exit_reason=record.exit_reason,
                )
            )
        return sorted(infos, key=lambda info: info.updated_at, reverse=True)

    def latest(self, run_id: str) -> AgentSnapshot:
        """Where the run stands now; ``SnapshotError`` when that cannot be said (unknown or failed run)."""
        found = run_workflows(self.db, [run_id]).get(run_id)
        if not found:
            raise SnapshotError(f"No durable run {run_id!r} in this DBOS system database.")
        return self._view(found[-1])

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """The run's pauses, then where it stands now."""
        infos = []
        for record in run_workflows(self.db, [run_id]).get(run_id, []):
            try:
                snapshot = self._view(record)
            except SnapshotError:
                continue
            infos.append(SnapshotInfo(run_id, record.segment, snapshot.phase, snapshot.step, record.updated_at))
        return infos

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """Snapshot ``seq`` of the run."""
        found = [r for r in run_workflows(self.db, [run_id]).get(run_id, []) if r.segment == seq]
        if not found:
            raise SnapshotError(f"Run {run_id!r} has no snapshot number {seq}.")
        return self._view(found[0])

    def decide(self, snapshot: AgentSnapshot, decisions: Sequence[Any]) -> None:
        """Continue the paused run ``snapshot`` is of with ``decisions``, on its queue (it must be that pause)."""
        continue_run(self.db, snapshot.run_id, decisions, expected_segment=snapshot.seq)
