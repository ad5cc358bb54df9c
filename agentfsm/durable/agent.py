"""DurableAgent: the same ``Agent``, its runs DBOS workflows."""

from __future__ import annotations

import functools
import inspect
import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dbos import DBOS, DBOSClient, SetWorkflowID
from dbos import error as dbos_errors

from agentfsm._core import listeners
from agentfsm._core.actions import Pause
from agentfsm._core.drivers import pause_exception
from agentfsm._core.records import final_snapshot, result_from_record
from agentfsm._core.resume import check_fingerprint
from agentfsm._core.runtime import AgentRun
from agentfsm.agent import RUN_ARGUMENTS, Agent, RunRequest
from agentfsm.breakpoints import AgentBreakpoint, Breakpoint, breakpoint_from_dict
from agentfsm.cancellation import RunHandle
from agentfsm.durable.driver import drive_durable, paused_snapshot, snapshot_where
from agentfsm.durable.executor import dbos_launched
from agentfsm.durable.records import (
    CONTINUATION,
    DEFAULT_QUEUE,
    RunRecord,
    continuation,
    continue_run,
    find_run,
)
from agentfsm.durable.steps import EndOfRecord, RecordedSteps, WorkflowSteps
from agentfsm.errors import ConfigurationError, ConfigurationTypeError, DurabilityError, SnapshotError
from agentfsm.events import EventHandler
from agentfsm.messages import ChatMessage
from agentfsm.serialization import serialize_value
from agentfsm.snapshot import AgentSnapshot
from agentfsm.workers import run_in_worker

#: The ``Agent.run`` options a durable run does not take (all but its own: the messages, system
#: prompt and breakpoint): they hold objects of the calling process, or are about snapshot stores.
_IN_PROCESS_ONLY = frozenset(RUN_ARGUMENTS.parameters) - {"self", "kwargs", "messages", "system_prompt", "break_point"}


class DurableRun:
    """A durable run started or continued from this process: its id, and a wait for its outcome."""

    def __init__(self, durable: DurableAgent, run_id: str, workflow_id: str, db: Any = DBOS) -> None:
        self.run_id = run_id
        self.workflow_id = workflow_id
        self._durable = durable
        self._db = db

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the workflow: the run's result, or ``BreakpointException`` when it paused (or its error).

        ``timeout`` (seconds): ``DurabilityError`` when the workflow has not ended by then (a queued
        run no worker took, say); the run is left as it is.
        """
        handle = self._db.retrieve_workflow(self.workflow_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is not None and handle.get_status().status in ("PENDING", "ENQUEUED", "DELAYED"):
            if time.monotonic() > deadline:
                raise DurabilityError(
                    f"Run {self.run_id} has not ended after {timeout} s (workflow {self.workflow_id} is "
                    f"{handle.get_status().status}; is a worker listening to its queue?). It goes on."
                )
            time.sleep(0.05)
        output: Any = handle.get_result(polling_interval_sec=0.05)
        return self._durable.outcome(output, self.workflow_id)


class DurableAgent:
    """Runs an ``Agent`` as DBOS workflows: the same agent, durable.

    Create it (it registers the workflow ``agentfsm.<name>`` with DBOS) before ``DBOS.launch()``,
    in every process that runs or recovers its runs. ``name`` must be the same in all of them.
    ``on_event`` is told the events (``agentfsm.events``) of the runs this process's workers drive.
    """

    def __init__(
        self, agent: Agent, name: str = "agent", *, queue: str = DEFAULT_QUEUE, on_event: EventHandler | None = None
    ) -> None:
        if not isinstance(agent, Agent):
            raise ConfigurationTypeError(f"DurableAgent takes an Agent, got {type(agent).__name__}.")
        if agent.snapshot_store is not None:
            raise ConfigurationError(
                "A durable run is kept in DBOS's system database: give DurableAgent an agent without a snapshot_store."
            )
        if agent.async_only_hooks:
            raise ConfigurationTypeError(
                f"Hooks {agent.async_only_hooks} are async functions: a durable run calls hooks in its workflow's thread."
            )
        if not name or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ConfigurationError(f"name must be letters, digits, '_', '.' or '-', got {name!r}.")
        if on_event is not None and (not callable(on_event) or inspect.iscoroutinefunction(on_event)):
            raise ConfigurationTypeError(f"on_event must be a sync callable taking an event, got {on_event!r}.")
        self.agent = agent
        self.name = name
        self.on_event = on_event
        self.queue = queue
        self.workflow_name = f"agentfsm.{name}"
        concurrency = agent.tool_concurrency
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="agentfsm-step") if concurrency > 1 else None

        def workflow(request: dict[str, Any]) -> dict[str, Any]:
            return self._execute(request)

        workflow.__qualname__ = workflow.__name__ = self.workflow_name
        self._workflow = DBOS.workflow(name=self.workflow_name)(workflow)

    # -- inside the workflow ----------------------------------------------------------------------------

    def _execute(self, request: dict[str, Any]) -> dict[str, Any]:
        if "cancelled" in request:
            return self._cancel(request["cancelled"])
        run = self._run_for(request, self.on_event)
        return drive_durable(run, self.agent.chat_generator, WorkflowSteps(self._pool))

    def _cancel(self, cancelled: dict[str, Any]) -> dict[str, Any]:
        """The workflow of a cancellation (``records.cancel``): the run takes its ``cancel`` edge where it was stopped.

        Where it stands is read from the record of the workflow DBOS stopped, in one step (a
        recovered cancellation reads it back); a run that ended before it was stopped ends the same
        way here. One stopped before its first phase (its before_run hooks not recorded) starts
        here and takes the edge at its first transition, as a run whose ``RunHandle`` was cancelled
        before it started does.
        """
        workflow_id = cancelled["workflow_id"]

        def where_it_stands() -> dict[str, Any] | None:
            run = self._run_for(cancelled["request"])
            recorded = RecordedSteps(workflow_id, DBOS.list_workflow_steps(workflow_id))
            try:
                return drive_durable(run, self.agent.chat_generator, recorded)
            except EndOfRecord:
                if run.error is not None:  # it failed before it was stopped
                    raise run.error from None
                if not run.task_cancelled():
                    return None
            action = run.next_action()
            assert isinstance(action, Pause)
            return {"paused": action.snapshot.to_dict()}

        steps = WorkflowSteps(self._pool)
        output: dict[str, Any] | None = steps.run("cancel", where_it_stands)
        if output is not None:
            return output
        handle = RunHandle()
        run = self._run_for(cancelled["request"], self.on_event, handle)
        handle.cancel()
        return drive_durable(run, self.agent.chat_generator, steps)

    def _run_for(
        self, request: dict[str, Any], on_event: EventHandler | None = None, cancel: RunHandle | None = None
    ) -> AgentRun:
        """The run a workflow's input starts: a new run, or a paused one continued with decisions."""
        if "snapshot" in request:
            return self.agent.new_run(
                RunRequest(
                    snapshot=request["snapshot"],
                    decisions=request["decisions"],
                    strict=True,
                    on_event=on_event,
                    agent_name=self.name,
                    recovers=True,
                )
            )
        check_fingerprint(request["run_id"], request["fingerprint"], self.agent.fingerprint, strict=True)
        break_point = request.get("break_point")
        run = self.agent.new_run(
            RunRequest(
                messages=[ChatMessage.from_dict(m) for m in request["messages"]],
                system_prompt=request.get("system_prompt"),
                state=self.agent.state_values(request["state"]),
                break_point=breakpoint_from_dict(break_point) if break_point else None,
                run_id=request["run_id"],
                on_event=on_event,
                agent_name=self.name,
                recovers=True,
                cancel=cancel,
            )
        )
        # The trace of the span that started the run (``agentfsm.telemetry``), whichever worker runs it,
        # and again when a worker recovers it.
        run.trace_context = request.get("trace_context")
        return run

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
        if run_id is not None and (not run_id or CONTINUATION.match(run_id)):
            raise ConfigurationError(f"A durable run id must not be empty or end in '/<number>', got {run_id!r}.")
        if "usage_limits" in state or "cancel" in state:
            raise ConfigurationError(
                "A durable run takes no per-run usage_limits= or cancel=: give the limits to the agent it "
                "runs (Agent(usage_limits=...)), and cancel it from any process with agentfsm.durable.cancel(db, run_id)."
            )
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
        trace_context = listeners.caller_trace_context()
        if trace_context:
            request["trace_context"] = trace_context
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
        match = CONTINUATION.match(workflow_id)
        snapshot = paused_snapshot(output, int(match["segment"]) if match else 0)
        if snapshot is not None:
            raise pause_exception(snapshot)
        if not isinstance(output, dict) or "done" not in output:
            raise DurabilityError(f"Workflow {workflow_id} is not a run of an agentfsm DurableAgent.")
        return result_from_record(output["done"], self.agent.output_spec, self.agent.state_keys)

    # -- reading runs -------------------------------------------------------------------------------------

    def result(self, run_id: str, db: Any = DBOS) -> dict[str, Any]:
        """The result of finished run ``run_id`` (``db``: DBOS, or a ``DBOSClient``); ``DurabilityError`` if it is not."""
        record = find_run(db, run_id)
        if record.done is None:
            raise DurabilityError(f"Run {run_id} is {record.status}, not done.")
        return result_from_record(record.done, self.agent.output_spec, self.agent.state_keys)

    def snapshot(self, run_id: str, db: Any = DBOS) -> AgentSnapshot:
        """Where run ``run_id`` stands, derived from its workflow's checkpoints (``db``: DBOS, or a ``DBOSClient``).

        A paused run's snapshot is its workflow's output, a finished one's is where it stood last
        (``final_snapshot``); a running (or crashed) one's is rebuilt by driving the run over the
        steps its workflow recorded so far, and a failed one's the same way, up to where it failed
        (its error: ``find_run(db, run_id).error``).
        """
        return self.view(find_run(db, run_id), db)

    def view(self, record: RunRecord, db: Any) -> AgentSnapshot:
        """Where the run ``record`` is of stands (``snapshot``, for a record read already)."""
        if record.ended is not None:
            return record.ended
        request, workflow_id = record.request, record.workflow_id
        cancelled = request.get("cancelled")
        if cancelled is not None:  # a cancellation under way: the run stands where the stopped workflow left it
            request, workflow_id = cancelled["request"], cancelled["workflow_id"]
        run = self._run_for(request)
        steps = RecordedSteps(workflow_id, db.list_workflow_steps(workflow_id))
        try:
            output: dict[str, Any] = drive_durable(run, self.agent.chat_generator, steps)
        except EndOfRecord:
            try:
                return snapshot_where(run, record.segment)
            except SnapshotError as exc:
                raise SnapshotError(f"{exc} (workflow {record.workflow_id} is {record.workflow_status})") from None
        # Every step recorded: the workflow is writing its output now.
        paused = paused_snapshot(output, record.segment)
        return paused if paused is not None else final_snapshot(output["done"], record.segment)


def _taken(run_id: str) -> DurabilityError:
    return DurabilityError(f"A durable run {run_id!r} exists already: run ids are unique. Pick another run_id.")


def _check_launched() -> None:
    """``DurabilityError`` unless DBOS is launched in this process."""
    if not dbos_launched():
        raise DurabilityError(
            "DBOS is not launched in this process: configure it and call DBOS.launch() before starting "
            "durable runs (agentfsm.durable.launch does both). A durable run never runs in-process instead."
        )
