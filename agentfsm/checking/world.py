"""The world around an agent under check: what it can answer at each question a run asks.

A run asks the world questions: the model's reply at each step, each tool call's outcome, each
human decision, what a tool's reconcile function answers for a call in doubt, which of the user's
hook alternatives acts, whether the process dies before a write to the store. A ``World`` answers from a path (the answers chosen so far) and, past it, with
each question's first option, recording the questions and options so the explorer can branch.
Answers are keyed by what is asked (the model at step 2, call ``call_1_0``'s outcome...), so a
question asked again after a crash gets the same answer: the world is deterministic, and a
resumed run can be compared with the uninterrupted one.

The agent's parts are wrapped (``build_agent``): a generator, tools, hooks, confirmation
strategies and a durable store that ask the world and record what happened in a ``RecordedRun``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentfsm._core.records import RunDelta, TransitionRecord, snapshot_fields
from agentfsm._core.runtime import AgentRun
from agentfsm.agent import Agent
from agentfsm.checking.record import (
    AnswerRead,
    Decision,
    HookFiring,
    ModelInput,
    RecordedRun,
    Segment,
    ToolExecution,
)
from agentfsm.decisions import ToolExecutionDecision
from agentfsm.errors import HITLBreakpointException, ModelClientError, ToolTimeoutError
from agentfsm.events import Event, value_digest
from agentfsm.guardrails import Guardrail, GuardrailResult
from agentfsm.hooks import accepts, hook_name
from agentfsm.interrupts import ASK_USER, Asker, InputAnswer
from agentfsm.machine import CallStatus
from agentfsm.messages import RAW_ARGUMENTS_KEY, ChatMessage, StreamingCallback, ToolCall, ToolCallResult
from agentfsm.pauses import InputQuestion
from agentfsm.reconcile import Happened, InDoubtCall, NotHappened, Reconciled, Unknown
from agentfsm.schemas import CompiledSchema
from agentfsm.slices.interrupts import hook_asks
from agentfsm.state import State
from agentfsm.stores.sqlite import SQLiteSnapshotStore
from agentfsm.tools.tool import IDEMPOTENCY_KEY, REPORT_PROGRESS, Tool
from agentfsm.workers import CallThread, result_within

#: The kinds of model reply the world can give (``check_agent(replies=...)``).
REPLY_KINDS: tuple[str, ...] = ("text", "tool", "invalid", "unknown", "parallel", "error")
#: What a tool execution can do (``check_agent(tool_outcomes=...)``).
TOOL_OUTCOMES: tuple[str, ...] = ("returns", "raises")
#: The decisions the world takes for a call a confirmation strategy covers.
DECISIONS: tuple[str, ...] = ("approve", "reject", "modify", "defer")
#: The decisions for a deferred call when the run is resumed.
RESUME_DECISIONS: tuple[str, ...] = ("approve", "reject", "modify")
#: The decisions for a call in doubt after a crash: run it again, or give its result.
IN_DOUBT_DECISIONS: tuple[str, ...] = ("rerun", "settle")
#: What a guardrail answers a value it is shown (``GuardrailResult``'s kinds).
GUARDRAIL_ANSWERS: tuple[str, ...] = ("pass", "rewrite", "tripwire")
#: The text of the world's rewrites (a result's, a text answer's) and its tripwires' reason.
REWRITTEN_TEXT = "rewritten by the checker"
TRIPPED_REASON = "tripped by the checker"
#: What a tool's reconcile function answers for a call in doubt: what the world saw (the effect
#: happened, with the result the tool returned, or it did not), that it cannot tell, or it raises.
RECONCILE_ANSWERS: tuple[str, ...] = ("truthful", "unknown", "raises")
#: The text the world's model ends a conversation with.
CLOSING_TEXT = "final answer"
#: The tool a model may call that no agent has.
UNKNOWN_TOOL = "no_such_tool"
#: Seconds a tool call may take in a checked run, by default: a tool that blocks holds no path longer.
DEFAULT_TOOL_TIMEOUT = 10.0

Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class CallQuestion:
    """A kind of question the world is asked about one call: the one place that names it.

    Its answers are keyed ``(prefix, step, call key)`` in a world and ``"<step>/<call key>"`` in
    the ``Scenario`` field ``field``; ``options[0]`` is the answer given when a path names none.
    """

    prefix: str
    field: str
    options: tuple[str, ...]

    @property
    def default(self) -> str:
        """The answer a path that names none gets."""
        return self.options[0]

    def key(self, step: int, call_key: str) -> Key:
        """The world's key of this question for one call."""
        return (self.prefix, step, call_key)


#: What a tool execution does.
TOOL_OUTCOME = CallQuestion("tool", "tool_outcomes", TOOL_OUTCOMES)
#: The decision for a call a confirmation strategy covers.
DECISION = CallQuestion("decide", "decisions", DECISIONS)
#: The decision for a deferred call when the run is resumed.
RESUME_DECISION = CallQuestion("resume", "resume_decisions", RESUME_DECISIONS)
#: The decision for a call in doubt after a crash.
IN_DOUBT = CallQuestion("in_doubt", "in_doubt", IN_DOUBT_DECISIONS)
#: A guardrail's answer for one value: keyed by the guardrail and the value it is shown (``guard_key``).
GUARDRAIL = CallQuestion("guard", "guardrails", GUARDRAIL_ANSWERS)
#: A tool's reconcile function's answer for a call in doubt after a crash.
RECONCILE = CallQuestion("reconcile", "reconciles", RECONCILE_ANSWERS)
#: The answer to a question a tool or a hook asked (keyed by the question's id): one that fits its
#: schema, or one that does not (the resume must refuse it; then the fitting one is given).
INPUT_ANSWER = CallQuestion("answer", "input_answers", ("valid", "invalid"))
#: Every kind of question about a call: ``Scenario`` and its code read them from here.
CALL_QUESTIONS: tuple[CallQuestion, ...] = (
    TOOL_OUTCOME,
    DECISION,
    RESUME_DECISION,
    IN_DOUBT,
    GUARDRAIL,
    RECONCILE,
    INPUT_ANSWER,
)
#: Values tried, in order, for an answer that breaks a question's schema.
_UNFITTING: tuple[Any, ...] = (None, "not an answer", -1, {"unexpected": [1]}, [None])


class Killed(BaseException):
    """The simulated ``kill -9``: the run's process dies before a write to its store.

    A ``BaseException``, so that nothing of the run's own (a tool's ``except Exception``) stops it.
    """


class PathCut(BaseException):
    """The path went past the exploration's bound: the model was asked again after its closing replies."""


class ToolFailure(RuntimeError):
    """The failure the world makes a tool call raise (a tool outcome ``raises``)."""


class ReconcileFailure(RuntimeError):
    """The failure the world makes a reconcile function raise (a reconcile answer ``raises``)."""


@dataclass(frozen=True, slots=True)
class Asked:
    """A question the world was asked: its key, its options (in order), and the state it was asked in."""

    key: Key
    options: tuple[Any, ...]
    #: A hash of the run's machine state and State data, and of what happened so far, when it was asked.
    fingerprint: str
    #: The path fixed the answer (it was not chosen when asked).
    fixed: bool


# -- example arguments from a JSON schema -------------------------------------------------------------


def _example(schema: Mapping[str, Any], defs: Mapping[str, Any], variant: int) -> Any:
    """A value that conforms to ``schema``; ``variant`` 1 gives another one where the schema allows it."""
    if "$ref" in schema:
        return _example(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {}), defs, variant)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        values = list(schema["enum"])
        return values[min(variant, len(values) - 1)]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _example(schema[key][0], defs, variant)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind == "object" or "properties" in schema:
        return _object_example(schema, defs, variant)
    if kind == "array":
        return [_example(schema.get("items", {}), defs, variant)]
    minimum = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    examples: dict[str | None, Any] = {
        "string": ["a", "b"][variant],
        "integer": int(minimum) + 1 + variant,
        "number": float(minimum) + 1.5 + variant,
        "boolean": [True, False][variant],
        "null": None,
        None: ["a", "b"][variant],
    }
    return examples.get(kind)


def _object_example(schema: Mapping[str, Any], defs: Mapping[str, Any], variant: int) -> dict[str, Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    return {name: _example(p, defs, variant) for name, p in properties.items() if name in required}


def valid_arguments(tool: Tool, variant: int = 0) -> dict[str, Any]:
    """Arguments that conform to ``tool``'s schema (``variant`` 1: other ones, where the schema allows)."""
    return _object_example(tool.parameters, tool.parameters.get("$defs", {}), variant)


def invalid_arguments(tool: Tool) -> dict[str, Any] | None:
    """Arguments that break ``tool``'s schema (a required argument of the wrong type), or ``None`` when none do."""
    properties: Mapping[str, Any] = tool.parameters.get("properties", {})
    for name in tool.parameters.get("required", []):
        kind = properties.get(name, {}).get("type")
        wrong = "not a number" if kind in ("integer", "number") else {"unexpected": [1, None]}
        arguments = {**valid_arguments(tool), name: wrong}
        try:
            tool.validate_arguments(arguments)
        except Exception:
            return arguments
    return None


def fitting_answer(agent: Agent) -> str | None:
    """For an agent with an ``output_type``, an answer that fits it (JSON text); ``None`` without one, or if none is found."""
    spec = agent.output_spec
    if spec is None:
        return None
    text = orjson.dumps(_example(spec.schema, spec.schema.get("$defs", {}), 0)).decode()
    checked = spec.check(text)
    return text if not checked[1] else None


def model_menu(tools: Sequence[Tool], kinds: Sequence[str], step: int, answer: str | None = None) -> tuple[Any, ...]:
    """The replies the world's model can give at ``step``: ``ChatMessage``s, or a ``ModelClientError`` to raise.

    ``answer``: a text that fits the agent's ``output_type``, offered beside the closing text.
    """
    menu: list[Any] = []

    def ask(*calls: tuple[str, dict[str, Any]]) -> ChatMessage:
        return ChatMessage.from_assistant(
            tool_calls=[ToolCall(name, arguments, id=f"call_{step}_{i}") for i, (name, arguments) in enumerate(calls)]
        )

    if "text" in kinds:
        menu.append(ChatMessage.from_assistant(CLOSING_TEXT))
        if answer is not None:
            menu.append(ChatMessage.from_assistant(answer))
    if "tool" in kinds:
        menu += [ask((t.name, valid_arguments(t))) for t in tools]
    if "invalid" in kinds:
        broken = next(((t.name, a) for t in tools if (a := invalid_arguments(t)) is not None), None)
        if broken is not None:
            menu.append(ask(broken))
        elif tools:
            menu.append(ask((tools[0].name, {RAW_ARGUMENTS_KEY: "{not json"})))
    if "unknown" in kinds and tools:
        menu.append(ask((UNKNOWN_TOOL, {})))
    if "parallel" in kinds and tools:
        second = tools[1] if len(tools) > 1 else tools[0]
        menu.append(ask((tools[0].name, valid_arguments(tools[0])), (second.name, valid_arguments(second, 1))))
    if "error" in kinds:
        menu.append(ModelClientError("the model call failed"))
    if not menu:
        menu.append(ChatMessage.from_assistant(CLOSING_TEXT))
    return tuple(menu)


# -- the world ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bounds:
    """How far the world goes: replies, outcomes and decisions it offers, and the depth of a path."""

    max_steps: int
    replies: tuple[str, ...]
    tool_outcomes: tuple[str, ...]
    decisions: bool
    hook_choices: Mapping[str, Sequence[Callable[..., Any]]]
    #: Model calls a path may make past ``max_steps`` (each answered with the closing text) before it is cut.
    grace: int = 2
    #: Seconds a tool call may take in a checked run (a tool's or the agent's shorter timeout stays).
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    #: What a guardrail may answer each value (``check_agent(guardrail_answers=...)``).
    guardrail_answers: tuple[str, ...] = GUARDRAIL_ANSWERS


@dataclass(frozen=True, slots=True)
class Remains:
    """What a process killed before one write of the first segment leaves: what the world saw, and what its store committed.

    A killed process runs nothing more, so this is all a crash variant needs of the run before its
    death: the uninterrupted run keeps one at each write (``World.keeps_remains``), and the crash
    variant starts from it where it would otherwise run the same first segment again.
    """

    run_id: str
    died_before: str
    #: The first segment's transitions up to the kill (``survived``).
    trace: list[TransitionRecord]
    #: How much of the uninterrupted run's record was there when the process died: events told,
    #: model inputs, tool executions, hook firings (and how many a commit had followed), decisions,
    #: answers read, questions asked; and what the tools' own functions had returned (``World.results``).
    events: int
    model_inputs: int
    tool_executions: int
    hook_firings: int
    committed_firings: int
    decisions: int
    answers_read: int
    asked: int
    results: dict[tuple[int, str], Any]
    #: The store's database as committed (``WorldStore.image``).
    store: bytes

    def record(self, whole: RecordedRun) -> RecordedRun:
        """The record of the killed first segment, cut from ``whole``, the uninterrupted run's."""
        firings = whole.hook_firings[: self.hook_firings]
        return RecordedRun(
            model_inputs=whole.model_inputs[: self.model_inputs],
            tool_executions=whole.tool_executions[: self.tool_executions],
            hook_firings=[dataclasses.replace(f, committed=i < self.committed_firings) for i, f in enumerate(firings)],
            decisions=whole.decisions[: self.decisions],
            answers_read=whole.answers_read[: self.answers_read],
            segments=[Segment("start", self.trace, "crashed", whole.segments[0].events[: self.events])],
            died_before=self.died_before,
            max_agent_steps=whole.max_agent_steps,
            hooked=whole.hooked,
            guarded=whole.guarded,
        )


def survived(trace: Sequence[TransitionRecord]) -> list[TransitionRecord]:
    """The transitions a killed or cut segment leaves: its trailing ``fail`` edges are the dying process's, or the cut's."""
    kept = list(trace)
    while kept and kept[-1].trigger == "fail":
        kept.pop()
    return kept


@dataclass(slots=True)
class World:
    """Answers one path's questions and records the run (see the module docstring)."""

    bounds: Bounds
    tools: Sequence[Tool]
    #: The answers fixed for this path, by question key.
    answers: dict[Key, Any]
    #: Where the first segment's process dies: the index of the write to the store it dies before.
    crash_at: int | None = None
    record: RecordedRun = field(default_factory=RecordedRun)
    #: The questions asked, in order, with the answer given.
    asked: list[tuple[Asked, Any]] = field(default_factory=list)
    run: AgentRun | None = None
    segment: int = 0
    writes: int = 0
    #: The first segment's writes: (commits so far, effects so far, steps) before each, for crash dedup.
    write_points: list[tuple[int, int, int]] = field(default_factory=list)
    commits: int = 0
    dead: bool = False
    fingerprints: bool = True
    #: The model's replies at each step (the same for every path: built once).
    menus: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    #: Picks the answer to a question the path does not fix (``None``: the first option).
    choose: Callable[[tuple[Any, ...]], Any] | None = None
    #: A text that fits the agent's ``output_type`` (``fitting_answer``), offered beside the closing text.
    fitting_answer: str | None = None
    #: What each execution of a tool's own function returned, by (step, call key): a truthful
    #: reconcile function finds the effect with that result.
    results: dict[tuple[int, str], Any] = field(default_factory=dict)
    #: The events of the segment under way, as its ``on_event`` handler gets them.
    events: list[Event] = field(default_factory=list)
    #: How many events the first segment's process had told when it was killed.
    events_at_death: int = 0
    #: Keep what a kill before each write of the first segment would leave (``remains``).
    keeps_remains: bool = False
    remains: list[Remains] = field(default_factory=list)

    # -- questions --------------------------------------------------------------------------------

    def answer(self, key: Key, options: tuple[Any, ...]) -> Any:
        """The answer to ``key``: the path's, else ``choose``'s (the first option by default); it is recorded."""
        fixed = key in self.answers
        if fixed:
            choice = self.answers[key]
        else:
            choice = options[0] if self.choose is None or len(options) == 1 else self.choose(options)
            self.answers[key] = choice
        fingerprint = self.fingerprint(key) if len(options) > 1 and not fixed else ""
        self.asked.append((Asked(key, options, fingerprint, fixed), choice))
        return choice

    def fingerprint(self, key: Key) -> str:
        """A hash of where the run stands (phase, work, State, pending calls) and of what happened so far."""
        if not self.fingerprints:
            return ""
        run = self.run
        assert run is not None
        fields = snapshot_fields(run)
        for name in ("run_id", "agent_fingerprint"):
            fields.pop(name, None)
        happened = (
            sorted({(e.step, e.call_key) for e in self.record.tool_executions}),
            len(self.record.tool_executions),
            [(f.point, f.step, f.index) for f in self.record.hook_firings],
            [(d.step, d.call_key, d.verb) for d in self.record.decisions],
        )
        body = {
            "key": repr(key[0]),
            "fields": fields,
            "messages": [m.to_dict() for m in run.state.data.get("messages") or []],
            "statuses": [(c.key, c.status.value) for c in run.pending],
            "happened": repr(happened),
        }
        return hashlib.sha1(orjson.dumps(body, default=repr, option=orjson.OPT_SORT_KEYS)).hexdigest()

    # -- what the wrapped parts report --------------------------------------------------------------

    def model_call(self, messages: list[ChatMessage]) -> ChatMessage:
        """The model's reply for the run's next step (``PathCut`` past the bound)."""
        run = self.run
        assert run is not None
        step = run.step + 1
        self.record.model_inputs.append(ModelInput(step, list(messages), self.segment))
        if step > self.bounds.max_steps + self.bounds.grace:
            raise PathCut(f"the run called the model {step} times: it did not end within the bound")
        if step > self.bounds.max_steps:
            options: tuple[Any, ...] = (ChatMessage.from_assistant(self.fitting_answer or CLOSING_TEXT),)
        else:
            options = self.menus.get(step) or self.menus.setdefault(
                step, model_menu(self.tools, self.bounds.replies, step, self.fitting_answer)
            )
        reply = self.answer(("model", step), options)
        if isinstance(reply, BaseException):
            raise copy.copy(reply)
        assert isinstance(reply, ChatMessage)
        return reply

    def tool_ran(self, tool: Tool, covered: bool, arguments: dict[str, Any]) -> str:
        """Record the execution of the call the run is running now; the world's outcome for it."""
        run = self.run
        assert run is not None
        # Tools run one at a time (the checked agent has tool_concurrency=1): the call under way is
        # the first of this tool that is ready; finished ones are done.
        call = next(c for c in run.pending if c.status is CallStatus.READY and c.call.tool_name == tool.name)
        options = self.bounds.tool_outcomes or (TOOL_OUTCOME.default,)
        # Each retry of a call (its tool's ``Retry``) is a question of its own: an attempt raises or returns.
        asked = call.key if not call.attempts else f"{call.key}@{call.attempts}"
        outcome = str(self.answer(TOOL_OUTCOME.key(run.step, asked), options))
        shown = {k: v for k, v in arguments.items() if k not in (IDEMPOTENCY_KEY, REPORT_PROGRESS)}
        self.record.tool_executions.append(
            ToolExecution(run.step, call.key, tool.name, shown, tool.idempotent, covered, outcome, self.segment)
        )
        return outcome

    def tool_returned(self, value: Any) -> None:
        """Record what the tool's own function returned for the execution under way (the last one recorded)."""
        e = self.record.tool_executions[-1]
        self.results[(e.step, e.call_key)] = value

    def reconciled(self, tool: Tool, call: InDoubtCall) -> Reconciled:
        """The world's answer to ``tool``'s reconcile function for a call in doubt (``RECONCILE``).

        ``truthful`` says what the world saw: the call's effect happened (an execution returned,
        with what it returned), or it did not (no execution, or one the world made raise); then it
        cannot tell (``unknown``), or the function raises.
        """
        verb = str(self.answer(RECONCILE.key(call.step, call.call_id), RECONCILE.options))
        where = (call.step, call.call_id)
        if verb == "raises":
            self.record.decisions.append(Decision(call.step, call.call_id, tool.name, verb, None, self.segment))
            raise ReconcileFailure(f"{tool.name}'s reconcile function failed (a failure the checker chose)")
        ran = [e for e in self.record.tool_executions if (e.step, e.call_key) == where and e.outcome == "returns"]
        answer: Reconciled
        if verb == "unknown":
            answer = Unknown("the checker's reconcile function cannot tell")
        elif not ran:
            answer = NotHappened()
        elif where in self.results:
            answer = Happened(self.results[where])
        else:  # it ran and gave nothing back in time (a timeout): its effect may have happened
            answer = Unknown("the checker's reconcile function cannot tell (the call timed out)")
        self.record.decisions.append(Decision(call.step, call.call_id, tool.name, answer.kind, None, self.segment))
        return answer

    def hook_fired(self, point: str, index: int, hook: Any) -> None:
        """Record a hook firing."""
        run = self.run
        assert run is not None
        self.record.hook_firings.append(HookFiring(point, run.step, index, hook_name(hook), self.segment))

    def hook_choice(self, point: str, count: int) -> int:
        """Which of ``count`` alternatives the user gave for ``point`` acts now."""
        run = self.run
        assert run is not None
        return int(self.answer(("hook", point, run.step), tuple(range(count))))

    def decide(
        self, tool: Tool | None, tool_name: str, params: dict[str, Any], call_key: str, question: CallQuestion
    ) -> Any:
        """The world's decision (``DECISION`` or ``RESUME_DECISION``): a ``ToolExecutionDecision``, or ``None`` to defer."""
        run = self.run
        assert run is not None
        verbs = question.options if self.bounds.decisions else (question.default,)
        other = valid_arguments(tool, 1) if tool is not None else None
        if other is None or other == {k: v for k, v in params.items() if k != IDEMPOTENCY_KEY}:
            verbs = tuple(v for v in verbs if v != "modify")
        verb = str(self.answer(question.key(run.step, call_key), verbs))
        arguments = {"approve": params, "modify": other}.get(verb)
        self.record.decisions.append(Decision(run.step, call_key, tool_name, verb, arguments, self.segment))
        if verb == "defer":
            return None
        if verb == "reject":
            return ToolExecutionDecision(tool_name, False, call_key, feedback="rejected by the checker")
        return ToolExecutionDecision(tool_name, True, call_key, final_tool_params=dict(arguments or {}))

    def guard(self, guardrail: Guardrail, value: Any) -> GuardrailResult:
        """The world's answer for ``guardrail`` shown ``value`` (keyed by ``guard_key``): it passes, rewrites or trips."""
        run = self.run
        assert run is not None
        options = self.bounds.guardrail_answers or (GUARDRAIL.default,)
        answer = str(self.answer(GUARDRAIL.key(run.step, guard_key(guardrail, value)), options))
        if answer == "tripwire":
            return GuardrailResult.tripwire(TRIPPED_REASON)
        if answer == "rewrite":
            return GuardrailResult.rewrite(self._rewritten(guardrail.point, value), REWRITTEN_TEXT)
        return GuardrailResult.passed()

    def _rewritten(self, point: str, value: Any) -> Any:
        """What the world rewrites a value as: other valid arguments, a note, a text; the same value where no other fits."""
        if point == "tool_call":
            tool = next((t for t in self.tools if t.name == value.tool_name), None)
            return valid_arguments(tool, 1) if tool is not None else dict(value.arguments)
        if point == "input":  # a note at the end: what the conversation held before is kept
            return [*value, ChatMessage.from_user(REWRITTEN_TEXT)]
        return REWRITTEN_TEXT if point == "tool_result" or isinstance(value, str) else value

    def in_doubt(self, step: int, call_key: str, tool_name: str) -> ToolExecutionDecision:
        """The decision for a call in doubt after a crash: run it again, or settle it with a result."""
        verb = str(self.answer(IN_DOUBT.key(step, call_key), IN_DOUBT.options))
        self.record.decisions.append(Decision(step, call_key, tool_name, verb, None, self.segment))
        if verb == "rerun":
            return ToolExecutionDecision(tool_name, True, call_key)
        return ToolExecutionDecision(tool_name, False, call_key, feedback="settled by the checker")

    def input_answers(self, step: int, questions: Sequence[InputQuestion]) -> tuple[list[Any], list[Any]]:
        """The world's answers to a pause's questions: the fitting ones, and those that do not fit (maybe none).

        Each question's fitting answer is an example of its schema (the second example for every
        other question, so that answers bound to the wrong question show); an unfitting one is
        given first where the path says ``invalid`` and the schema refuses some value.
        """
        fitting: list[Any] = []
        unfitting: list[Any] = []
        for i, q in enumerate(questions):
            schema = CompiledSchema(q.response_schema, f"question {q.id}")
            examples = [_example(q.response_schema, q.response_schema.get("$defs", {}), v) for v in (i % 2, 0)]
            value = next((e for e in examples if schema.is_valid(e)), examples[0])
            bad = [v for v in _UNFITTING if not schema.is_valid(v)][:1]  # none: the schema takes any value
            options = INPUT_ANSWER.options if bad else (INPUT_ANSWER.default,)
            verb = str(self.answer(INPUT_ANSWER.key(step, q.id), options))
            if verb == "invalid":
                unfitting.append(InputAnswer(q.id, bad[0]))
            fitting.append(InputAnswer(q.id, value))
            where = q.tool_name or f"hook {q.hook_point}"
            self.record.decisions.append(Decision(step, q.id, where, "answer", {"answer": value}, self.segment))
        return fitting, unfitting

    def answer_read(self, call_key: str, index: int, value: Any) -> None:
        """Record what a tool call's ``index``-th ``ask_user`` returned."""
        run = self.run
        assert run is not None
        self.record.answers_read.append(AnswerRead(run.step, call_key, index, value, self.segment))

    def writing(self, delta: RunDelta, committed: Callable[[], bytes]) -> None:
        """The run is about to write ``delta`` to its store (``committed``: the store's image): the process dies here if the path says so."""
        if self.dead:
            raise Killed("the process is gone")
        if self.segment == 0:
            record = self.record
            effects = len(record.tool_executions) + len(record.hook_firings) + len(record.decisions)
            self.write_points.append((self.commits, effects, self.run.step if self.run else 0))
            died_before = f"write {self.writes} to the store, {_what_is_written(delta)}"
            if self.keeps_remains:
                assert self.run is not None
                self.remains.append(
                    Remains(
                        self.run.run_id,
                        died_before,
                        survived(self.run.trace),
                        len(self.events),
                        len(record.model_inputs),
                        len(record.tool_executions),
                        len(record.hook_firings),
                        sum(f.committed for f in record.hook_firings),
                        len(record.decisions),
                        len(record.answers_read),
                        len(self.asked),
                        dict(self.results),
                        committed(),
                    )
                )
            if self.crash_at == self.writes:
                self.dead = True
                self.events_at_death = len(self.events)
                record.died_before = died_before
                raise Killed(f"killed before write {self.writes} to the store")
        self.writes += 1

    def committed(self) -> None:
        """The store committed: every hook firing so far is known to a resumed run."""
        self.commits += 1
        for f in self.record.hook_firings:
            if f.segment == self.segment:
                f.committed = True


def _what_is_written(delta: RunDelta) -> str:
    """What a delta records, in words (for the trace of a run killed before writing it)."""
    if delta.record is not None:
        r = delta.record
        return f"which records the edge {r.source.value} --{r.trigger}--> {r.dest.value} (step {r.step})"
    if delta.messages:
        return f"which records {len(delta.messages)} new message(s) (a finished call's result, or a hook's)"
    return "which records progress within the phase (a call that finished, hooks that ran, decisions taken)"


# -- the agent's parts, wrapped -----------------------------------------------------------------------


class WorldSlot:
    """The world of the path under way: the checked agent is built once, and each path puts its world here."""

    def __init__(self) -> None:
        self.world: World | None = None

    @property
    def current(self) -> World:
        """The world answering now."""
        assert self.world is not None, "no path is under way"
        return self.world


class _InWorld:
    """A part of the checked agent: it asks the world of the path under way."""

    slot: WorldSlot

    @property
    def world(self) -> World:
        return self.slot.current


class WorldGenerator(_InWorld):
    """A chat generator whose replies are the world's."""

    def __init__(self, slot: WorldSlot) -> None:
        self.slot = slot

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """The world's reply."""
        return {"replies": [self.world.model_call(messages)]}


class _RecordedHook(_InWorld):
    """One of the agent's hooks: the firing is recorded, then the hook runs."""

    def __init__(self, slot: WorldSlot, point: str, index: int, inner: Any) -> None:
        self.slot, self.point, self.index, self.inner = slot, point, index, inner
        #: The hook it wraps asks a person: the run gives this one ``ask_user``, for it.
        self.asks_user = hook_asks(inner)

    def run(self, state: State, /, **kwargs: Any) -> Any:
        self.world.hook_fired(self.point, self.index, self.inner)
        given = {k: v for k, v in kwargs.items() if accepts(self.inner, k)}
        try:
            return self.inner.run(state, **given)
        finally:
            asker = kwargs.get(ASK_USER)
            if isinstance(asker, Asker) and asker.asked is not None:
                self.world.record.hook_firings[-1].asked = True


class _ChoiceHook(_InWorld):
    """The user's alternatives for a hook point: the world picks the one that acts at each firing."""

    def __init__(self, slot: WorldSlot, point: str, index: int, alternatives: Sequence[Callable[..., Any]]) -> None:
        self.slot, self.point, self.index, self.alternatives = slot, point, index, list(alternatives)

    def run(self, state: State, /, **kwargs: Any) -> Any:
        self.world.hook_fired(self.point, self.index, self)
        chosen = self.alternatives[self.world.hook_choice(self.point, len(self.alternatives))]
        run = getattr(chosen, "run", None)
        return run(state) if callable(run) else chosen(state)


class WorldStrategy(_InWorld):
    """A confirmation strategy whose decisions are the world's (approve, reject, modify, defer)."""

    def __init__(self, slot: WorldSlot, tools: Mapping[str, Tool]) -> None:
        self.slot, self.tools = slot, tools

    def run(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any], tool_call_id: str | None = None
    ) -> ToolExecutionDecision:
        """The world's decision; deferring raises ``HITLBreakpointException``, as a breakpoint strategy does."""
        # The world's model gives every call an id: a decision keyed by the tool's name could be
        # bound to two parallel calls of it.
        assert tool_call_id is not None, f"the checked run asked about a call of {tool_name} without an id"
        key = tool_call_id
        decision = self.world.decide(self.tools.get(tool_name), tool_name, tool_params, key, DECISION)
        if decision is None:
            raise HITLBreakpointException(f"{tool_name} deferred by the checker", tool_name, tool_call_id=key)
        return decision  # type: ignore[no-any-return]


def guard_key(guardrail: Guardrail, value: Any) -> str:
    """A guardrail question's key within its step: the point, the guardrail, and the call it is shown, if one.

    A call's arguments are in its key (a digest of them): a call a decision changed is a new question.
    A point's other values are keyed by the step alone, so that a resumed run whose conversation
    rightly differs (a call in doubt settled with a given result) is answered as the uninterrupted one.
    """
    key = f"{guardrail.point}:{guardrail.name}"
    if isinstance(value, ToolCallResult) and value.origin.id:
        return f"{key}:{value.origin.id}"
    if isinstance(value, ToolCall):
        return f"{key}:{value.id}#{value_digest(value)[:8]}"
    return key


class WorldGuardrail(_InWorld, Guardrail):
    """One of the agent's guardrails, at its point and for its tools: the world answers each value (its own check is not called)."""

    def __init__(self, slot: WorldSlot, inner: Guardrail) -> None:
        Guardrail.__init__(self, inner.point, name=inner.name, on_trip=inner.on_trip, tools=inner.tools)
        self.slot = slot

    def check(self, value: Any, /) -> GuardrailResult:
        """The world's answer: pass, rewrite or tripwire."""
        return self.world.guard(self, value)


class _ReadAnswers:
    """A tool call's ``ask_user``, recording what each of its questions returned (``World.answer_read``)."""

    def __init__(self, world: World, asker: Asker) -> None:
        self.world, self.asker, self.count = world, asker, 0

    def __call__(self, question: str, response_schema: Any = None) -> Any:
        index = self.count
        self.count += 1
        value = self.asker(question, response_schema)
        self.world.answer_read(self.asker.tool_call_id or self.asker.prefix, index, value)
        return value


class WorldStore(_InWorld, SQLiteSnapshotStore):
    """A durable in-memory store whose process the world can kill before any write.

    Dying drops what was recorded and not committed, and the process's claims, as a killed
    process would; what was committed stays, for the resumed run to start from.
    """

    def __init__(self, slot: WorldSlot) -> None:
        SQLiteSnapshotStore.__init__(self, ":memory:", durable=True)
        self.slot = slot

    def observe(self, delta: RunDelta) -> None:
        """Write ``delta`` unless the process dies first."""
        self.world.writing(delta, self.image)
        super().observe(delta)

    def _commit(self, run_id: str, cursor: Any) -> None:
        if self.world.dead:
            raise Killed("the process is gone")
        had = bool(cursor.entries) or cursor.ending is not None
        super()._commit(run_id, cursor)
        if had:
            self.world.committed()

    def revive(self) -> None:
        """A new process opens the store: only what was committed is there."""
        self._cursors.clear()
        self._claims.clear()
        self.world.dead = False

    def empty(self) -> None:
        """Forget every run: the next path starts with an empty store."""
        self._cursors.clear()
        self._claims.clear()
        with self._lock:
            self._db.execute("DELETE FROM snapshot_batches")
            self._db.execute("DELETE FROM runs")

    def image(self) -> bytes:
        """What the store committed, as bytes (what is recorded and not committed is in the process only)."""
        with self._lock:
            return self._db.raw.serialize()

    def reopen(self, image: bytes) -> None:
        """A new process opens the store a killed one left: ``image`` is what it had committed."""
        with self._lock:
            self._db.raw.deserialize(image)
        self.revive()


#: The tool runner's options that set how many calls run at once (the checked agent runs one at a time).
_CONCURRENCY = frozenset({"max_workers", "tool_concurrency"})
#: The ``Agent`` parameters the checked copy replaces: every other one is copied from the agent's
#: attribute of the same name, so a parameter ``Agent`` gains is checked as the user gave it.
REPLACED_PARAMETERS = frozenset(
    {
        "chat_generator",
        "tools",
        "tool_concurrency",
        "tool_invoker_kwargs",
        "tool_timeout",
        "snapshot_store",
        "hooks",
        "confirmation_strategies",
        "guardrails",
    }
)


def agent_parameters() -> tuple[str, ...]:
    """The keyword parameters of ``Agent.__init__``, in order."""
    return tuple(name for name in inspect.signature(Agent.__init__).parameters if name != "self")


def build_agent(
    agent: Agent,
    slot: WorldSlot,
    store: WorldStore,
    hook_choices: Mapping[str, Any],
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
    *,
    thread: CallThread,
) -> Agent:
    """A copy of ``agent`` whose model, tools, hooks, strategies, guardrails' answers and store are the world's.

    Tools run one at a time, so that which call runs is known, each within ``tool_timeout`` seconds
    (or the tool's or the agent's shorter timeout), in ``thread``; everything else (exit conditions, limits, loop detection, streaming options...) is
    the agent's own.
    """
    covered = {t.name for t in agent.known_tools() if agent._confirmation.strategy_for(t.name) is not None}
    bound = min(tool_timeout, agent.tool_timeout or math.inf)
    tools = [
        _wrapped_tool(slot, t, t.name in covered, min(bound, t.timeout or math.inf), thread)
        for t in agent.known_tools()
    ]
    hooks: dict[str, list[Any]] = {
        point.value: [_RecordedHook(slot, point.value, i, h) for i, h in enumerate(given)]
        for point, given in agent._hooks.items()
    }
    for point, alternatives in hook_choices.items():
        at = hooks.setdefault(point, [])
        at.append(_ChoiceHook(slot, point, len(at), alternatives))
    by_name = {t.name: t for t in agent.known_tools()}
    strategy = WorldStrategy(slot, by_name)
    own = {name: getattr(agent, name) for name in agent_parameters() if name not in REPLACED_PARAMETERS}
    return Agent(
        **own,
        chat_generator=WorldGenerator(slot),
        tools=tools,
        tool_invoker_kwargs={k: v for k, v in agent.tool_invoker_kwargs.items() if k not in _CONCURRENCY},
        tool_concurrency=1,
        tool_timeout=None,  # each tool bounds its own calls, once the world has answered in the run's thread
        snapshot_store=store,
        hooks=hooks or None,
        confirmation_strategies=dict.fromkeys(sorted(covered), strategy) or None,
        guardrails=[WorldGuardrail(slot, g) for gs in agent._guardrails.values() for g in gs] or None,
    )


def _wrapped_tool(slot: WorldSlot, tool: Tool, covered: bool, timeout: float, thread: CallThread) -> Tool:
    """The checked copy of ``tool``: the world says whether a call raises, and a call that runs stops within ``timeout``.

    A tool that reaches a server outside the process (an MCP server's: it has ``played_result``)
    is never called: the world plays its result from its output schema, as it plays the model.
    The world is asked in the run's thread; the tool's own function runs in ``thread``, abandoned
    past ``timeout`` (the call's outcome is then a ``ToolTimeoutError``).
    """
    clone = copy.copy(tool)
    inner = tool.invoke
    played = getattr(tool, "played_result", None)

    def invoke(**kwargs: Any) -> Any:
        if slot.current.tool_ran(tool, covered, kwargs) == "raises":
            raise ToolFailure(f"{tool.name} failed (a failure the checker chose)")
        asker = kwargs.get(ASK_USER)
        if isinstance(asker, Asker):
            kwargs[ASK_USER] = _ReadAnswers(slot.current, asker)
            try:
                return _call(kwargs)
            finally:
                if asker.asked is not None:  # it ended without a result: it runs again once answered
                    executions = slot.current.record.tool_executions
                    executions[-1] = dataclasses.replace(executions[-1], outcome="asks")
        return _call(kwargs)

    def _call(kwargs: dict[str, Any]) -> Any:
        if callable(played):
            schema = getattr(tool, "output_schema", None)
            return played(_example(schema, schema.get("$defs", {}), 0) if isinstance(schema, dict) else None)
        done, value = result_within(thread.call(inner, **kwargs), timeout)
        if not done:
            thread.abandon()
            raise ToolTimeoutError(
                f"Tool {tool.name!r} did not finish within {timeout:g} s (agentfsm check's tool_timeout); the check "
                "stopped waiting for it.",
                tool.name,
                timeout,
            )
        slot.current.tool_returned(value)
        return value

    def reconcile(call: InDoubtCall) -> Reconciled:
        return slot.current.reconciled(tool, call)

    object.__setattr__(clone, "invoke", invoke)
    object.__setattr__(clone, "timeout", None)
    if tool.retry is not None:  # the world waits for no backoff: which attempt comes next is what is explored
        object.__setattr__(clone, "retry", dataclasses.replace(tool.retry, backoff=0.0))
    if tool.reconcile is not None:  # the world answers for it, as it answers for the tool's outcome
        object.__setattr__(clone, "reconcile", reconcile)
    return clone
