"""The durable driver: a run's I/O actions as DBOS steps, and what its workflow ends with.

Same decisions as ``drive_sync`` (the sans-I/O runtime takes them); only the I/O differs: each
model call, tool call, confirmation and hook point is a step whose output is its checkpoint. The
journal (``slices.doubt.started_calls``), the in-doubt rule (``AgentRun.crashed_during_tool_run``), the
decision check (``agentfsm._core.decisions``), the fingerprint check (``agentfsm._core.resume``) and what a
finished run's record and final snapshot are (``records.result_record``, ``records.final_snapshot``)
are the core's, as for every driver. A
workflow's output is ``{"paused": snapshot}`` or ``{"done": record}`` (a finished run's record: its
snapshot fields, in DONE, its trace ending with that edge).
"""

from __future__ import annotations

import functools
import time
from typing import Any, assert_never

from dbos import error as dbos_errors

from agentfsm._core.actions import (
    Backoff,
    CallModel,
    CheckGuardrails,
    Confirm,
    Fail,
    Finish,
    Pause,
    Reconcile,
    RunHooks,
    RunTools,
)
from agentfsm._core.drivers import ask_strategies, back_off, call_model, run_hooks, write_deltas
from agentfsm._core.emitting import Emitter, emitter_for
from agentfsm._core.progress import BufferRelay, progress_calls
from agentfsm._core.records import final_snapshot, result_record
from agentfsm._core.runtime import AgentRun, bad_model_output
from agentfsm.durable.steps import EndOfRecord, Steps
from agentfsm.errors import SnapshotError
from agentfsm.generators.base import ChatGenerator
from agentfsm.guardrails import GuardrailVerdict, check_sync
from agentfsm.interrupts import Asker
from agentfsm.machine import CANNOT_FAIL, TERMINAL_PHASES, CallStatus, Phase
from agentfsm.messages import ChatMessage
from agentfsm.pauses import InputQuestion
from agentfsm.reconcile import answer_from_dict, answer_to_dict, ask
from agentfsm.serialization import serialize_value
from agentfsm.slices import doubt, limits
from agentfsm.snapshot import AgentSnapshot
from agentfsm.state import State, values_from_dict
from agentfsm.tools.invoker import CallOutcome, PreparedCall


def drive_durable(run: AgentRun, generator: ChatGenerator, steps: Steps) -> dict[str, Any]:  # noqa: PLR0915 (one match over every kind of action, as in steps_sync)
    """Perform a run's I/O as steps until it finishes or pauses: the workflow's output.

    ``{"done": result}`` for a finished run (its result as data), ``{"paused": snapshot}`` for a
    paused one; a failed run raises its error. Same decisions as ``drive_sync``: only the I/O differs.
    Events (``agentfsm.events``) go out as in ``drive_sync``, except when ``steps`` only read a record;
    a model call, tool call or hook that a recovered workflow finds recorded gives no events again.
    """
    emitter = None if steps.reading else emitter_for(run, generator)
    started = run.clock_started
    if started is not None:
        # A new run's wall clock counts from its first start, recorded as a step: a workflow
        # recovered or resumed after a cancellation reads it back instead of starting it again.
        limits.clock_started_at(run, steps.run("clock", lambda: started))
    if emitter is not None:
        emitter.start()
    while True:
        try:
            action = run.next_action()
            write_deltas(run)
            if emitter is not None and type(action) is RunTools:
                emitter.send()  # a call's start goes out with its end, once it is known to have run here
            elif emitter is not None:
                emitter.announce(action)
            match action:
                case CallModel():
                    output = steps.run("model", functools.partial(_call_model, generator, action, emitter))
                    run.model_replied({"replies": [ChatMessage.from_dict(m) for m in output["replies"]]})
                case RunTools():
                    _run_tools(run, action.calls, steps, emitter)
                case Backoff():
                    _back_off(run, action, steps)
                case Reconcile():
                    answers = steps.run("reconcile", functools.partial(_reconcile, action))
                    run.reconciled([answer_from_dict(a) for a in answers])
                case Confirm():
                    decisions = steps.run("confirm", functools.partial(_confirm, run, action))
                    run.decided(decisions)
                case CheckGuardrails():
                    verdicts = steps.run(f"guardrails:{action.point}", functools.partial(_guardrails, action))
                    run.guardrails_checked([GuardrailVerdict.from_dict(v) for v in verdicts])
                case RunHooks():
                    ran: list[bool] = []
                    record = steps.run(
                        f"hooks:{action.point.value}", functools.partial(_hooks, run, action, ran, emitter)
                    )
                    if not ran:  # recorded: the State the hooks left
                        _restore_state(run.state, record)
                    asked = record.get("asked")
                    run.hooks_ran(action.point, None if asked is None else InputQuestion.from_dict(asked))
                case Pause():
                    if emitter is not None:
                        emitter.send(emitter.paused(action.snapshot, None))
                    return {"paused": action.snapshot.to_dict()}
                case Finish():
                    return {"done": result_record(run)}
                case Fail():
                    raise action.error
                case _:
                    assert_never(action)
        except (EndOfRecord, dbos_errors.DBOSException, dbos_errors.DBOSBaseException):
            raise  # not the run's own error: DBOS's, or the end of what a workflow recorded
        except BaseException as exc:
            if steps.reading:
                raise _failed_on_record(run, exc) from exc
            if not run.fail(exc):
                if emitter is not None:
                    emitter.escaped(exc)
                raise


def _back_off(run: AgentRun, action: Backoff, steps: Steps) -> None:
    """Wait before the calls' next attempts; a workflow read back over its record waits for nothing."""
    if not steps.reading:
        back_off(action.delay, run.config.cancel)
    run.backed_off()


def _failed_on_record(run: AgentRun, error: BaseException) -> EndOfRecord:
    """The end of a failed run's record: the run takes its fail edge where the error was recorded (nothing else runs)."""
    if run.phase not in CANNOT_FAIL:
        run.error = error
        run.interrupt("fail", Phase.FAILED)
    return EndOfRecord()


def _call_model(generator: ChatGenerator, action: CallModel, emitter: Emitter | None) -> dict[str, Any]:
    call = functools.partial(call_model, generator, action, None)
    output = call() if emitter is None else emitter.call_model(call, action)
    replies = output.get("replies") if isinstance(output, dict) else None
    if not isinstance(replies, list) or not replies or not all(isinstance(r, ChatMessage) for r in replies):
        raise bad_model_output(output)
    return {"replies": [r.to_dict() for r in replies]}


def _guardrails(action: CheckGuardrails) -> list[dict[str, Any]]:
    return [v.to_dict() for v in check_sync(action)]


def _reconcile(action: Reconcile) -> list[dict[str, Any]]:
    return [answer_to_dict(ask(f, question)) for f, question in action.asked()]


def _confirm(run: AgentRun, action: Confirm) -> list[dict[str, Any] | None]:
    return [d if d is None or isinstance(d, dict) else d.to_dict() for d in ask_strategies(run, action)]


def _hooks(run: AgentRun, action: RunHooks, ran: list[bool], emitter: Emitter | None) -> dict[str, Any]:
    asked = run_hooks(run, action, emitter)
    ran.append(True)
    record = _state_record(run.state)
    return record if asked is None else {**record, "asked": asked.to_dict()}


def _state_record(state: State) -> dict[str, Any]:
    data = state.data
    return {
        "messages": [m.to_dict() for m in data.get("messages") or []],
        "values": serialize_value({k: v for k, v in data.items() if k != "messages"}),
    }


def _restore_state(state: State, record: dict[str, Any]) -> None:
    state.restore(
        {
            **values_from_dict(record["values"], state.schema),
            "messages": [ChatMessage.from_dict(m) for m in record["messages"]],
        }
    )


def _run_tools(run: AgentRun, calls: list[PreparedCall], steps: Steps, emitter: Emitter | None) -> None:
    """Each ready call a step, after the run's journal of started calls (``slices.doubt.started_calls``) is a step.

    When the journal was recorded by an earlier attempt, that attempt may have run the calls whose
    steps have no output: their steps record them as in doubt, and the run applies the in-doubt rule
    (``AgentRun.crashed_during_tool_run``); the calls it runs again are steps of their own.
    """
    ready = [c for c in calls if c.status is CallStatus.READY]
    fresh: list[bool] = []  # the journal step ran here: no earlier attempt started these calls

    def journal() -> list[str]:
        fresh.append(True)
        return doubt.started_calls(run)

    if all(doubt.runs_again_after_crash(c) for c in ready):
        fresh.append(True)  # no journal: calls that run again by the in-doubt rule run as if for the first time
    else:
        steps.run("tools_started", journal)
    in_doubt = _run_calls(run, ready, steps, emitter, started_before=not fresh)
    if in_doubt:
        run.crashed_during_tool_run(in_doubt)
        if not doubt.calls_in_doubt(run):  # else no call runs until they are decided (RUN_TOOLS's SKIP_WORK)
            _run_calls(run, [c for c in ready if c.status is CallStatus.READY], steps, emitter, started_before=False)
    run.tools_ran()  # with calls in doubt, the run takes its in_doubt edge to PAUSED next


def _run_calls(
    run: AgentRun, ready: list[PreparedCall], steps: Steps, emitter: Emitter | None, *, started_before: bool
) -> list[str]:
    """Run the calls as steps, recording each finished one; the keys of those in doubt.

    ``started_before``: an earlier attempt journaled the calls, so one whose step has no output yet
    may have run: its step records it in doubt instead of running it. The progress a call reports
    goes out between its start and its end, sent together once its step ran here (``BufferRelay``):
    live only, a recovered workflow has none to give again.
    """
    in_doubt: list[str] = []
    #: The calls whose steps ran in this attempt (a recovered workflow finds the others recorded), and
    #: when each started (``time.time``, ``perf_counter``): only they give events.
    started: dict[str, tuple[float, float]] = {}
    reporting = progress_calls(ready) if emitter is not None and emitter.handler is not None else []
    relay = BufferRelay() if reporting else None
    if relay is not None:
        relay.attach(run.run_id, run.step, reporting)

    def call(c: PreparedCall) -> dict[str, Any]:
        if started_before:
            return {"outcome_unknown": True}
        started[c.key] = (time.time(), time.perf_counter())
        outcome = run.config.invoker.invoke(c).to_dict()
        asker = c.asker
        question = asker.asked if isinstance(asker, Asker) else None  # the step records what the tool asked
        return outcome if question is None else {**outcome, "asked": question.to_dict()}

    def done(i: int, output: dict[str, Any]) -> None:
        c = ready[i]
        if output.get("outcome_unknown"):
            in_doubt.append(c.key)
            return
        asked = output.get("asked")
        if asked is not None:  # read back from the record: the call asked as it did then
            c.asker = Asker({}, c.key)
            c.asker.asked = InputQuestion.from_dict(asked)
        c.outcome = CallOutcome.from_dict(output)
        progress = [] if relay is None else relay.take(c)
        if emitter is not None and c.key in started:
            began, ended = emitter.tool_ran(c, *started[c.key])
            emitter.send(began)
            for report in progress:
                emitter.send(report)
            emitter.send(ended)
        run.tool_completed(c)
        write_deltas(run)
        if emitter is not None:
            emitter.send()

    if ready:
        try:
            steps.run_each("tool", [functools.partial(call, c) for c in ready], done)
        finally:
            if relay is not None:
                relay.close()
    return in_doubt


def paused_snapshot(output: Any, segment: int) -> AgentSnapshot | None:
    """The snapshot a workflow's output holds when its run paused (numbered by the segment it ended)."""
    if not isinstance(output, dict) or "paused" not in output:
        return None
    return AgentSnapshot.from_dict(output["paused"]).model_copy(update={"seq": segment})


def snapshot_where(run: AgentRun, segment: int) -> AgentSnapshot:
    """Where a run driven over its workflow's record stands when the record ends, as its snapshot.

    In DONE (its after_run hooks not recorded yet) or FAILED that is the finished run's record
    (``final_snapshot``); before its first phase (its before_run hooks not recorded yet) there is
    none, as in a snapshot store: ``SnapshotError``.
    """
    if run.phase is Phase.IDLE:
        raise SnapshotError(f"Run {run.run_id} has not started yet: it has no snapshot before its first phase.")
    if run.phase in TERMINAL_PHASES:
        return final_snapshot(result_record(run), segment)
    return run.make_snapshot().model_copy(update={"seq": segment})
