"""Invariants: named checks over one explored path (a ``RecordedRun``).

Each built-in invariant is a property every path of every agent must have; ``check_agent`` checks
all of them unless told otherwise. User invariants are plain predicates over the recorded run (its
model inputs, tool executions, hook firings, decisions, transitions and State), wrapped with
``invariant``: a predicate returns ``None`` or a true value (holds), a false value or a message
(violated).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from agentfsm.checking.record import RecordedRun, ToolExecution
from agentfsm.checking.scenario import MAX_SEGMENTS
from agentfsm.errors import ConfigurationTypeError
from agentfsm.events import CallChanged, DecisionTaken, GuardrailChecked, HookRan, PhaseChanged, value_digest
from agentfsm.machine import (
    CALL_TRANSITIONS,
    HOOK_POINTS,
    PHASE_WORK,
    SKIP_WORK,
    TRANSITIONS,
    Phase,
    Work,
)
from agentfsm.messages import ChatMessage, ChatRole
from agentfsm.slices.retries import OUTSTANDING_WHEN

#: A check's verdict: ``None`` or a true value (holds), a false value or a message (a ``str``: violated).
Verdict = bool | str | None


@dataclass(frozen=True, slots=True)
class Invariant:
    """A named check over a recorded run: ``check(run)`` returns ``None`` or a true value when it holds."""

    name: str
    description: str
    check: Callable[[RecordedRun], Verdict]

    def violation(self, run: RecordedRun) -> str | None:
        """What is wrong with ``run``, or ``None`` when the invariant holds.

        A ``str`` verdict is a violation (the message); any other is read as a truth value, as
        ``assert`` does (``None``: holds). A check that returns an ``Invariant`` or a function was
        written wrong (a decorator applied twice, a missing call): ``ConfigurationTypeError``.
        """
        verdict: object = self.check(run)
        if isinstance(verdict, str):
            return verdict or f"{self.name} does not hold"
        if isinstance(verdict, Invariant) or callable(verdict):
            raise ConfigurationTypeError(
                f"Invariant {self.name!r} returned {verdict!r}, not a verdict: return True, None, False or a "
                "message (is @invariant applied twice, or a function returned instead of called?)."
            )
        return None if verdict is None or verdict else f"{self.name} does not hold"


@overload
def invariant(name: Callable[[RecordedRun], Verdict], /) -> Invariant: ...


@overload
def invariant(
    name: str | None = None, description: str = ""
) -> Callable[[Callable[[RecordedRun], Verdict]], Invariant]: ...


def invariant(
    name: str | Callable[[RecordedRun], Verdict] | None = None, description: str = ""
) -> Invariant | Callable[[Callable[[RecordedRun], Verdict]], Invariant]:
    """Make a predicate over a ``RecordedRun`` an ``Invariant``, named ``name`` (default: the function's name).

    Used bare (``@invariant``) or called (``@invariant("answers politely")``), like ``@tool``:

    ```python
    @invariant("answers politely")
    def polite(run):
        return run.ending != "DONE" or "please" in run.state["messages"][-1].text
    ```
    """
    if callable(name):
        return as_invariant(name)
    if name is not None and not isinstance(name, str):
        raise ConfigurationTypeError(f"@invariant takes a name (a string) or a function, got {name!r}.")

    def wrap(check: Callable[[RecordedRun], Verdict]) -> Invariant:
        return Invariant(name or _name_of(check), description or (check.__doc__ or "").strip(), check)

    return wrap


def as_invariant(given: Invariant | Callable[[RecordedRun], Verdict]) -> Invariant:
    """``given``, or a plain predicate made an ``Invariant`` named after the function."""
    if isinstance(given, Invariant):
        return given
    if not callable(given):
        raise ConfigurationTypeError(f"An invariant is an Invariant or a function of a RecordedRun, got {given!r}.")
    return Invariant(_name_of(given), (given.__doc__ or "").strip(), given)


def _name_of(check: Callable[..., object]) -> str:
    return str(getattr(check, "__name__", "user invariant"))


# -- the built-in invariants ----------------------------------------------------------------------------


def _ends(run: RecordedRun) -> Verdict:
    if run.ending == "cut" and len(run.segments) >= MAX_SEGMENTS:
        return f"the run was still going after {len(run.segments)} segments ({_segments(run)}): the checker cut it"
    if run.ending == "cut":
        called = max((m.step for m in run.model_inputs), default=0)
        back = [r.trigger for r in run.trace if r.source is Phase.EXIT_CHECK and r.dest is Phase.LLM_CALL]
        return (
            f"the run did not end: from step {called - 2} on the model only answered with a closing text, "
            f"and the run asked it again each time ({', '.join(back[-2:]) or 'no exit edge'}); "
            f"the checker cut the path at model call {called} (max_steps plus 2 closing texts)"
        )
    steps = max((m.step for m in run.model_inputs), default=0)
    if steps > run.max_agent_steps:
        return f"the run called the model {steps} times; its max_agent_steps is {run.max_agent_steps}"
    return True


def _hooks_once(run: RecordedRun) -> Verdict:
    seen: dict[tuple[str, int, int], list[int]] = {}
    for i, f in enumerate(run.hook_firings):
        earlier = seen.setdefault((f.point, f.step, f.index), [])
        if any(run.hook_firings[j].asked for j in earlier):  # it asked a person: it fires again with the answer
            earlier = seen[(f.point, f.step, f.index)] = []
        for j in earlier:
            first = run.hook_firings[j]
            crashed_between = any(s.ended == "crashed" for s in run.segments[first.segment : f.segment])
            if first.committed or not crashed_between:
                return (
                    f"hook {f.hook} at {f.point} fired twice at step {f.step} "
                    f"(segments {first.segment} and {f.segment}: {_segments(run)})"
                )
        earlier.append(i)
    if run.ending == "cut":
        return True
    ended = {"before_run": True, "after_run": run.ending == "DONE", "on_error": run.ending == "FAILED"}
    for point, fires in ended.items():
        hooks = run.hooked.get(point, 0)
        fired = len({(f.step, f.index) for f in run.firings(point)})
        if fired != (hooks if fires else 0):
            return (
                f"{fired} of the {hooks} {point} hook(s) fired on a run that ended {run.ending} "
                f"(expected {hooks if fires else 0}; {_segments(run)})"
            )
    return True


def _segments(run: RecordedRun) -> str:
    return " / ".join(f"{s.started} -> {s.ended}" for s in run.segments)


def _approved(run: RecordedRun) -> Verdict:
    for e in run.tool_executions:
        if not e.covered:
            continue
        ok = [
            d
            for d in run.decisions
            if d.step == e.step and d.call_key == e.call_key and d.verb in ("approve", "modify")
        ]
        if not any(d.arguments == e.arguments for d in ok):
            given = [f"{d.verb} {d.arguments}" for d in run.decisions if d.call_key == e.call_key and d.step == e.step]
            return (
                f"{e.tool_name} (call {e.call_key}, step {e.step}) ran with {e.arguments} without an approving "
                f"decision bound to those arguments; decisions taken for it: {given or 'none'}"
            )
    return True


def _no_double_effect(run: RecordedRun) -> Verdict:
    # An execution the world made raise had no effect (the tool said it failed before doing anything):
    # running the call again, a retry of its tool's ``Retry``, repeats nothing.
    counts = Counter((e.step, e.call_key) for e in run.tool_executions if not e.idempotent and e.outcome != "raises")
    for (step, key), count in counts.items():
        reruns = sum(1 for d in run.decisions if d.step == step and d.call_key == key and d.verb == "rerun")
        if count > 1 + reruns:
            name = next(e.tool_name for e in run.tool_executions if e.call_key == key and e.step == step)
            if any(e.outcome == "asks" for e in run.tool_executions if e.call_key == key and e.step == step):
                return (
                    f"{name} is not idempotent and asks a person (ask_user): it ran {count} times for call {key} "
                    f"(step {step}), once more with each answer, so whatever it does before its ask is done again; "
                    "ask before any effect and mark the tool idempotent=True, or confirm the call before it runs "
                    f"(a confirmation strategy) ({_segments(run)})"
                )
            return (
                f"{name} is not idempotent and ran {count} times for call {key} (step {step}) with "
                f"{reruns} decision(s) to run it again ({_segments(run)})"
            )
    return True


def _answers_checked(run: RecordedRun) -> Verdict:
    for d in run.decisions:
        if d.verb == "invalid answer taken":
            return (
                f"a resume took {d.arguments} as the answer to {d.call_key} (step {d.step}), which breaks its "
                "question's schema: it must be refused before anything runs"
            )
    given = {(d.step, d.call_key): (d.arguments or {}).get("answer") for d in run.decisions if d.verb == "answer"}
    for read in run.answers_read:
        question = f"{read.call_key}.{read.index}"
        if (read.step, question) not in given:
            return f"ask {read.index} of call {read.call_key} (step {read.step}) returned {read.value!r}, an answer never given"
        if given[(read.step, question)] != read.value:
            return (
                f"ask {read.index} of call {read.call_key} (step {read.step}) returned {read.value!r}; the answer "
                f"to {question} was {given[(read.step, question)]!r}: an answer reached the wrong question"
            )
    return True


def _resume_equivalent(run: RecordedRun) -> Verdict:
    if run.baseline is None or run.ending == "cut":
        return True
    base, got = run.baseline, run.comparable or {}
    settled = {d.call_key for d in run.decisions if d.verb == "settle"}
    if settled:
        # A settled call's result is the decision's feedback, not the tool's, and what follows may
        # rightly differ (the model, a loop detection, read it): compare the conversation up to it.
        base, got = _until_settled(base, settled), _until_settled(got, settled)
    if base == got:
        return True
    return f"{run.interruption}: the resumed run differs from the uninterrupted one:\n{_difference(base, got)}"


def _until_settled(comparable: dict[str, Any], settled: set[str]) -> dict[str, Any]:
    """The conversation of ``comparable`` up to the last result of a ``settled`` call, that result masked."""
    messages = list(comparable.get("messages") or [])
    ends = [i for i, m in enumerate(messages) if isinstance(m, ChatMessage) and _origin(m) in settled]
    kept = messages[: ends[-1] + 1] if ends else messages
    return {"messages": ["<result given by a settle decision>" if i in ends else m for i, m in enumerate(kept)]}


def _difference(base: dict[str, Any], got: dict[str, Any]) -> str:
    lines = []
    for key in sorted(set(base) | set(got), key=str):
        if base.get(key) != got.get(key):
            lines.append(f"  {key}: uninterrupted {_short(base.get(key))}, resumed {_short(got.get(key))}")
    return "\n".join(lines) or "  (the runs ended differently)"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:297] + "..."


def transcript_problem(messages: Sequence[ChatMessage]) -> str | None:
    """What is wrong with a conversation handed to the model: a tool call not answered exactly once, in order."""
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.role is ChatRole.TOOL:
            return f"message {i - 1} answers tool call {_origin(message)} that no assistant message before it made"
        if message.role is not ChatRole.ASSISTANT or not message.tool_calls:
            continue
        for call in message.tool_calls:
            if i >= len(messages) or messages[i].role is not ChatRole.TOOL:
                return f"tool call {call.id} ({call.tool_name}) of message {messages.index(message)} is not answered"
            if _origin(messages[i]) != call.id:
                return f"message {i} answers {_origin(messages[i])} where tool call {call.id} was to be answered"
            i += 1
    return None


def _origin(message: ChatMessage) -> str | None:
    result = message.tool_call_result
    return None if result is None else result.origin.id


def _transcript(run: RecordedRun) -> Verdict:
    for model_input in run.model_inputs:
        problem = transcript_problem(model_input.messages)
        if problem is not None:
            return f"the conversation handed to the model at step {model_input.step}: {problem}"
    return True


#: The declared edges by (source, trigger, dest), read from the tables themselves (not from the
#: runtime's compiled lookups, which a faulty runtime may have changed).
_EDGES = {(t.source.value, t.trigger, t.dest.value): t for t in TRANSITIONS}
#: The call table's edges: (source, trigger) -> dest.
_CALL_EDGES = {(t.source.value, t.trigger): t.dest.value for t in CALL_TRANSITIONS}


def _declared_edges(run: RecordedRun) -> Verdict:
    for number, segment in enumerate(run.segments):
        phase: str | None = None
        calls: dict[str, str] = {}
        for event in segment.events:
            if isinstance(event, PhaseChanged):
                if phase is not None and event.source != phase:
                    return f"segment {number}: the run left {event.source} while it was in {phase} (step {event.step})"
                if (event.source, event.trigger, event.dest) not in _EDGES:
                    return f"the run took an undeclared edge {event.source} --{event.trigger}--> {event.dest}"
                phase = event.dest
            elif isinstance(event, CallChanged):
                # A resumed run's calls start where the snapshot has them; then each edge starts
                # where the call's last one ended.
                source = calls.get(event.call, event.source)
                declared = _CALL_EDGES.get((source, event.trigger))
                if event.source != source or declared != event.dest:
                    return (
                        f"call {event.call} ({event.tool}, step {event.step}) went {source} --{event.trigger}--> "
                        f"{event.dest}, which is not an edge of CALL_TRANSITIONS"
                    )
                calls[event.call] = event.dest
    return True


#: The hook points in each phase's work that the run must pass again each time it goes through the
#: phase (``before_run``, ``after_run`` and ``on_error`` are run-level: ``hooks_once`` checks them).
_STEP_HOOK_POINTS = {
    phase: tuple(w for w in work if w in HOOK_POINTS and w not in (Work.BEFORE_RUN, Work.AFTER_RUN, Work.ON_ERROR))
    for phase, work in PHASE_WORK.items()
}


def _hooks_fire(run: RecordedRun) -> Verdict:
    for number, segment in enumerate(run.segments):
        entered: PhaseChanged | None = None
        fired: Counter[str] = Counter()
        for event in segment.events:
            if isinstance(event, HookRan):
                fired[event.point] += 1
            if not isinstance(event, PhaseChanged):
                continue
            if entered is not None:
                missed = _missed_hooks(run, entered, event, fired)
                if missed:
                    return (
                        f"segment {number}: the run went through {entered.dest} at step {entered.step} "
                        f"({entered.source} --{entered.trigger}--> {entered.dest} --{event.trigger}--> {event.dest}) "
                        f"without firing its {', '.join(missed)} hook(s) ({_segments(run)})"
                    )
            entered, fired = event, Counter()
    return True


def _missed_hooks(run: RecordedRun, entered: PhaseChanged, left: PhaseChanged, fired: Counter[str]) -> list[str]:
    """The hook points of a whole pass through a phase (not resumed into, not interrupted) that did not fire.

    A point that a fact can skip (``SKIP_WORK``) is expected only when the edge the run left by
    says the fact had the value that does not skip it.
    """
    edge = _EDGES.get((left.source, left.trigger, left.dest))
    if entered.trigger == "resume" or edge is None or edge.interrupt:
        return []
    facts = dict(edge.when)
    if "results_outstanding" not in facts and all(facts.get(name) is False for name in OUTSTANDING_WHEN):
        facts["results_outstanding"] = False  # it is one of those, which the edge says are false
    missed = []
    for point in _STEP_HOOK_POINTS.get(Phase(entered.dest), ()):
        hooks = run.hooked.get(point.value, 0)
        if not hooks:
            continue
        if any(facts.get(fact, value) is value for fact, value in SKIP_WORK.get(point, ())):
            continue  # skipped, or the edge does not say whether it was
        if fired[point.value] < hooks:
            missed.append(point.value)
    return missed


def _answer(messages: list[ChatMessage], exit_reason: str) -> Any:
    """The answer a run that ended on ``exit_reason`` gives, as its output guardrails are shown it."""
    if exit_reason == "text":
        return messages[-1].text or ""
    name = exit_reason.removeprefix("tool:")
    for message in reversed(messages):
        if name == "final_answer":
            found = [c for c in message.tool_calls if c.tool_name == name]
            if found:
                return dict(found[-1].arguments)
        elif (
            message.role is ChatRole.TOOL
            and message.tool_call_result is not None
            and message.tool_call_result.origin.tool_name == name
        ):
            return message.tool_call_result.result
    return None


def _guarded(run: RecordedRun) -> Verdict:
    points = set(run.guarded)
    if not points:
        return True

    def passed(point: str, segment: int) -> set[tuple[str, str]]:
        """What the point's guardrails let go on in the segments up to ``segment``: (subject, digest)."""
        return {
            (e.subject, e.digest)
            for s in run.segments[: segment + 1]
            for e in s.events
            if isinstance(e, GuardrailChecked) and e.point == point and e.tripped is None
        }

    if "input" in points:
        for model_input in run.model_inputs:
            if ("input", value_digest(model_input.messages)) not in passed("input", model_input.segment):
                return (
                    f"the model was called at step {model_input.step} (segment {model_input.segment}) with a "
                    f"conversation no input guardrail passed ({_segments(run)})"
                )
    if "tool_call" in points:
        for execution in run.tool_executions:
            if execution.call_key not in {subject for subject, _ in passed("tool_call", execution.segment)}:
                return (
                    f"{execution.tool_name} ran for call {execution.call_key} at step {execution.step} without its "
                    f"tool-call guardrails having passed it ({_segments(run)})"
                )
            if not _guarded_since_changed(run, execution):
                return (
                    f"{execution.tool_name} ran for call {execution.call_key} at step {execution.step} with the "
                    f"arguments a decision gave it, which no tool-call guardrail passed ({_segments(run)})"
                )
    exit_reason = (run.result or {}).get("exit_reason") or ""
    if "output" in points and run.ending == "DONE" and (exit_reason == "text" or exit_reason.startswith("tool:")):
        answer = _answer(run.state.get("messages") or [], exit_reason)
        if ("output", value_digest(answer)) not in passed("output", len(run.segments)):
            return f"the run ended on an answer ({exit_reason}) no output guardrail passed ({_segments(run)})"
    return True


def _guarded_since_changed(run: RecordedRun, execution: ToolExecution) -> bool:
    """Whether the tool-call guardrails passed the call after the last decision that gave it new arguments (if one did)."""
    changed = [
        d.segment
        for d in run.decisions
        if (d.step, d.call_key, d.verb) == (execution.step, execution.call_key, "modify")
        and d.segment <= execution.segment
    ]
    if not changed:
        return True
    events = [e for s in run.segments[changed[-1] : execution.segment + 1] for e in s.events]
    own = len(run.segments[changed[-1]].events)  # the decision is one of its segment's (a later one may settle a doubt)
    decided = max(
        (
            i
            for i, e in enumerate(events[:own])
            if isinstance(e, DecisionTaken) and (e.step, e.call) == _at(execution) and e.decision["final_tool_params"]
        ),
        default=-1,
    )
    return any(
        isinstance(e, GuardrailChecked)
        and e.point == "tool_call"
        and e.tripped is None
        and (e.step, e.subject) == _at(execution)
        for e in events[decided + 1 :]
    )


def _at(execution: ToolExecution) -> tuple[int, str]:
    return execution.step, execution.call_key


ENDS_WITHIN_BOUND = Invariant(
    "ends_within_bound",
    "Every path ends in DONE, PAUSED or FAILED, after at most max_agent_steps model calls: after the "
    "model's closing replies the run stops.",
    _ends,
)
HOOKS_ONCE = Invariant(
    "hooks_once",
    "before_run fires once per run and after_run (on_error) once on every DONE (FAILED) ending; no hook "
    "fires twice for one point and step, across pauses and resumes, unless a crash lost the record of it.",
    _hooks_once,
)
CONFIRMED_CALLS_APPROVED = Invariant(
    "confirmed_calls_approved",
    "A call a confirmation strategy covers runs only with an approving decision bound to its exact arguments.",
    _approved,
)
NO_DOUBLE_EFFECT = Invariant(
    "no_double_effect",
    "A tool that is not idempotent never runs twice for one call, across crash and resume and retries "
    "(an attempt that raised did nothing), unless a decision for the call in doubt said to run it again.",
    _no_double_effect,
)
RESUME_EQUIVALENT = Invariant(
    "resume_equivalent",
    "A run paused at a breakpoint or killed at any write to its store, then resumed from the store, "
    "gives the result of the same run uninterrupted.",
    _resume_equivalent,
)
VALID_TRANSCRIPT = Invariant(
    "valid_transcript",
    "Every conversation handed to the model answers each tool call exactly once, in order, right after the call.",
    _transcript,
)
DECLARED_EDGES = Invariant(
    "declared_edges",
    "The run moves only along declared edges, each from where the last one ended: the phase table "
    "(TRANSITIONS) and, for each call, the call table (CALL_TRANSITIONS), as the run's events report them.",
    _declared_edges,
)
HOOKS_FIRE = Invariant(
    "hooks_fire",
    "Each time the run goes through a phase's work (PHASE_WORK), the hooks of its hook points fire: "
    "before_llm and after_llm (when the model was called) in LLM_CALL, before_tool in TOOL_PENDING, "
    "after_tool in TOOL_RUN, on_exit in EXIT_CHECK when an exit condition is met, on every exit edge.",
    _hooks_fire,
)

ANSWERS_CHECKED = Invariant(
    "answers_checked",
    "A person's answer to a question a tool or a hook asked is taken only when it fits the question's "
    "schema, and each ask of a call returns the answer to its own question.",
    _answers_checked,
)

GUARDED = Invariant(
    "guarded",
    "No model call reads a conversation, no call runs, and no answer leaves the run without the agent's "
    "guardrails of that point having passed it on that path, a call a decision changed once more after "
    "the decision: across pauses, crashes and resumes.",
    _guarded,
)

#: Every built-in invariant, in the order they are checked.
BUILTIN_INVARIANTS: tuple[Invariant, ...] = (
    ENDS_WITHIN_BOUND,
    DECLARED_EDGES,
    VALID_TRANSCRIPT,
    HOOKS_ONCE,
    HOOKS_FIRE,
    CONFIRMED_CALLS_APPROVED,
    NO_DOUBLE_EFFECT,
    RESUME_EQUIVALENT,
    GUARDED,
    ANSWERS_CHECKED,
)
