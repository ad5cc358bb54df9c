"""Durable runs as DBOS records them: each run's workflows, and the continuation of a paused one.

A run's first workflow has the run's id; a run that paused and was decided goes on in workflow
``RUN_ID/1``, then ``RUN_ID/2``... (its segments). ``db`` is DBOS launched in this process, or a
``DBOSClient``: reading runs and deciding them needs neither the agent nor a launched DBOS.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dbos import DBOSClient
from dbos import error as dbos_errors

from agentfsm._core.decisions import check_snapshot_decisions
from agentfsm._core.records import final_snapshot
from agentfsm.durable.driver import paused_snapshot
from agentfsm.errors import DecisionError, DurabilityError, StaleSnapshotError
from agentfsm.pauses import RunStatus
from agentfsm.snapshot import AgentSnapshot, iso_from_timestamp

#: The DBOS queue durable runs are enqueued on, unless their ``DurableAgent`` names another.
DEFAULT_QUEUE = "agentfsm"

CONTINUATION = re.compile(r"^(?P<run>.+)/(?P<segment>[1-9][0-9]*)$")


def segment_id(run_id: str, segment: int) -> str:
    """The workflow id of a run's ``segment``: the run id for the first, ``RUN_ID/N`` after the N-th pause."""
    return run_id if segment == 0 else f"{run_id}/{segment}"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A durable run as its newest workflow stands in DBOS's system database."""

    run_id: str
    #: How many times the run paused and was continued: its newest workflow is ``segment_id(run_id, segment)``.
    segment: int
    #: The DBOS status of that workflow (``PENDING``, ``ENQUEUED``, ``SUCCESS``, ``ERROR``...).
    workflow_status: str
    #: The registered workflow (its ``DurableAgent``'s ``workflow_name``) and its queue.
    workflow_name: str
    queue_name: str | None
    request: dict[str, Any]
    #: The snapshot of a paused run (its workflow's output).
    paused: AgentSnapshot | None
    #: A finished run's result, as data (its workflow's output).
    done: dict[str, Any] | None
    #: The error a failed run's workflow ended with.
    error: BaseException | None
    #: When the workflow last changed.
    updated_at: str

    @property
    def workflow_id(self) -> str:
        """The id of the run's newest workflow."""
        return segment_id(self.run_id, self.segment)

    @property
    def ended(self) -> AgentSnapshot | None:
        """The snapshot its workflow ended with: a paused run's, or where a finished one stood last; else None."""
        if self.paused is not None:
            return self.paused
        return None if self.done is None else final_snapshot(self.done, self.segment)

    @property
    def status(self) -> RunStatus:
        """``active`` (running, queued, or its worker died and it waits for recovery), ``paused``, ``done`` or ``failed``."""
        if self.done is not None:
            return RunStatus.DONE
        if self.paused is not None:
            return RunStatus.PAUSED
        if self.workflow_status in ("PENDING", "ENQUEUED", "DELAYED"):
            return RunStatus.ACTIVE
        return RunStatus.FAILED


def run_workflows(db: Any, run_ids: Sequence[str] | None = None) -> dict[str, list[RunRecord]]:
    """Each run's workflows (of ``run_ids``, or of every run) in the system database, first segment first."""
    found: dict[str, list[RunRecord]] = {}
    for status in db.list_workflows(workflow_id_prefix=list(run_ids) if run_ids else None):
        request = status.input["args"][0] if status.input and status.input.get("args") else None
        if not isinstance(request, dict) or "run_id" not in request:
            continue  # not an agentfsm workflow
        match = CONTINUATION.match(status.workflow_id)
        run_id, segment = (match["run"], int(match["segment"])) if match else (status.workflow_id, 0)
        if run_id != request["run_id"] or (run_ids and run_id not in run_ids):
            continue
        output = status.output if status.status == "SUCCESS" and isinstance(status.output, dict) else {}
        record = RunRecord(
            run_id,
            segment,
            status.status,
            status.name,
            status.queue_name,
            request,
            paused_snapshot(output, segment),
            output.get("done"),
            status.error,
            iso_from_timestamp((status.updated_at or status.created_at or 0) / 1000),
        )
        found.setdefault(run_id, []).append(record)
    return {run_id: sorted(records, key=lambda r: r.segment) for run_id, records in found.items()}


def newest_workflows(db: Any, run_ids: Sequence[str] | None = None) -> list[RunRecord]:
    """The newest workflow of each run (of ``run_ids``, or of every run), the runs oldest first."""
    runs = run_workflows(db, run_ids).values()
    return [records[-1] for records in sorted(runs, key=lambda records: records[0].updated_at)]


def find_run(db: Any, run_id: str) -> RunRecord:
    """The run's record; ``DurabilityError`` when the system database has no run ``run_id``."""
    found = newest_workflows(db, [run_id])
    if not found:
        raise DurabilityError(f"No durable run {run_id!r} in this DBOS system database.")
    return found[0]


def list_runs(db: Any) -> list[RunRecord]:
    """Every durable run of ``db`` (DBOS, or a ``DBOSClient``: no agent or launched DBOS needed), oldest first."""
    return newest_workflows(db)


@dataclass(frozen=True, slots=True)
class Continuation:
    """What continues a paused run: the run as it stands, and the workflow (id and input) to start."""

    record: RunRecord
    workflow_id: str
    request: dict[str, Any]

    def decided_already(self) -> StaleSnapshotError:
        """The error for a second decision on the same pause."""
        return StaleSnapshotError(
            f"Run {self.record.run_id} was decided already: its pause {self.record.segment} is continued by "
            f"workflow {self.workflow_id}. Nothing ran.",
            run_id=self.record.run_id,
            seq=self.record.segment,
            head=self.record.segment + 1,
        )


def continuation(
    db: Any, run_id: str, decisions: Sequence[Any] = (), expected_segment: int | None = None
) -> Continuation:
    """The continuation of paused run ``run_id`` with ``decisions``, checked against its paused snapshot.

    ``DurabilityError`` for an unknown run, ``DecisionError`` for one that is not paused or decisions
    that fit no waiting call; ``StaleSnapshotError`` when the run moved on from pause ``expected_segment``
    (a snapshot's ``seq``).
    """
    record = find_run(db, run_id)
    if expected_segment is not None and record.segment != expected_segment:
        raise StaleSnapshotError(
            f"Run {run_id} moved on from pause {expected_segment} (its newest workflow is {record.workflow_id}). "
            "Nothing ran.",
            run_id=run_id,
            seq=expected_segment,
            head=record.segment,
        )
    snapshot = record.paused
    if snapshot is None:
        raise DecisionError(f"Run {run_id} is {record.status}, not paused: there is nothing to decide. Nothing ran.")
    taken = check_snapshot_decisions(snapshot, decisions)
    request = {
        "run_id": run_id,
        "segment": record.segment + 1,
        "snapshot": snapshot.to_dict(),
        "decisions": [d.to_dict() for d in taken],
    }
    return Continuation(record, segment_id(run_id, record.segment + 1), request)


def continue_run(db: Any, run_id: str, decisions: Sequence[Any] = (), expected_segment: int | None = None) -> str:
    """Enqueue the continuation of paused run ``run_id`` on its queue: its workflow id.

    Errors as ``continuation``'s, and ``StaleSnapshotError`` when another decision on this pause came first.
    """
    c = continuation(db, run_id, decisions, expected_segment)
    options: dict[str, Any] = {
        "workflow_name": c.record.workflow_name,
        "queue_name": c.record.queue_name or DEFAULT_QUEUE,
        "workflow_id": c.workflow_id,
        "workflow_id_reuse_policy": "reject",
    }
    enqueue = getattr(db, "enqueue_workflow_with_options", None) or db.enqueue
    try:
        handle = enqueue(options, c.request)
    except dbos_errors.DBOSWorkflowIDInUseError:
        raise c.decided_already() from None
    return str(handle.workflow_id)


def cancel(db: Any, run_id: str) -> str:
    """Cancel active durable run ``run_id`` from any process (``db``: DBOS, or a ``DBOSClient``): its workflow id.

    DBOS stops the run's workflow before its next step; what the workflow recorded stays, as after
    a crash. A tool call under way runs on (it cannot be stopped), but its result is not recorded:
    ``resume_cancelled`` continues the run from the recorded steps, with that call in doubt (the
    journal rules apply: it runs again if its tool is idempotent, else it waits for a decision).
    ``DurabilityError`` when the run is not active.
    """
    record = find_run(db, run_id)
    if record.status is not RunStatus.ACTIVE:
        raise DurabilityError(f"Run {run_id} is {record.status.value}: only an active durable run can be cancelled.")
    db.cancel_workflow(record.workflow_id)
    return record.workflow_id


def resume_cancelled(db: Any, run_id: str) -> str:
    """Continue cancelled durable run ``run_id`` from the steps its workflow recorded: the workflow id.

    ``DurabilityError`` when the run's workflow was not cancelled.
    """
    record = find_run(db, run_id)
    if record.workflow_status != "CANCELLED":
        raise DurabilityError(f"Run {run_id} was not cancelled (its workflow is {record.workflow_status}).")
    return str(db.resume_workflow(record.workflow_id).workflow_id)


def decide(system_database_url: str, run_id: str, decisions: Sequence[Any]) -> str:
    """Decide paused run ``run_id`` from any process (``agentfsm decide`` does): the continuation's workflow id.

    Needs no agent and no launched DBOS: the continuation is enqueued on the run's queue, and a
    worker of its agent runs it.
    """
    client = DBOSClient(system_database_url=system_database_url)
    try:
        return continue_run(client, run_id, decisions)
    finally:
        client.destroy()
