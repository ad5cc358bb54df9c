"""What a run records, as data: the edges it took, the deltas its observers write, its snapshots and its result.

``TransitionRecord`` is one edge taken; ``RunDelta`` what changed at a transition or after work
within a phase (the run hands them out, ``AgentRun.take_deltas``; the drivers give them to the
``RunObserver``s, durable stores among them). ``snapshot_fields`` / ``snapshot_of`` are the run as
a snapshot; ``result_record`` / ``final_snapshot`` / ``result_from_record`` a finished run's record.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from agentfsm._core.phases import CALL_DONE, FAILED, PHASE_WORK, TERMINAL_PHASES, Phase
from agentfsm.errors import SerializationError
from agentfsm.events import error_text
from agentfsm.machine import TRANSITIONS
from agentfsm.messages import ChatMessage
from agentfsm.pauses import Cancelled, PauseReason
from agentfsm.result import AgentResult
from agentfsm.serialization import deserialize_value, serialize_value
from agentfsm.slices.doubt import started_calls
from agentfsm.slices.output import answer_of, output_value
from agentfsm.slices.retries import attempts_of, retrying_of
from agentfsm.snapshot import AgentSnapshot, now_iso

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun
    from agentfsm.output import OutputType

#: What an agent without an output type has instead of an ``output``: its result has no such key.
_NO_OUTPUT: Any = object()


class TransitionRecord(NamedTuple):
    """One edge taken by a run: at which step, from where to where, by which trigger, after how long."""

    step: int
    source: Phase
    dest: Phase
    trigger: str
    duration_us: float

    def to_dict(self) -> dict[str, Any]:
        """Serialize to JSON-compatible values (phases are ``str`` enums)."""
        return self._asdict()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransitionRecord:
        """Invert ``to_dict``."""
        return cls(data["step"], Phase(data["source"]), Phase(data["dest"]), data["trigger"], data["duration_us"])


#: Makes a ``TransitionRecord`` from the tuple of its fields, as its constructor does but without the
#: Python-level ``__new__`` a NamedTuple runs: a run makes four records a step.
new_record = functools.partial(tuple.__new__, TransitionRecord)


class RunDelta(NamedTuple):
    """What a run records at each transition and after work within a phase (a finished tool call, hooks, decisions).

    The run only records deltas (``AgentRun.take_deltas``); the drivers hand them to the observers.
    A record, like ``TransitionRecord``: a durable run makes five a step, and a frozen dataclass
    costs three times as much to build.
    """

    run_id: str
    #: The edge just taken; ``None`` for work done within a phase: a tool call finished, hooks ran,
    #: decisions were taken.
    record: TransitionRecord | None
    #: Messages added to the conversation since the last delta; all of them when ``rewritten``.
    messages: list[ChatMessage]
    #: The conversation was replaced (not only appended to) since the last delta, or this is the first.
    rewritten: bool
    #: Transitions taken since the last delta; all of them when ``rewritten``.
    trace: list[TransitionRecord]
    #: The snapshot fields of the run where it stands now, except ``messages``, ``trace`` and
    #: ``created_at``; ``None`` when it just entered DONE, FAILED or PAUSED (nothing resumes there).
    fields: dict[str, Any] | None
    #: The snapshot of a run that just paused.
    snapshot: AgentSnapshot | None = None
    #: How the run ended, once it entered DONE.
    exit_reason: str | None = None


class RunObserver(Protocol):
    """Watches a run (durable snapshot stores do): told at every transition and every finished tool call.

    The drivers tell it, after each step of the run and before the I/O that follows.
    """

    def observe(self, delta: RunDelta) -> None:
        """Take in what changed; the run's next I/O starts when this returns."""


def snapshot_fields(run: AgentRun, pause: PauseReason | None = None, stage: int | None = None) -> dict[str, Any]:
    """The snapshot of ``run`` where it stands (paused for ``pause``), but ``messages``, ``trace`` and ``created_at``."""
    return {
        "run_id": run.run_id,
        "phase": run.phase,
        "stage": run.stage if stage is None else stage,
        "step": run.step,
        "state": serialize_value({k: v for k, v in run.data.items() if k != "messages"}),
        "pending_tool_calls": [c.to_dict() for c in run.calls],
        "completed_tool_results": {
            c.key: c.outcome.to_dict() for c in run.pending if c.status is CALL_DONE and c.outcome
        },
        "started_tool_calls": started_calls(run) if pause is None or isinstance(pause, Cancelled) else [],
        "tool_call_attempts": attempts_of(run) if run.retries else {},
        "retrying_tool_calls": retrying_of(run) if run.retries else [],
        "input_answers": dict(run.answers),
        "exit_reason": run.exit_reason,
        "break_point": None if pause is None else pause.to_dict(),
        "decisions": list(run.decisions),
        "agent_fingerprint": run.fingerprint,
        "trace_context": run.trace_context,
    }


def snapshot_of(run: AgentRun, pause: PauseReason | None = None, stage: int | None = None) -> AgentSnapshot:
    """``run`` as data, to be resumed where it stands (or at ``stage`` of its phase), paused for ``pause``."""
    return AgentSnapshot.from_dict(
        {
            **snapshot_fields(run, pause, stage),
            "messages": [m.to_dict() for m in run.data.get("messages") or []],
            "trace": [r.to_dict() for r in run.trace],
            "created_at": now_iso(),
        }
    )


def result_of(run: AgentRun) -> AgentResult:
    """The documented result of a finished run: State data, ``last_message``, plus ``exit_reason`` and ``trace``."""
    output = output_value(run) if run.config.output else _NO_OUTPUT
    return run_result(run.data, run.exit_reason, run.trace, run.state.schema, output)


def result_record(run: AgentRun) -> dict[str, Any]:
    """A finished run as data (a workflow's output, a store's record of it): its snapshot fields, in DONE or FAILED.

    Its ``stage`` is how far the phase its last edge left had got: all of that phase's work after an
    edge taken once the work was done, none after an interrupt (a failure, a limit on entering).
    """
    last = run.trace[-1]
    interrupted = any(t.interrupt and (t.trigger, t.source) == (last.trigger, last.source) for t in TRANSITIONS)
    return {
        **snapshot_fields(run),
        "phase": run.phase.value,
        "stage": 0 if interrupted else len(PHASE_WORK.get(last.source, ())),
        "exit_reason": ending_reason(run),
        "messages": [m.to_dict() for m in run.state.data.get("messages") or []],
        "trace": [r.to_dict() for r in run.trace],
        "created_at": now_iso(),
    }


def ending_reason(run: AgentRun) -> str | None:
    """What a finished run's record says of its end: its exit reason, or a failed run's error (its first 500 characters)."""
    if run.phase is FAILED and run.error is not None:
        return error_text(run.error)[:500]
    return run.exit_reason


def result_from_record(
    record: dict[str, Any], output: OutputType | None = None, state_keys: Collection[str] = ()
) -> AgentResult:
    """``Agent.run``'s result for a finished run's record.

    ``output``: the agent's output type, if it has one; ``state_keys``: the names its State declares.
    """
    data = {**deserialize_value(record["state"]), "messages": [ChatMessage.from_dict(m) for m in record["messages"]]}
    trace = [TransitionRecord.from_dict(r) for r in record["trace"]]
    if output is None:
        return run_result(data, record["exit_reason"], trace, state_keys)
    # A run that ended on an answer ended on the exit condition its exit reason names.
    answer = answer_of(data["messages"], record["exit_reason"])
    value, problems = (None, [""]) if answer is None else output.check(answer)
    return run_result(data, record["exit_reason"], trace, state_keys, None if problems else value)


def final_snapshot(record: dict[str, Any], segment: int | None = None) -> AgentSnapshot:
    """A finished run's record as its last snapshot, in DONE or FAILED, its trace ending with that edge.

    ``record`` is ``result_record``'s; ``segment`` numbers the snapshot (its ``seq``). A fork of it
    starts where the run stood before its last edge (``AgentSnapshot.reopened``).
    """
    return AgentSnapshot.from_dict({**record, "seq": segment})


def finished_record(run: AgentRun) -> AgentSnapshot | None:
    """The record a store keeps of a run that ended in DONE or FAILED (``final_snapshot``), else ``None``.

    ``None`` too for a run whose State has no JSON form: the store keeps how it ended without it.
    """
    if run.phase not in TERMINAL_PHASES:
        return None
    try:
        return final_snapshot(result_record(run))
    except SerializationError:
        return None


def run_result(
    data: Mapping[str, Any],
    exit_reason: str | None,
    trace: list[TransitionRecord],
    state_keys: Collection[str],
    output: Any = _NO_OUTPUT,
) -> AgentResult:
    """What ``Agent.run`` returns for a run with this State data, exit reason, trace (and ``output``, if it has one).

    ``state_keys`` are the names the run's State declares: the result's values under them are the State's.
    """
    outputs = () if output is _NO_OUTPUT else (output,)
    return AgentResult(data, exit_reason, trace, *outputs, state_keys=state_keys)
