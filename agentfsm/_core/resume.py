"""Resuming a run from its snapshot: checked, rebuilt, and moved along the ``resume`` edge.

Nothing that led to the snapshot runs again: the model replies, tool results, State values and
transitions it recorded are taken as they are, and the run continues with the work its phase had
not done yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from agentfsm._core.decisions import check_snapshot_decisions
from agentfsm._core.records import TransitionRecord
from agentfsm._core.runtime import AgentRun, RunConfig
from agentfsm.decisions import ToolExecutionDecision, as_decisions
from agentfsm.errors import AgentFSMError, AgentFSMSignal, AnswerError, DecisionError, SnapshotError
from agentfsm.interrupts import InputAnswer, split_answers
from agentfsm.lifecycle import run_done
from agentfsm.logs import logger
from agentfsm.machine import PREPARED_PHASES, CallStatus, Phase
from agentfsm.messages import ChatMessage, ToolCall
from agentfsm.pauses import AwaitingDecision, AwaitingInput
from agentfsm.slices import interrupts, limits, retries
from agentfsm.snapshot import AgentSnapshot
from agentfsm.state import State, values_from_dict
from agentfsm.tools.invoker import CallOutcome


def resume_run(
    config: RunConfig,
    schema: dict[str, Any],
    snapshot: AgentSnapshot | dict[str, Any],
    *,
    strict: bool,
    decisions: Sequence[Any] = (),
    before_resume: Callable[[AgentSnapshot], None] | None = None,
) -> AgentRun:
    """The run ``snapshot`` holds, in the phase it recorded, for an agent with this config and State schema.

    A snapshot taken by a differently configured agent (another fingerprint) logs a warning, or
    raises ``SnapshotError`` with ``strict``. Any other problem with the snapshot raises ``SnapshotError``.
    ``decisions`` (``ToolExecutionDecision``) decide pending calls of a run waiting in CONFIRM, or
    calls whose outcome is unknown; one that does not fit such a call raises ``DecisionError``.
    ``before_resume`` (a store's claim) is called once all is checked, before the ``resume`` edge:
    when anything raises, the run has not moved, and nothing ran.

    A snapshot recorded while the tools ran (in TOOL_RUN, no breakpoint) may hold calls that started
    and did not finish: they are in doubt. Those of idempotent tools run again; for the others, the
    run takes its ``in_doubt`` edge from TOOL_RUN to PAUSED (break point ``outcome_unknown``) until a
    decision says to run them again (``execute=True``) or gives their result (``execute=False``, the
    result as ``feedback``).

    A finished run's record resumes nowhere: a done one is refused (``StaleSnapshotError``), a failed
    one goes on from where it stood before its ``fail`` edge, retrying the work that failed.
    """
    given, answers = split_answers(decisions)
    decisions = [*as_decisions(given), *answers]
    snap = snapshot if isinstance(snapshot, AgentSnapshot) else AgentSnapshot.from_dict(snapshot)
    if snap.phase is Phase.DONE:
        raise run_done(snap.run_id, snap.seq, snap.seq)
    snap = snap.reopened()  # a failed run's record: it is retried where it failed
    expected = config.fingerprint()
    check_fingerprint(snap.run_id, snap.agent_fingerprint, expected, strict=strict)
    if snap.outcome_unknown_calls():  # recorded while its tools ran: the run applies the in-doubt rule
        config = replace(config, recovers=True)
    try:
        run = _rebuild(config, schema, snap, expected)
    except SnapshotError:
        raise
    # A signal raised here (by a toolset's or a strategy's restore) is no pause of this run: it cannot resume.
    except (AgentFSMError, AgentFSMSignal, KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"Cannot resume snapshot {snap.run_id}: {exc}") from exc
    pause = snap.pause
    waiting = set(pause.waiting) if isinstance(pause, AwaitingDecision) else set()
    unknown = snap.outcome_unknown_calls()
    checked_all = check_snapshot_decisions(snap, decisions)
    checked = [d for d in checked_all if isinstance(d, ToolExecutionDecision)]
    answered = [a for a in checked_all if isinstance(a, InputAnswer)]
    if isinstance(pause, AwaitingInput):
        if not answered:
            raise AnswerError(
                f"Run {snap.run_id} waits for answers to {[q.id for q in pause.questions]}: pass "
                "decisions=[InputAnswer(question_id, answer), ...] for them. Nothing ran."
            )
        run.answers = {**snap.input_answers, **{a.question_id: a.answer for a in answered}}
        interrupts.restore(run, pause, [a.question_id for a in answered])
    elif snap.input_answers:
        run.answers = dict(snap.input_answers)
    for c in run.pending:
        # A call that waited for a decision still waits, whatever this agent's strategies cover.
        if c.key in waiting and c.status is CallStatus.READY and c.decision is None:
            run.move_call(c, "ask")
    run.crashed_during_tool_run(unknown, decided=[d.tool_call_id for d in checked if d.tool_call_id is not None])
    for decision in checked:
        run.apply_decision(decision)
    # A call that waited for a decision never runs without one: it has one now, or a strategy of
    # this agent will decide it.
    unasked = [
        c
        for c in run.pending
        if c.status is CallStatus.UNDECIDED and config.confirmation.strategy_for(c.call.tool_name) is None
    ]
    if unasked:
        raise DecisionError(
            f"Tool calls {[c.key for c in unasked]} of run {snap.run_id} wait for a decision, and no "
            "confirmation strategy of this agent covers them: pass decisions=[...] for them. Nothing ran."
        )
    if snap.pause is not None:  # the time it sat paused is not the run's running time
        limits.resumed_after(run, datetime.fromisoformat(snap.created_at).timestamp())
    if before_resume is not None:
        before_resume(snap)
    stage = snap.stage
    if (
        snap.phase is Phase.TOOL_RUN
        and stage < retries.BACKOFF_STAGE
        and retries.calls_retrying(run)
        and all(c.status is not CallStatus.READY for c in run.pending)
    ):
        stage = retries.BACKOFF_STAGE  # stopped after an attempt failed, no other call to run: its backoff is owed
    run.interrupt("resume", snap.phase, stage=stage)
    return run


def check_fingerprint(run_id: str, recorded: str, expected: str, *, strict: bool) -> None:
    """Check a recorded run's agent fingerprint against this agent's: every way of continuing a run does.

    A run recorded by a differently configured agent (``recorded`` is not ``expected``) is logged as
    a warning, or, with ``strict``, refused with ``SnapshotError``.
    """
    if recorded == expected:
        return
    message = (
        f"Run {run_id} was recorded by an agent configured differently (fingerprint {recorded}, this agent "
        f"{expected}): tools, state schema, hooks, exit conditions or limits changed."
    )
    if strict:
        raise SnapshotError(
            message + " Continue it with the original configuration (an in-process resume may pass strict=False)."
        )
    logger.warning("snapshot from another agent configuration", run_id=run_id, detail=message)


def _rebuild(config: RunConfig, schema: dict[str, Any], snap: AgentSnapshot, fingerprint: str) -> AgentRun:
    values = values_from_dict(snap.state, schema)
    messages = [ChatMessage.from_dict(m) for m in snap.messages]
    state = State.from_complete_schema(schema)
    state.restore({**values, "messages": messages})
    for toolset in config.dynamic:
        restore = getattr(toolset, "restore", None)
        if callable(restore):
            restore(messages)
    run = AgentRun(config, state, snap.run_id, fingerprint)
    run.phase, run.step, run.exit_reason = Phase.PAUSED, snap.step, snap.exit_reason
    run.trace = [TransitionRecord.from_dict(r) for r in snap.trace]
    run.calls = [ToolCall.from_dict(c) for c in snap.pending_tool_calls]
    run.decisions = [dict(d) for d in snap.decisions]
    run.trace_context = dict(snap.trace_context) if snap.trace_context else None
    if run.decisions:
        taken = [ToolExecutionDecision.from_dict(d) for d in run.decisions if not d.get("outcome_unknown")]
        for strategy in config.confirmation.strategies():
            restore = getattr(strategy, "restore", None)
            if callable(restore):
                restore(taken)
    if snap.phase in PREPARED_PHASES:
        # Before the resume edge: its observers record the calls that finished already.
        run.prepare_calls({key: CallOutcome.from_dict(o) for key, o in snap.completed_tool_results.items()})
        if snap.tool_call_attempts:  # the calls' failed attempts count on; those owed a backoff wait for it
            retries.restore(run, snap.tool_call_attempts, snap.retrying_tool_calls)
    return run
