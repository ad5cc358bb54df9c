"""The agent loop as a declared finite-state machine: the slices of ``agentfsm.slices``, composed and checked.

Two rules, after h11's ``_state.py``:

1. Everything that decides *what happens next* is data: the phases and the work each phase does
   (``PHASE_WORK``, in ``agentfsm._core.phases``), and each capability's **slice**
   (``agentfsm.slices``): its facts, its ordered rules out of phases and choices, its interrupts,
   its edges of a tool call's life, the work its facts skip, its constant facts. This module
   composes the slices (``SLICES``) and checks the result.
2. Everything else reads the composed tables. The rules compile (``agentfsm._core.rules``) into
   the flat table ``TRANSITIONS``, which the runtime takes edges through (``Dispatch``, or
   ``specialise``'s table for a run's configuration); ``build_machine`` builds it as a
   ``transitions.Machine`` (the reference implementation the tests compare ``Dispatch`` against);
   diagrams draw the rules themselves (``RULES``, numbered by priority, choices as choice states);
   snapshot validation and the stores read the phase sets; tests check that every edge is taken.

Each phase's way out is an ordered list of rules, from every slice, the first that holds taken
(``agentfsm._core.rules``): the flat table gives each way through them one edge, guarded by the
facts that decide it, and ``Dispatch`` compiles the guards of each phase into a lookup from every
combination of those facts to its one edge. ``pause``, ``fail``, ``resume`` and ``cancel`` are
*interrupts*, taken from any active phase rather than once its work is done: the runtime fires the
first three itself when a breakpoint matches, an error escapes, or a snapshot is resumed; they are
declared all the same, so that an undeclared pause (say, from IDLE) is refused. ``cancel`` and
LLM_CALL's ``usage_limit`` are *guarded* interrupts (``GUARDED_INTERRUPTS``): the runtime takes
one on entering its source phase when its guard holds.

A call moves by trigger: ``CALL_TRANSITIONS`` (the slices' call edges) names, for each status, one
edge per trigger, and ``CallDispatch`` refuses, when it is built, a table with a duplicate edge, a
status it never reaches, or a status other than the terminal ones without a way out.
``AgentRun.move_call`` is the one way a run changes a call's status.
"""

from __future__ import annotations

import collections
import functools
import operator
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import (
    ACTIVE_PHASES,
    CALL_AWAITING_INPUT,
    CALL_DONE,
    CALL_FAILED,
    CALL_PROPOSED,
    CALL_READY,
    CALL_REJECTED,
    CALL_RETRYING,
    CALL_UNDECIDED,
    CALL_UNKNOWN,
    CANNOT_FAIL,
    COMMIT_ON_ENTRY,
    CONFIRM,
    DONE,
    EXIT_CHECK,
    FAILED,
    HOOK_POINTS,
    IDLE,
    LLM_CALL,
    PAUSED,
    PHASE_WORK,
    PREPARED_PHASES,
    TERMINAL_CALL_STATUSES,
    TERMINAL_PHASES,
    TOOL_PENDING,
    TOOL_RUN,
    CallStatus,
    Phase,
    Work,
)
from agentfsm._core.rules import (
    FACT_WORDS,
    OTHERWISE,
    CallDispatch,
    CallTransition,
    Choice,
    ConstantFacts,
    Dispatch,
    Fact,
    Guard,
    Rule,
    Slice,
    Transition,
    compile_interrupts,
    compile_rules,
)
from agentfsm.errors import MachineError
from agentfsm.slices import (
    cancel,
    doubt,
    flow,
    guardrails,
    hitl,
    interrupts,
    limits,
    loop,
    loops,
    output,
    reconcile,
    retries,
)

if TYPE_CHECKING:
    from agentfsm._core.runtime import RunConfig

__all__ = [
    "ACTIVE_PHASES",
    "CALL_AWAITING_INPUT",
    "CALL_DISPATCH",
    "CALL_DONE",
    "CALL_FAILED",
    "CALL_PROPOSED",
    "CALL_READY",
    "CALL_REJECTED",
    "CALL_RETRYING",
    "CALL_TRANSITIONS",
    "CALL_UNDECIDED",
    "CALL_UNKNOWN",
    "CANNOT_FAIL",
    "CHOICES",
    "COMMIT_ON_ENTRY",
    "CONFIRM",
    "DISPATCH",
    "DONE",
    "EXIT_CHECK",
    "EXIT_REASON_FIELDS",
    "FACTS",
    "FACT_NAMES",
    "FACT_WORDS",
    "FAILED",
    "GUARDED_INTERRUPTS",
    "HOOK_POINTS",
    "IDLE",
    "LLM_CALL",
    "OPTIONAL_WORK",
    "OTHERWISE",
    "PAUSED",
    "PHASE_WORK",
    "PREPARED_PHASES",
    "RULES",
    "SKIP_WORK",
    "SLICES",
    "TERMINAL_CALL_STATUSES",
    "TERMINAL_PHASES",
    "TOOL_PENDING",
    "TOOL_RUN",
    "TRANSITIONS",
    "CallDispatch",
    "CallStatus",
    "CallTransition",
    "Choice",
    "ConstantFacts",
    "Dispatch",
    "Fact",
    "Facts",
    "Guard",
    "Phase",
    "Rule",
    "RunFacts",
    "Slice",
    "Transition",
    "Work",
    "build_machine",
    "check_exit_reasons",
    "check_facts_readable",
    "check_skip_work",
    "constant_facts",
    "dispatch_for",
    "specialise",
    "watched_interrupts",
    "work_plan",
]

#: The machine, slice by slice: the agent loop, then each capability (``agentfsm.slices``).
SLICES: tuple[Slice, ...] = (
    loop.SLICE,
    flow.SLICE,
    loops.SLICE,
    hitl.SLICE,
    doubt.SLICE,
    retries.SLICE,
    reconcile.SLICE,
    cancel.SLICE,
    limits.SLICE,
    interrupts.SLICE,
    output.SLICE,
    guardrails.SLICE,
)


def _merged(kind: str, pairs: Iterable[tuple[str, Any, Any]]) -> dict[Any, Any]:
    """``{key: value}`` from each slice's ``(slice name, key, value)``; ``MachineError`` for a key two slices declare."""
    merged: dict[Any, Any] = {}
    owner: dict[Any, str] = {}
    for name, key, value in pairs:
        if key in merged:
            raise MachineError(f"The slices {owner[key]!r} and {name!r} both declare the {kind} {key!r}; rename one.")
        merged[key], owner[key] = value, name
    return merged


#: Every fact a guard may read, by name, with its words and its reader.
FACTS: Mapping[str, Fact] = _merged("fact", ((s.name, f.name, f) for s in SLICES for f in s.facts))
#: The names of the facts a guard may read.
FACT_NAMES: tuple[str, ...] = tuple(FACTS)
FACT_WORDS.update({f.name: {True: f.holds, False: f.fails} for f in FACTS.values()})

#: What the guards read: one value of each fact (tests and ``build_machine`` pass these; a run reads its own).
_record_type: Any = collections.namedtuple  # its fields are the slices': no literal for a type checker to read
Facts: Any = _record_type("Facts", FACT_NAMES, defaults=(False,) * len(FACT_NAMES))
Facts.__doc__ = "The facts the guards read at a transition boundary, one field each (``False`` unless given)."

#: Every rule of every phase and choice, as the slices declare them (drawings number them by ``order``).
RULES: tuple[Rule, ...] = tuple(r for s in SLICES for r in s.rules)
#: The decisions rules share.
CHOICES: tuple[Choice, ...] = tuple(c for s in SLICES for c in s.choices)
#: The whole control flow of an agent run, compiled from the rules and the interrupts.
TRANSITIONS: tuple[Transition, ...] = compile_rules(RULES, CHOICES, FACT_NAMES) + compile_interrupts(
    i for s in SLICES for i in s.interrupts
)
#: What an ``exit_reason`` template may name, and how each is read off the run.
EXIT_FIELDS: Mapping[str, Callable[[Any], object]] = _merged(
    "exit field", ((s.name, key, read) for s in SLICES for key, read in s.exit_fields.items())
)
EXIT_REASON_FIELDS: frozenset[str] = frozenset(EXIT_FIELDS)
#: Work that is skipped when a fact has the given value: when any of the slices' skips of it holds.
#: (A hook point without hooks in a run is skipped too, and so is a guard point without guardrails:
#: see ``work_plan``.)
SKIP_WORK: Mapping[Work, tuple[tuple[str, bool], ...]] = {
    item: tuple(s.skips[item] for s in SLICES if item in s.skips)
    for item in Work
    if any(item in s.skips for s in SLICES)
}
#: Work a run does only when its agent has something there: hook points (hooks) and guard points (guardrails).
OPTIONAL_WORK: frozenset[Work] = frozenset(HOOK_POINTS) | frozenset(guardrails.POINT_OF)
#: The life of one tool call, from the model's proposal to its result. A trigger names one edge out
#: of each status it leaves (``CallDispatch`` checks it), so the run moves a call by naming the trigger.
CALL_TRANSITIONS: tuple[CallTransition, ...] = tuple(t for s in SLICES for t in s.call_edges)
CALL_DISPATCH = CallDispatch(CALL_TRANSITIONS)

#: The interrupts with a guard, by source phase: the runtime reads their facts on entering an
#: active phase (a resume included), before the phase's work, and takes the first whose guard
#: holds; it leaves out those whose guard cannot hold there (``watched_interrupts``). It reads
#: them all when the driver reports that the run's task was cancelled, where the phase's work stands.
GUARDED_INTERRUPTS: dict[Phase, tuple[Transition, ...]] = {
    phase: tuple(t for t in TRANSITIONS if t.interrupt and t.when and t.source is phase) for phase in ACTIVE_PHASES
}


def check_exit_reasons(transitions: Iterable[Transition]) -> None:
    """Refuse, with ``MachineError``, an ``exit_reason`` template naming a field no slice fills in."""
    for t in transitions:
        if t.exit_reason is None:
            continue
        named = {name for _, name, _, _ in string.Formatter().parse(t.exit_reason) if name is not None}
        if not named <= EXIT_REASON_FIELDS:
            raise MachineError(
                f"The exit reason {t.exit_reason!r} of {t.source.value} --{t.trigger}--> names "
                f"{sorted(named - EXIT_REASON_FIELDS)}; a template may name only {sorted(EXIT_REASON_FIELDS)}."
            )


def check_skip_work(skip_work: Mapping[Work, tuple[tuple[str, bool], ...]]) -> None:
    """Refuse, with ``MachineError``, work skipped on something that is not a fact (``FACT_NAMES``)."""
    unknown = {item.value: fact for item, skips in skip_work.items() for fact, _ in skips if fact not in FACT_NAMES}
    if unknown:
        raise MachineError(f"SKIP_WORK reads unknown facts {unknown}; facts: {FACT_NAMES}.")


check_exit_reasons(TRANSITIONS)
check_skip_work(SKIP_WORK)

DISPATCH = Dispatch(TRANSITIONS)


class RunFacts:
    """The facts of the composed machine as properties: ``AgentRun`` inherits them.

    Each property is its slice's reader (``Fact.read``), installed here when the slices are
    composed, so that the table's lookups read a run's facts as attributes, as they read those of a
    ``Facts`` value.
    """

    __slots__ = ()

    def facts(self) -> Any:
        """The facts the guards read, as they stand now: a ``Facts`` value."""
        return Facts._make(_READ_FACTS(self))


#: Reads every fact off a run, in the order of ``Facts``.
_READ_FACTS = operator.attrgetter(*FACT_NAMES)
for _fact in FACTS.values():
    setattr(RunFacts, _fact.name, property(_fact.read, doc=f"Fact: {_fact.holds}."))


def check_facts_readable(run_class: type) -> None:
    """Refuse, with ``MachineError``, a fact (``FACT_NAMES``) that ``run_class`` has no attribute for."""
    missing = [name for name in FACT_NAMES if not hasattr(run_class, name)]
    if missing:
        raise MachineError(
            f"Facts {missing} are declared by the slices but {run_class.__name__} does not work them out: "
            "derive it from agentfsm.machine.RunFacts."
        )


def constant_facts(config: RunConfig, state: Mapping[str, Any] | None = None) -> ConstantFacts:
    """The facts runs of a configuration can never change: each slice's rule (``Slice.constants``).

    The one rule for runs (``AgentRun``) and drawings (``agentfsm.diagrams``, through
    ``Agent.outline``). ``state``: a run's starting State values (a resumed run's may hold keys a
    new run's never does); ``None`` for a new run.
    """
    start = state or {}
    return frozenset(fact for s in SLICES if s.constants is not None for fact in s.constants(config, start))


@functools.cache
def specialise(constants: ConstantFacts) -> tuple[Transition, ...]:
    """The table for runs in which the facts of ``constants`` keep their values.

    An edge that needs a constant to have the other value is left out; the others keep guards on the
    facts that can change only. Runs compile it (``dispatch_for``).
    """
    values = dict(constants)
    return tuple(
        t if not t.when else replace(t, when=tuple((name, value) for name, value in t.when if name not in values))
        for t in TRANSITIONS
        if all(values.get(name, value) is value for name, value in t.when)
    )


@functools.cache
def dispatch_for(constants: ConstantFacts) -> Dispatch:
    """The table compiled for runs in which the facts of ``constants`` keep their value (``specialise``)."""
    return Dispatch(specialise(constants)) if constants else DISPATCH


#: One entry of a work plan: the item's position in its phase's work, the item, and the facts that
#: skip it with the value that does (any one skips it; ``None``: it is never skipped).
PlannedWork = tuple[int, Work, tuple[tuple[str, bool], ...] | None]
#: A run's work plan: per phase, for each stage, the next item with something to do.
WorkPlan = dict[Phase, tuple[PlannedWork | None, ...]]


@functools.cache
def work_plan(hooked: frozenset[Work], constants: ConstantFacts = frozenset()) -> WorkPlan:
    """For each phase and each stage of it, the next work item with something to do.

    ``hooked`` are the optional work items (``OPTIONAL_WORK``) that have something to do in a run:
    hook points with hooks, guard points with guardrails; the others are left out of the plan
    (``None``: the phase's work is done), and so is work that one of the ``constants`` always skips.
    Positions are those of ``PHASE_WORK``, so a snapshot's ``stage`` means the same whatever
    hooks the run that resumes it has.
    """
    values = dict(constants)
    plan: WorkPlan = {}
    for phase in Phase:
        items = PHASE_WORK.get(phase, ())
        todo: list[PlannedWork] = []
        for i, item in enumerate(items):
            skips = SKIP_WORK.get(item, ())
            if any(values.get(fact) is value for fact, value in skips):
                continue  # always skipped
            left = tuple((fact, value) for fact, value in skips if fact not in values)  # the others never skip it
            if item not in OPTIONAL_WORK or item in hooked:
                todo.append((i, item, left or None))
        plan[phase] = tuple(next((w for w in todo if w[0] >= stage), None) for stage in range(len(items) + 1))
    return plan


@functools.cache
def watched_interrupts(constants: ConstantFacts) -> Mapping[Phase, Mapping[str | None, tuple[Transition, ...]]]:
    """The guarded interrupts (``GUARDED_INTERRUPTS``) a run reads on entering a phase, by phase and entering trigger.

    Those whose guard a constant of the run contradicts are left out (a run without usage limits
    never reads ``usage_limit``; one whose handle is not cancelled, ``cancel``). After a trigger, an
    interrupt whose guard contradicts the guard of every declared edge of that trigger into the
    phase is not read either: the edge's guard was read at the same boundary, and nothing between
    the two reads changes what they read (EXIT_CHECK's ``continue`` into LLM_CALL holds only while
    ``usage_limit_reached`` is false, so ``usage_limit`` cannot hold after it; the work of the edge,
    an ``output_retry``'s message, counts for no limit; the wall clock moves on by the microseconds
    in between). ``None`` gives those read after any other trigger (a start's, a resume's).
    """
    values = dict(constants)
    watched: dict[Phase, Mapping[str | None, tuple[Transition, ...]]] = {}
    for phase, guarded in GUARDED_INTERRUPTS.items():
        interrupts = tuple(t for t in guarded if all(values.get(n, v) is v for n, v in t.when))
        if not interrupts:
            continue
        entering: dict[str, list[Transition]] = {}
        for edge in TRANSITIONS:
            if edge.dest is phase and not edge.interrupt:
                entering.setdefault(edge.trigger, []).append(edge)
        after: dict[str | None, tuple[Transition, ...]] = {None: interrupts}
        for trigger, edges in entering.items():
            after[trigger] = tuple(t for t in interrupts if not all(_contradicts(e.when, t.when) for e in edges))
        watched[phase] = after
    return watched  # plain dicts, read at every transition: shared by the runs, which never change them


def _contradicts(guard: Iterable[tuple[str, bool]], other: Iterable[tuple[str, bool]]) -> bool:
    """Whether the two guards cannot both hold: they need a fact to have different values."""
    values = dict(guard)
    return any(values.get(name, value) is not value for name, value in other)


def build_machine(model: Any, initial: Phase = Phase.IDLE) -> Any:
    """Build the table as a ``transitions.Machine`` on ``model``.

    Guards read the facts passed to the trigger: ``model.trigger("tool_calls", facts=facts)``; a
    resume names its destination: ``model.trigger("resume", to=Phase.TOOL_RUN)``. Auto transitions
    are off, so only declared edges exist.
    """
    from transitions import Machine

    def guarded(guard: Callable[[Any], bool]) -> Callable[..., bool]:
        return lambda **kwargs: guard(kwargs["facts"])

    def resumes_to(dest: Phase) -> Callable[..., bool]:
        return lambda **kwargs: kwargs.get("to") is dest

    specs = []
    for t in TRANSITIONS:
        spec: dict[str, Any] = {"trigger": t.trigger, "source": t.source.value, "dest": t.dest.value}
        if t.guard is not None:
            spec["conditions"] = [guarded(t.guard)]
        elif t.trigger == "resume":
            spec["conditions"] = [resumes_to(t.dest)]
        specs.append(spec)
    return Machine(
        model=model,
        states=[p.value for p in Phase],
        transitions=specs,
        initial=initial.value,
        auto_transitions=False,
        ignore_invalid_triggers=False,
    )
