"""Durable runs as DBOS records them: each run's workflows, and the continuation of a paused one.

A run's first workflow has the run's id; a run that paused and was decided goes on in workflow
``RUN_ID/1``, then ``RUN_ID/2``... (its segments). ``db`` is DBOS launched in this process, or a
``DBOSClient``: reading runs, deciding and cancelling them needs neither the agent nor a launched DBOS.

A durable run's record is the stored run's lifecycle (``agentfsm.lifecycle``) read from its
workflows: its newest workflow holds it while it runs, and the way that workflow ended is the edge
its run took (paused, cancelled, done, failed). A continuation claims the run from its newest
pause; a cancellation takes it over from its workflow, which DBOS stops, and its own workflow
(``RUN_ID/N+1``, run by a worker) takes the run's ``cancel`` edge where the stopped one's record
ends: the run is then paused, cancelled, and a continuation resumes it like any paused run.
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
from agentfsm.events import error_text
from agentfsm.lifecycle import CANCELLED, Request, StoredRun, Trigger, move
from agentfsm.machine import Phase
from agentfsm.pauses import Cancelled, RunStatus
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
    def cancelling(self) -> str | None:
        """For a cancellation under way (its workflow not ended yet), the workflow it cancelled; else None."""
        cancelled = self.request.get("cancelled")
        return str(cancelled["workflow_id"]) if cancelled and self.stored.status is RunStatus.ACTIVE else None

    @property
    def stored(self) -> StoredRun:
        """The run's record as the lifecycle has it: held by its newest workflow, moved by the way that one ended.

        DBOS recovers its own workflows: a workflow's claim never expires (no lease), and DBOS's unique
        workflow ids keep a pause from being continued twice. A workflow cancelled in DBOS and not
        yet followed by the cancellation's own is still active: ``cancel`` takes its edge.
        """
        held = StoredRun(RunStatus.ACTIVE, self.segment, self.workflow_id)
        if self.done is not None:
            trigger, reason = Trigger.FINISH, self.done["exit_reason"]
        elif self.paused is not None:
            cancelled = isinstance(self.paused.pause, Cancelled)
            trigger, reason = (Trigger.CANCEL, CANCELLED) if cancelled else (Trigger.PAUSE, None)
        elif self.workflow_status in ("PENDING", "ENQUEUED", "DELAYED", "CANCELLED"):
            return held
        else:
            trigger, reason = Trigger.FAIL, error_text(self.error)[:500] if self.error is not None else None
        return move(self.run_id, held, Request(trigger, self.workflow_id, exit_reason=reason))

    @property
    def status(self) -> RunStatus:
        """``active`` (running, queued, being cancelled, or its worker died and it waits for recovery), ``paused``, ``done`` or ``failed``."""
        status = self.stored.status
        assert status is not None
        return status

    @property
    def exit_reason(self) -> str | None:
        """What the run's last ending said: a done run's exit reason, a failed run's error, ``cancelled``."""
        return self.stored.exit_reason

    @property
    def phase(self) -> Phase | None:
        """The phase a paused run resumes into or a finished one ended in (FAILED for a failed one); None while active."""
        ended = self.ended
        if ended is not None:
            return ended.phase
        return Phase.FAILED if self.status is RunStatus.FAILED else None


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
    seq = record.segment if expected_segment is None else expected_segment
    snapshot = record.paused
    if snapshot is None and seq == record.segment:
        raise DecisionError(f"Run {run_id} is {record.status}, not paused: there is nothing to decide. Nothing ran.")
    # From its newest pause only: a decision on an older one is refused, the run having moved on from it.
    move(run_id, record.stored, Request(Trigger.CLAIM, segment_id(run_id, record.segment + 1), seq=seq))
    assert snapshot is not None  # the claim holds from the newest workflow, which paused
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
    try:
        _enqueue(db, c.record, c.workflow_id, c.request)
    except dbos_errors.DBOSWorkflowIDInUseError:
        raise c.decided_already() from None
    return c.workflow_id


def _enqueue(db: Any, record: RunRecord, workflow_id: str, request: dict[str, Any]) -> None:
    """Enqueue workflow ``workflow_id`` of the run ``record`` is of, on its queue (a second one of that id is refused)."""
    options: dict[str, Any] = {
        "workflow_name": record.workflow_name,
        "queue_name": record.queue_name or DEFAULT_QUEUE,
        "workflow_id": workflow_id,
        "workflow_id_reuse_policy": "reject",
    }
    enqueue = getattr(db, "enqueue_workflow_with_options", None) or db.enqueue
    enqueue(options, request)


def cancel(db: Any, run_id: str) -> str:
    """Cancel active durable run ``run_id`` from any process (``db``: DBOS, or a ``DBOSClient``): its workflow id.

    As in-process, the run takes its ``cancel`` edge to PAUSED where it stands: DBOS stops the
    run's workflow before its next step (what it recorded stays, as after a crash), and the
    cancellation's own workflow (``RUN_ID/N+1``, on the run's queue) takes the edge where that
    record ends. The run is then paused (its record's reason ``cancelled``), and any continuation
    resumes it (``continue_run``, ``DurableAgent.resume``, ``agentfsm resume``). A tool call under
    way runs on (it cannot be stopped), but its result is not recorded: the resumed run finds it in
    doubt (it runs again if its tool is idempotent, else it waits for a decision).
    ``DurabilityError`` when the run is not active, or is being cancelled already.
    """
    record = find_run(db, run_id)
    if record.status is not RunStatus.ACTIVE:
        raise DurabilityError(f"Run {run_id} is {record.status.value}: only an active durable run can be cancelled.")
    again = DurabilityError(f"Run {run_id} is being cancelled already (workflow {record.workflow_id}).")
    if record.cancelling is not None:
        raise again
    # The cancellation takes the run over from its workflow: from where that workflow stands.
    canceller = segment_id(run_id, record.segment + 1)
    move(run_id, record.stored, Request(Trigger.TAKE_OVER, canceller, seq=record.segment))
    db.cancel_workflow(record.workflow_id)
    request = {
        "run_id": run_id,
        "segment": record.segment + 1,
        "cancelled": {"workflow_id": record.workflow_id, "request": record.request},
    }
    try:
        _enqueue(db, record, canceller, request)
    except dbos_errors.DBOSWorkflowIDInUseError:
        raise again from None
    return record.workflow_id


def resume_cancelled(db: Any, run_id: str) -> str:
    """Continue cancelled durable run ``run_id`` on its queue (``continue_run`` with no decisions): the workflow id.

    ``DurabilityError`` when the run is not paused by a cancellation.
    """
    record = find_run(db, run_id)
    if record.exit_reason != CANCELLED or record.status is not RunStatus.PAUSED:
        raise DurabilityError(f"Run {run_id} was not cancelled (it is {record.status.value}).")
    return continue_run(db, run_id, expected_segment=record.segment)


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
