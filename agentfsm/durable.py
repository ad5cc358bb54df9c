"""Durable runs: an agent's runs as DBOS workflows (``pip install 'agentfsm[dbos]'``).

``DurableAgent(agent)`` runs the same ``Agent`` as a DBOS workflow whose id is the run id. Each model
call, tool call, confirmation and hook point is a DBOS step, checkpointed in DBOS's system database
(SQLite on one machine, PostgreSQL for many processes). When a worker dies, DBOS runs the workflow
again (``DBOS.launch()`` of an executor with the same id, or a queue's next worker): every recorded
step gives back its recorded output instead of running, and the run goes on from the first step
that was not recorded. The run's snapshot is derived from the same checkpoints
(``DurableAgent.snapshot``): the run is rebuilt from its workflow's input and driven over its
recorded steps, with no other record to keep in step.

A run that pauses (a confirmation to take, a breakpoint, tool calls in doubt) ends its workflow
with the pause snapshot as output, so a waiting run is rows in the database, not a thread or a
process. A decision starts the continuation: workflow ``RUN_ID/1``, then ``RUN_ID/2``...; DBOS
refuses a second workflow with the same id, so two decisions on one pause cannot both run.

Tool calls are DBOS steps, run at least once: a call that started and whose result was never
recorded (its worker died) runs again only when its tool is idempotent (``@tool(idempotent=True)``);
otherwise the run pauses with break point ``outcome_unknown`` until a decision settles the call.
"""

from __future__ import annotations

import contextvars
import functools
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

import dbos._dbos as dbos_core
from dbos import DBOS, DBOSClient, SetWorkflowID
from dbos import error as dbos_errors

from agentfsm.agent import Agent, RunRequest
from agentfsm.breakpoints import AgentBreakpoint, Breakpoint, breakpoint_from_dict
from agentfsm.drivers import ask_strategies, pause_exception, run_hooks
from agentfsm.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    DecisionError,
    DurabilityError,
    SnapshotError,
    StaleSnapshotError,
)
from agentfsm.machine import PHASE_WORK, Phase
from agentfsm.messages import ChatMessage
from agentfsm.runtime import (
    AgentRun,
    CallModel,
    Confirm,
    Fail,
    Finish,
    Pause,
    RunHooks,
    RunTools,
    TransitionRecord,
    bad_model_output,
    run_result,
)
from agentfsm.serialization import deserialize_value, serialize_value
from agentfsm.snapshot import AgentSnapshot, iso_from_timestamp, now_iso
from agentfsm.state import State
from agentfsm.stores.base import RunInfo, SnapshotInfo
from agentfsm.tools.invoker import CallOutcome, CallStatus, PreparedCall
from agentfsm.workers import run_in_worker

#: The DBOS queue durable runs are enqueued on, unless their ``DurableAgent`` names another.
DEFAULT_QUEUE = "agentfsm"

# -- where steps come from: DBOS in a workflow, or a workflow's checkpoints read back --------------------


class Steps(Protocol):
    """Runs a run's steps: each one's output is its checkpoint."""

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        """The step's output: ``body()``'s, or the one recorded for it."""

    def run_each(self, name: str, bodies: Sequence[Callable[[], Any]], done: Callable[[int, Any], None]) -> None:
        """Run several steps, concurrently where they may be; ``done(index, output)`` as each finishes."""


class WorkflowSteps:
    """The steps of the workflow running in this thread: DBOS runs each once and records its output.

    ``run_each`` draws the steps' ids in order before any runs (``DBOS.reserve_step``), so a
    recovered workflow finds each output under the same id whatever order they finished in.
    """

    def __init__(self, pool: ThreadPoolExecutor | None) -> None:
        self._pool = pool

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        """Run ``body`` as the workflow's next step."""
        return DBOS.run_step({"name": name}, body)

    def run_each(self, name: str, bodies: Sequence[Callable[[], Any]], done: Callable[[int, Any], None]) -> None:
        """Run ``bodies`` as steps, in the pool when there are several."""
        reserved = [_reserve(name, body) for body in bodies]
        if self._pool is None or len(bodies) == 1:
            for i, step in enumerate(reserved):
                done(i, step())
            return
        futures = {self._pool.submit(step): i for i, step in enumerate(reserved)}
        for future in as_completed(futures):
            done(futures[future], future.result())


def _reserve(name: str, body: Callable[[], Any]) -> Callable[[], Any]:
    """The workflow's next step, to run later from any thread: its id is drawn now."""
    step = DBOS.reserve_step()
    context = contextvars.copy_context()  # where DBOS keeps the workflow the step belongs to

    def run() -> Any:
        return step.run({"name": name}, body)

    return lambda: context.run(run)


class EndOfRecord(Exception):
    """The recorded steps of a workflow end here: the run stands where its next step would start."""


class RecordedSteps:
    """The steps a workflow recorded, given back in the order the run asks for them."""

    def __init__(self, workflow_id: str, steps: Sequence[Any]) -> None:
        self._workflow_id = workflow_id
        self._steps = {step["function_id"]: step for step in steps}
        self._next = 1  # DBOS numbers a workflow's steps from 1

    def _take(self, name: str) -> Any:
        step = self._steps.get(self._next)
        self._next += 1
        if step is None:
            raise EndOfRecord
        if step["function_name"] != name:
            raise SnapshotError(
                f"Workflow {self._workflow_id} recorded step {step['function_id']} as {step['function_name']!r} "
                f"where this agent takes {name!r}: it was run by an agent configured differently."
            )
        if step["error"] is not None:
            raise step["error"]
        return step["output"]

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        """The step's recorded output (or the error it recorded)."""
        return self._take(name)

    def run_each(self, name: str, bodies: Sequence[Callable[[], Any]], done: Callable[[int, Any], None]) -> None:
        """Give each recorded output to ``done``; ``EndOfRecord`` after them if any is missing."""
        missing = False
        for i in range(len(bodies)):
            try:
                output = self._take(name)
            except EndOfRecord:
                missing = True
                continue
            done(i, output)
        if missing:
            raise EndOfRecord


# -- the driver -----------------------------------------------------------------------------------------


def drive_durable(run: AgentRun, generator: Any, steps: Steps) -> dict[str, Any]:
    """Perform a run's I/O as steps until it finishes or pauses: the workflow's output.

    ``{"done": result}`` for a finished run (its result as data), ``{"paused": snapshot}`` for a
    paused one; a failed run raises its error. Same decisions as ``drive_sync``: only the I/O differs.
    """
    while True:
        try:
            action = run.next_action()
            match action:
                case CallModel():
                    output = steps.run("model", functools.partial(_call_model, generator, action))
                    run.model_replied({"replies": [ChatMessage.from_dict(m) for m in output["replies"]]})
                case RunTools():
                    _run_tools(run, action.calls, steps)
                case Confirm():
                    decisions = steps.run("confirm", functools.partial(_confirm, run, action))
                    run.decided(decisions)
                case RunHooks():
                    ran: list[bool] = []
                    record = steps.run(f"hooks:{action.point.value}", functools.partial(_hooks, run, action, ran))
                    if not ran:  # recorded: the State the hooks left
                        _restore_state(run.state, record)
                    run.hooks_ran(action.point)
                case Pause():
                    return {"paused": action.snapshot.to_dict()}
                case Finish():
                    return {"done": _result_record(run)}
                case Fail():
                    raise action.error
                case _:
                    assert_never(action)
        except (EndOfRecord, dbos_errors.DBOSException, dbos_errors.DBOSBaseException):
            raise  # not the run's own error: DBOS's, or the end of what a workflow recorded
        except BaseException as exc:
            if not run.fail(exc):
                raise


def _call_model(generator: Any, action: CallModel) -> dict[str, Any]:
    output = generator.run(messages=action.messages, tools=action.tools or None, streaming_callback=None)
    replies = output.get("replies") if isinstance(output, dict) else None
    if not isinstance(replies, list) or not replies or not all(isinstance(r, ChatMessage) for r in replies):
        raise bad_model_output(output)
    return {"replies": [r.to_dict() for r in replies]}


def _confirm(run: AgentRun, action: Confirm) -> list[dict[str, Any] | None]:
    return [d if d is None or isinstance(d, dict) else d.to_dict() for d in ask_strategies(run, action)]


def _hooks(run: AgentRun, action: RunHooks, ran: list[bool]) -> dict[str, Any]:
    run_hooks(run, action)
    ran.append(True)
    return _state_record(run.state)


def _state_record(state: State) -> dict[str, Any]:
    data = state.data
    return {
        "messages": [m.to_dict() for m in data.get("messages") or []],
        "values": serialize_value({k: v for k, v in data.items() if k != "messages"}),
    }


def _restore_state(state: State, record: dict[str, Any]) -> None:
    state.restore(
        {**deserialize_value(record["values"]), "messages": [ChatMessage.from_dict(m) for m in record["messages"]]}
    )


def _run_tools(run: AgentRun, calls: list[PreparedCall], steps: Steps) -> None:
    """Each ready call a step; a call an earlier attempt started and never finished is in doubt."""
    ready = [c for c in calls if c.status is CallStatus.READY]
    fresh: list[bool] = []  # the journal step ran here: no earlier attempt started these calls

    def journal() -> list[str]:
        fresh.append(True)
        return [c.key for c in ready]

    if any(not _idempotent(c) for c in ready):
        steps.run("tools_started", journal)

    def call(c: PreparedCall) -> dict[str, Any]:
        if not fresh and not _idempotent(c):
            return {"outcome_unknown": True}
        return run.config.invoker.invoke(c).to_dict()

    def done(i: int, output: dict[str, Any]) -> None:
        c = ready[i]
        if output.get("outcome_unknown"):
            c.status = CallStatus.UNKNOWN
            return
        c.status, c.outcome = CallStatus.DONE, CallOutcome.from_dict(output)
        run.tool_completed(c)

    if ready:
        steps.run_each("tool", [functools.partial(call, c) for c in ready], done)
    if not run.pause_in_doubt():
        run.tools_ran()


def _idempotent(call: PreparedCall) -> bool:
    return call.tool is not None and call.tool.idempotent


# -- runs and their workflows -------------------------------------------------------------------------------

#: ``Agent.run`` options that hold objects of the calling process, or are about snapshot stores.
_IN_PROCESS_ONLY = frozenset({"streaming_callback", "hook_context", "tools", "fork", "take_over", "strict"})

_CONTINUATION = re.compile(r"^(?P<run>.+)/(?P<segment>[1-9][0-9]*)$")


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
    def status(self) -> str:
        """``running`` (or queued, or its worker died and it waits for recovery), ``paused``, ``done`` or ``failed``."""
        if self.done is not None:
            return "done"
        if self.paused is not None:
            return "paused"
        if self.workflow_status in ("PENDING", "ENQUEUED", "DELAYED"):
            return "running"
        return "failed"


def _paused_snapshot(output: Any, segment: int) -> AgentSnapshot | None:
    """The snapshot a workflow's output holds when its run paused (numbered by the segment it ended)."""
    if not isinstance(output, dict) or "paused" not in output:
        return None
    return AgentSnapshot.from_dict(output["paused"]).model_copy(update={"seq": segment})


def _workflows(db: Any, run_ids: Sequence[str] | None = None) -> dict[str, list[RunRecord]]:
    """Each run's workflows (of ``run_ids``, or of every run) in the system database, first segment first."""
    found: dict[str, list[RunRecord]] = {}
    for status in db.list_workflows(workflow_id_prefix=list(run_ids) if run_ids else None):
        request = status.input["args"][0] if status.input and status.input.get("args") else None
        if not isinstance(request, dict) or "run_id" not in request:
            continue  # not an agentfsm workflow
        match = _CONTINUATION.match(status.workflow_id)
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
            _paused_snapshot(output, segment),
            output.get("done"),
            status.error,
            iso_from_timestamp((status.updated_at or status.created_at or 0) / 1000),
        )
        found.setdefault(run_id, []).append(record)
    return {run_id: sorted(records, key=lambda r: r.segment) for run_id, records in found.items()}


def _records(db: Any, run_ids: Sequence[str] | None = None) -> list[RunRecord]:
    """The newest workflow of each run (of ``run_ids``, or of every run), the runs oldest first."""
    runs = _workflows(db, run_ids).values()
    return [records[-1] for records in sorted(runs, key=lambda records: records[0].updated_at)]


def find_run(db: Any, run_id: str) -> RunRecord:
    """The run's record; ``DurabilityError`` when the system database has no run ``run_id``."""
    found = _records(db, [run_id])
    if not found:
        raise DurabilityError(f"No durable run {run_id!r} in this DBOS system database.")
    return found[0]


def list_runs(db: Any) -> list[RunRecord]:
    """Every durable run of ``db`` (DBOS, or a ``DBOSClient``: no agent or launched DBOS needed), oldest first."""
    return _records(db)


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
    from agentfsm.hitl.types import ToolExecutionDecision

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
    taken = [ToolExecutionDecision.from_dict(d) if isinstance(d, dict) else d for d in decisions]
    _check_decisions(snapshot, taken)
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


def _check_decisions(snapshot: AgentSnapshot, decisions: Sequence[Any]) -> None:
    """Each decision names a call the paused run waits for, with that call's tool name."""
    reason = snapshot.break_point or {}
    if reason.get("type") == "confirmation":
        waiting = set(reason.get("waiting", ()))
    elif reason.get("type") == "outcome_unknown":
        waiting = set(reason["tool_call_ids"])
    else:
        waiting = set()
    if decisions and not waiting:
        raise DecisionError(f"Run {snapshot.run_id} paused at a breakpoint and waits for no decision. Nothing ran.")
    calls = snapshot.pending_calls_by_key()
    for d in decisions:
        call = calls.get(d.tool_call_id)
        if d.tool_call_id not in waiting or call is None:
            raise DecisionError(
                f"Run {snapshot.run_id} waits for decisions on {sorted(waiting)}, not on {d.tool_call_id!r}. Nothing ran."
            )
        if call["tool_name"] != d.tool_name:
            raise DecisionError(
                f"Call {d.tool_call_id!r} of run {snapshot.run_id} is a {call['tool_name']} call, not {d.tool_name}. "
                "Nothing ran."
            )


def decide(system_database_url: str, run_id: str, decisions: Sequence[Any]) -> str:
    """Decide paused run ``run_id`` from any process (``agentfsm approve`` does): the continuation's workflow id.

    Needs no agent and no launched DBOS: the continuation is enqueued on the run's queue, and a
    worker of its agent runs it.
    """
    client = DBOSClient(system_database_url=system_database_url)
    try:
        return continue_run(client, run_id, decisions)
    finally:
        client.destroy()


class DurableRun:
    """A durable run started or continued from this process: its id, and a wait for its outcome."""

    def __init__(self, durable: DurableAgent, run_id: str, workflow_id: str, db: Any = DBOS) -> None:
        self.run_id = run_id
        self.workflow_id = workflow_id
        self._durable = durable
        self._db = db

    def result(self) -> dict[str, Any]:
        """Wait for the workflow: the run's result, or ``BreakpointException`` when it paused (or its error)."""
        output: Any = self._db.retrieve_workflow(self.workflow_id).get_result(polling_interval_sec=0.05)
        return self._durable.outcome(output, self.workflow_id)


class DurableAgent:
    """Runs an ``Agent`` as DBOS workflows: the same agent, durable.

    Create it (it registers the workflow ``agentfsm.<name>`` with DBOS) before ``DBOS.launch()``,
    in every process that runs or recovers its runs. ``name`` must be the same in all of them.
    """

    def __init__(self, agent: Agent, name: str = "agent", *, queue: str = DEFAULT_QUEUE) -> None:
        if not isinstance(agent, Agent):
            raise ConfigurationTypeError(f"DurableAgent takes an Agent, got {type(agent).__name__}.")
        if agent.snapshot_store is not None:
            raise ConfigurationError(
                "A durable run is kept in DBOS's system database: give DurableAgent an agent without a snapshot_store."
            )
        if agent._async_only_hooks:
            raise ConfigurationTypeError(
                f"Hooks {agent._async_only_hooks} are async functions: a durable run calls hooks in its workflow's thread."
            )
        if not name or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ConfigurationError(f"name must be letters, digits, '_', '.' or '-', got {name!r}.")
        self.agent = agent
        self.name = name
        self.queue = queue
        self.workflow_name = f"agentfsm.{name}"
        concurrency = agent._invoker.tool_concurrency
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="agentfsm-step") if concurrency > 1 else None

        def workflow(request: dict[str, Any]) -> dict[str, Any]:
            return self._execute(request)

        workflow.__qualname__ = workflow.__name__ = self.workflow_name
        self._workflow = DBOS.workflow(name=self.workflow_name)(workflow)

    # -- inside the workflow ----------------------------------------------------------------------------

    def _execute(self, request: dict[str, Any]) -> dict[str, Any]:
        run = self._run_for(request)
        return drive_durable(run, self.agent.chat_generator, WorkflowSteps(self._pool))

    def _run_for(self, request: dict[str, Any]) -> AgentRun:
        """The run a workflow's input starts: a new run, or a paused one continued with decisions."""
        if "snapshot" in request:
            return self.agent.new_run(
                RunRequest(snapshot=request["snapshot"], decisions=request["decisions"], strict=True)
            )
        expected = self.agent.fingerprint
        if request["fingerprint"] != expected:
            raise SnapshotError(
                f"Run {request['run_id']} was started by an agent configured differently (fingerprint "
                f"{request['fingerprint']}, this worker's {expected}): tools, state schema, hooks or limits "
                "differ. Run it on a worker with the same agent."
            )
        break_point = request.get("break_point")
        return self.agent.new_run(
            RunRequest(
                messages=[ChatMessage.from_dict(m) for m in request["messages"]],
                system_prompt=request.get("system_prompt"),
                state=deserialize_value(request["state"]),
                break_point=breakpoint_from_dict(break_point) if break_point else None,
                run_id=request["run_id"],
            )
        )

    # -- starting runs -------------------------------------------------------------------------------------

    def _request(
        self,
        messages: list[ChatMessage],
        run_id: str | None,
        system_prompt: str | None,
        break_point: AgentBreakpoint | Breakpoint | None,
        state: dict[str, Any],
    ) -> dict[str, Any]:
        if not isinstance(messages, list) or not all(isinstance(m, ChatMessage) for m in messages):
            raise ConfigurationTypeError("messages must be a list of ChatMessage.")
        if run_id is not None and (not run_id or _CONTINUATION.match(run_id)):
            raise ConfigurationError(f"A durable run id must not be empty or end in '/<number>', got {run_id!r}.")
        unsupported = sorted(set(state) & _IN_PROCESS_ONLY)
        if unsupported:
            raise ConfigurationError(
                f"{unsupported} are Agent.run options a durable run does not take: its workflow may go on in "
                "another process, which has no callback or request objects of this one (and no snapshot store)."
            )
        bp = break_point.break_point if isinstance(break_point, AgentBreakpoint) else break_point
        request = {
            "run_id": run_id or uuid.uuid4().hex,
            "messages": [m.to_dict() for m in messages],
            "system_prompt": system_prompt,
            "state": serialize_value(state),
            "break_point": bp.to_dict() if bp is not None else None,
            "fingerprint": self.agent.fingerprint,
        }
        # What the worker builds from it must be a run this agent can start: check it here, now.
        self._run_for(request)
        return request

    def start(
        self,
        messages: list[ChatMessage],
        *,
        run_id: str | None = None,
        system_prompt: str | None = None,
        break_point: AgentBreakpoint | Breakpoint | None = None,
        queued: bool = False,
        client: DBOSClient | None = None,
        **state: Any,
    ) -> DurableRun:
        """Start a durable run: its handle.

        It starts in this process, where DBOS must be launched (``DurabilityError`` otherwise: a
        durable run never runs in-process silently); ``queued=True`` puts it on the agent's queue
        instead, for any worker. With a ``DBOSClient``, a process that runs no workflows (a web app)
        puts it on the queue.
        """
        request = self._request(messages, run_id, system_prompt, break_point, state)
        workflow_id = request["run_id"]
        if client is not None:
            options: dict[str, Any] = {
                "workflow_name": self.workflow_name,
                "queue_name": self.queue,
                "workflow_id": workflow_id,
                "workflow_id_reuse_policy": "reject",
            }
            try:
                handle: Any = client.enqueue(options, request)  # type: ignore[arg-type]
            except dbos_errors.DBOSWorkflowIDInUseError:
                raise _taken(workflow_id) from None
            return DurableRun(self, workflow_id, handle.workflow_id, client)
        _check_launched()
        try:
            with SetWorkflowID(workflow_id, workflow_id_reuse_policy="reject"):
                if queued:
                    handle = DBOS.enqueue_workflow(self.queue, self._workflow, request)
                else:
                    handle = DBOS.start_workflow(self._workflow, request)
        except dbos_errors.DBOSWorkflowIDInUseError:
            raise _taken(workflow_id) from None
        return DurableRun(self, workflow_id, handle.workflow_id)

    def run(
        self,
        messages: list[ChatMessage] | None = None,
        *,
        run_id: str | None = None,
        system_prompt: str | None = None,
        break_point: AgentBreakpoint | Breakpoint | None = None,
        snapshot: AgentSnapshot | dict[str, Any] | None = None,
        decisions: Sequence[Any] = (),
        **state: Any,
    ) -> dict[str, Any]:
        """Like ``Agent.run``, durably: run the workflow in this thread (or continue the paused ``snapshot``).

        Returns the run's result; a run that pauses raises ``BreakpointException`` (a confirmation:
        ``HITLBreakpointException``) whose snapshot continues it: ``run(snapshot=exc.snapshot, decisions=[...])``.
        A snapshot the run has moved past raises ``StaleSnapshotError``, and nothing runs.
        """
        if snapshot is not None:
            if messages or system_prompt is not None or state or break_point is not None:
                raise ConfigurationError(
                    "A continued run goes on from its snapshot: do not pass messages, system_prompt, "
                    "break_point or state values together with snapshot=."
                )
            snap = snapshot if isinstance(snapshot, AgentSnapshot) else AgentSnapshot.from_dict(snapshot)
            _check_launched()
            c = continuation(DBOS, snap.run_id, decisions, expected_segment=snap.seq)
            return self._run_here(c.request, c.workflow_id, c.decided_already)
        if decisions:
            raise ConfigurationError("decisions= are for a paused run: pass its snapshot= too.")
        request = self._request(messages or [], run_id, system_prompt, break_point, state)
        return self._run_here(request, request["run_id"], lambda: _taken(request["run_id"]))

    async def run_async(
        self,
        messages: list[ChatMessage] | None = None,
        *,
        run_id: str | None = None,
        system_prompt: str | None = None,
        break_point: AgentBreakpoint | Breakpoint | None = None,
        snapshot: AgentSnapshot | dict[str, Any] | None = None,
        decisions: Sequence[Any] = (),
        **state: Any,
    ) -> dict[str, Any]:
        """``run`` for event loops: the workflow runs in a worker thread (its steps and hooks are sync)."""
        call = functools.partial(
            self.run,
            messages,
            run_id=run_id,
            system_prompt=system_prompt,
            break_point=break_point,
            snapshot=snapshot,
            decisions=decisions,
            **state,
        )
        return await run_in_worker(call)

    def _run_here(self, request: dict[str, Any], workflow_id: str, taken: Callable[[], Exception]) -> dict[str, Any]:
        """Run workflow ``workflow_id`` in this thread (as durable as in the background, without waiting for it)."""
        _check_launched()
        try:
            with SetWorkflowID(workflow_id, workflow_id_reuse_policy="reject"):
                output = self._workflow(request)
        except dbos_errors.DBOSWorkflowIDInUseError:
            raise taken() from None
        return self.outcome(output, workflow_id)

    def resume(self, run_id: str, decisions: Sequence[Any] = ()) -> DurableRun:
        """Continue paused run ``run_id`` with ``decisions`` on its queue (a worker runs it): its handle."""
        _check_launched()
        return DurableRun(self, run_id, continue_run(DBOS, run_id, decisions))

    def outcome(self, output: Any, workflow_id: str) -> dict[str, Any]:
        """The result of a workflow's output, or the ``BreakpointException`` of a paused run."""
        match = _CONTINUATION.match(workflow_id)
        snapshot = _paused_snapshot(output, int(match["segment"]) if match else 0)
        if snapshot is not None:
            raise pause_exception(snapshot)
        if not isinstance(output, dict) or "done" not in output:
            raise DurabilityError(f"Workflow {workflow_id} is not a run of an agentfsm DurableAgent.")
        return _result(output["done"])

    # -- reading runs -------------------------------------------------------------------------------------

    def result(self, run_id: str, db: Any = DBOS) -> dict[str, Any]:
        """The result of finished run ``run_id`` (``db``: DBOS, or a ``DBOSClient``); ``DurabilityError`` if it is not."""
        record = find_run(db, run_id)
        if record.done is None:
            raise DurabilityError(f"Run {run_id} is {record.status}, not done.")
        return _result(record.done)

    def snapshot(self, run_id: str, db: Any = DBOS) -> AgentSnapshot:
        """Where run ``run_id`` stands, derived from its workflow's checkpoints (``db``: DBOS, or a ``DBOSClient``).

        A paused run's snapshot is its workflow's output, a finished one's is where it stood last
        (``final_snapshot``); a running (or crashed) one's is rebuilt by driving the run over the
        steps its workflow recorded so far. A failed run has its error instead (``DurabilityError`` says it).
        """
        return self._view(find_run(db, run_id), db)

    def _view(self, record: RunRecord, db: Any) -> AgentSnapshot:
        if record.paused is not None:
            return record.paused
        if record.done is not None:
            return final_snapshot(record.done, record.segment)
        if record.status == "failed":
            raise DurabilityError(f"Run {record.run_id} failed ({record.workflow_status}): {record.error!r}")
        run = self._run_for(record.request)
        steps = RecordedSteps(record.workflow_id, db.list_workflow_steps(record.workflow_id))
        try:
            output: dict[str, Any] = drive_durable(run, self.agent.chat_generator, steps)
        except EndOfRecord:
            return run.make_snapshot().model_copy(update={"seq": record.segment})
        # Every step recorded: the workflow is writing its output now.
        paused = _paused_snapshot(output, record.segment)
        return paused if paused is not None else final_snapshot(output["done"], record.segment)


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
        if record.paused is None and record.done is None and self.durable is None:
            raise SnapshotError(f"Run {record.run_id} is {record.status}: its DurableAgent derives where it stands.")
        if self.durable is None:
            return record.paused or final_snapshot(record.done or {}, record.segment)
        try:
            return self.durable._view(record, self.db)
        except DurabilityError as exc:
            raise SnapshotError(str(exc)) from None

    def runs(self) -> list[RunInfo]:
        """Every run, most recently updated first (``active`` while its workflow runs or waits to)."""
        infos = []
        for record in _records(self.db):
            try:
                snapshot: AgentSnapshot | None = self._view(record)
            except SnapshotError:
                snapshot = None
            infos.append(
                RunInfo(
                    record.run_id,
                    "active" if record.status == "running" else record.status,
                    snapshot.phase if snapshot else None,
                    snapshot.step if snapshot else 0,
                    record.segment + 1,
                    record.updated_at,
                    exit_reason=record.done["exit_reason"] if record.done else None,
                )
            )
        return sorted(infos, key=lambda info: info.updated_at, reverse=True)

    def latest(self, run_id: str) -> AgentSnapshot:
        """Where the run stands now; ``SnapshotError`` when that cannot be said (unknown or failed run)."""
        found = _workflows(self.db, [run_id]).get(run_id)
        if not found:
            raise SnapshotError(f"No durable run {run_id!r} in this DBOS system database.")
        return self._view(found[-1])

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """The run's pauses, then where it stands now."""
        infos = []
        for record in _workflows(self.db, [run_id]).get(run_id, []):
            try:
                snapshot = self._view(record)
            except SnapshotError:
                continue
            infos.append(SnapshotInfo(run_id, record.segment, snapshot.phase, snapshot.step, record.updated_at))
        return infos

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """Snapshot ``seq`` of the run."""
        found = [r for r in _workflows(self.db, [run_id]).get(run_id, []) if r.segment == seq]
        if not found:
            raise SnapshotError(f"Run {run_id!r} has no snapshot number {seq}.")
        return self._view(found[0])

    def decide(self, snapshot: AgentSnapshot, decisions: Sequence[Any]) -> None:
        """Continue the paused run ``snapshot`` is of with ``decisions``, on its queue (it must be that pause)."""
        continue_run(self.db, snapshot.run_id, decisions, expected_segment=snapshot.seq)


def _taken(run_id: str) -> DurabilityError:
    return DurabilityError(f"A durable run {run_id!r} exists already: run ids are unique. Pick another run_id.")


def _result_record(run: AgentRun) -> dict[str, Any]:
    """A finished run as data (the workflow's output): its snapshot fields, in DONE."""
    return {
        **run.snapshot_fields(),
        "phase": run.phase.value,
        "messages": [m.to_dict() for m in run.state.data.get("messages") or []],
        "trace": [r.to_dict() for r in run.trace],
        "created_at": now_iso(),
    }


def _result(record: dict[str, Any]) -> dict[str, Any]:
    """``Agent.run``'s result for a finished run's record."""
    data = {**deserialize_value(record["state"]), "messages": [ChatMessage.from_dict(m) for m in record["messages"]]}
    return run_result(data, record["exit_reason"], [TransitionRecord.from_dict(r) for r in record["trace"]])


def final_snapshot(record: dict[str, Any], segment: int) -> AgentSnapshot:
    """A finished run where it stood last: in EXIT_CHECK with its work done, before the edge to DONE.

    What a snapshot store keeps of a finished run; resuming it takes the same edge to the same result.
    """
    return AgentSnapshot.from_dict(
        {
            **record,
            "phase": Phase.EXIT_CHECK.value,
            "stage": len(PHASE_WORK[Phase.EXIT_CHECK]),
            "trace": record["trace"][:-1],
            "seq": segment,
        }
    )


def _check_launched() -> None:
    """``DurabilityError`` unless DBOS is launched in this process (DBOS has no public flag for it)."""
    instance = dbos_core._dbos_global_instance
    if instance is None or not instance._launched:
        raise DurabilityError(
            "DBOS is not launched in this process: configure it and call DBOS.launch() before starting "
            "durable runs (agentfsm.durable.launch does both). A durable run never runs in-process instead."
        )


# -- workers ----------------------------------------------------------------------------------------------


def launch(
    system_database_url: str,
    *,
    app_name: str = "agentfsm",
    executor_id: str | None = None,
    queues: dict[str, int | None] | None = None,
    polling_interval: float = 0.1,
    log_level: str = "WARNING",
) -> None:
    """Configure and launch DBOS in this process, and listen to the durable agents' queues.

    ``executor_id``: give each worker its own, stable across restarts: a restarted worker recovers
    the workflows its previous life left unfinished. ``queues``: the per-worker concurrency limit of
    each queue (default: the ``agentfsm`` queue, unlimited). ``polling_interval``: how often, in
    seconds, the worker looks for queued runs (DBOS's default is 1 s: a second's wait per run).
    """
    limits = queues if queues is not None else {DEFAULT_QUEUE: None}
    config: dict[str, Any] = {"name": app_name, "system_database_url": system_database_url, "log_level": log_level}
    if executor_id is not None:
        config["executor_id"] = executor_id
    DBOS(config=config)  # type: ignore[arg-type]
    DBOS.listen_queues(list(limits))
    DBOS.launch()
    for queue, limit in limits.items():
        DBOS.register_queue(
            queue, worker_concurrency=limit, on_conflict="always_update", polling_interval_sec=polling_interval
        )


def serve_forever(stop: threading.Event | None = None) -> None:
    """Block this thread while DBOS's queue workers run the durable runs (until ``stop`` is set)."""
    (stop or threading.Event()).wait()
