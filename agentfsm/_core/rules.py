"""The language of the machine's tables: facts, ordered rules, choices, slices; compiled into edges.

A phase's way out is an **ordered list of rules**: the first whose guard holds is taken, and the
last (``OTHERWISE``) has no guard. A rule leads to a phase, or to a **choice**: a decision shared
by several rules, with ordered rules of its own (``go_on``: may the run call the model again?), so
that *why* a run goes on and *whether it may* are each decided once, not as their product.

Each capability declares its part of the machine as a ``Slice`` (``agentfsm.slices``): its facts
and their words, its rules and where they stand in each phase's order, its interrupts, its edges
of a tool call's life, the work its facts skip, its constant facts. ``agentfsm.machine`` composes
the slices, and ``compile_rules`` turns the rules into the flat table the runtime dispatches on:
one ``Transition`` for each way through the rules, guarded by the facts that decide it. Compiling
refuses, with a ``MachineError`` that says how to fix it, a rule that earlier rules shadow, a
phase or choice without its last rule, a way through the rules that no one guard describes, and
an edge into DONE, FAILED or PAUSED that does not say its exit reason, error or pause reason.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from agentfsm._core.phases import TERMINAL_CALL_STATUSES, CallStatus, Phase, Work
from agentfsm.errors import MachineError

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig
    from agentfsm.pauses import PauseReason

#: What a guard reads: the values some facts must have, in the order they are written.
Guard = tuple[tuple[str, bool], ...]
#: Facts that keep one value in every run of a configuration, with that value (see ``Slice.constants``).
ConstantFacts = frozenset[tuple[str, bool]]
#: The order of a phase's (or a choice's) last rule: it has no guard and is taken when no other is.
OTHERWISE: Final = 1_000
#: Each fact of the composed machine in words, for both of its values: edge labels are written from
#: these. Filled by ``agentfsm.machine`` when it composes the slices (it re-exports it).
FACT_WORDS: dict[str, dict[bool, str]] = {}


def when(**facts: bool) -> Guard:
    """A guard: ``when(exit_reached=True, continue_requested=False)``."""
    return tuple(facts.items())


@dataclass(frozen=True, slots=True)
class Fact:
    """Something the guards read about a run at a transition boundary, worked out from its data by ``read``."""

    name: str
    #: The fact in words, when it holds and when it does not: edge labels are written from these.
    holds: str
    fails: str
    read: Callable[[AgentRun], bool]

    def words(self, value: bool) -> str:
        """The fact in words for ``value``."""
        return self.holds if value else self.fails


@dataclass(frozen=True, slots=True)
class Choice:
    """A decision several rules lead to; its own rules (``Rule(source=<its name>, ...)``) say where it goes."""

    name: str
    #: What it decides, as a question (drawn beside it).
    question: str


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """One way out of ``source`` (a phase, or a choice by name): taken when ``when`` holds and no earlier rule does.

    ``order`` places it among the rules of its source, lowest first; the last has ``order=OTHERWISE``
    and no guard. ``dest`` is a phase, or a choice by name. Out of a phase, ``trigger`` names the
    edge; out of a choice it names the way out. An edge through a choice's last way out keeps the
    trigger of the rule that led into the choice; through another, the trigger that rule's
    ``triggers`` names for it (by default ``<trigger>_<way out>``).

    What taking the edge does, beside moving: ``exit_reason`` (into DONE: a ``str.format`` template
    over the exit fields the slices fill in, ``Slice.exit_fields``), ``pause`` (into PAUSED: why the
    run waits), ``error`` (into FAILED: what the failed run raises), and ``effect`` (any change of
    the run's data the edge makes). Along a way through choices, the last rule that says what its
    end needs wins; the effects of every rule on the way are done, in order, but a rule's into a
    choice only on the way out that keeps its own trigger.
    """

    source: Phase | str
    order: int
    trigger: str
    dest: Phase | str
    when: Guard = ()
    #: Into a choice: the trigger of each of its ways out (by name) but its last, which keeps ``trigger``.
    triggers: Mapping[str, str] = field(default_factory=dict)
    exit_reason: str | None = None
    pause: Callable[[AgentRun], PauseReason] | None = None
    error: Callable[[AgentRun], BaseException] | None = None
    effect: Callable[[AgentRun], None] | None = None


@dataclass(frozen=True, slots=True)
class Interrupt:
    """An edge taken from any of ``sources`` to any of ``dests``, not once a phase's work is done.

    Unguarded interrupts are fired by the runtime itself (a breakpoint matches: ``pause``; an error
    escapes: ``fail``; a snapshot is resumed: ``resume``); ``note`` says when. A guarded one
    (``when``) is taken on entering a source phase when its guard holds (``GUARDED_INTERRUPTS``).
    """

    trigger: str
    sources: tuple[Phase, ...]
    dests: tuple[Phase, ...]
    when: Guard = ()
    note: str = ""
    exit_reason: str | None = None
    pause: Callable[[AgentRun], PauseReason] | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """One edge of the compiled table: ``trigger`` moves ``source`` to ``dest`` when the facts in ``when`` have those values.

    ``exit_reason``, ``pause``, ``error`` and ``effect`` are what taking it does (``Rule``); ``rules``
    is the way through the rules it was compiled from (empty for an interrupt); ``note`` says what
    fires an interrupt, which has no guard to describe it.
    """

    trigger: str
    source: Phase
    dest: Phase
    when: Guard = ()
    exit_reason: str | None = None
    interrupt: bool = False
    note: str = ""
    pause: Callable[[AgentRun], PauseReason] | None = None
    error: Callable[[AgentRun], BaseException] | None = None
    effect: Callable[[AgentRun], None] | None = field(default=None, compare=False)
    rules: tuple[Rule, ...] = field(default=(), compare=False, repr=False)

    @property
    def condition(self) -> str:
        """What must hold to take the edge, in words: written from ``when`` (or the interrupt's note)."""
        if not self.when:
            return self.note
        return ", ".join(FACT_WORDS[name][value] for name, value in self.when)

    @property
    def label(self) -> str:
        """``trigger [condition]``, as drawn on diagrams."""
        return f"{self.trigger} [{self.condition}]" if self.condition else self.trigger

    @property
    def guard(self) -> Callable[[Any], bool] | None:
        """``when`` as a predicate over facts (``None``: unguarded)."""
        if not self.when:
            return None
        guard = self.when
        return lambda facts: all(getattr(facts, name) is value for name, value in guard)


@dataclass(frozen=True, slots=True)
class CallTransition:
    """One declared edge of a call: ``trigger`` moves it from ``source`` to ``dest``; ``note`` says when."""

    trigger: str
    source: CallStatus
    dest: CallStatus
    note: str

    @property
    def label(self) -> str:
        """``trigger [note]``, as drawn on diagrams."""
        return f"{self.trigger} [{self.note}]"


@dataclass(frozen=True)
class Slice:
    """One capability's part of the machine, declared in one module of ``agentfsm.slices``.

    ``constants`` says which of its facts keep one value in every run of a configuration (no
    ``usage_limits``: a limit is never reached), from the run's configuration and its starting
    State values (a resumed run's): runs and drawings of such a configuration leave the edges that
    need the other value out, and never read the fact. ``exit_fields`` fill in the exit-reason
    templates that name them (``{usage_limit}``); ``skips`` is work its facts skip (the work
    item, the fact and the value that skips it).
    """

    name: str
    facts: tuple[Fact, ...] = ()
    rules: tuple[Rule, ...] = ()
    choices: tuple[Choice, ...] = ()
    interrupts: tuple[Interrupt, ...] = ()
    call_edges: tuple[CallTransition, ...] = ()
    skips: Mapping[Work, tuple[str, bool]] = field(default_factory=dict)
    exit_fields: Mapping[str, Callable[[AgentRun], object]] = field(default_factory=dict)
    constants: Callable[[RunConfig, Mapping[str, Any]], Iterable[tuple[str, bool]]] | None = None


# -- compiling the rules ----------------------------------------------------------------------------


def check_rules(
    rules: Iterable[Rule], choices: Iterable[Choice], facts: Iterable[str]
) -> dict[Phase | str, list[Rule]]:
    """The rules of each source in order, once each source's list is checked; ``MachineError`` otherwise."""
    known_facts, known_choices = set(facts), {c.name for c in choices}
    by_source: dict[Phase | str, list[Rule]] = {}
    for rule in rules:
        for end in (rule.source, rule.dest):
            if not isinstance(end, Phase) and end not in known_choices:
                raise MachineError(f"Rule {rule.trigger!r} names {end!r}, which is no phase and no declared choice.")
        unknown = [name for name, _ in rule.when if name not in known_facts]
        if unknown:
            raise MachineError(
                f"Rule {rule.trigger!r} out of {_name(rule.source)} reads unknown facts {unknown}; "
                "declare them in a slice's facts."
            )
        by_source.setdefault(rule.source, []).append(rule)
    for source, listed in by_source.items():
        listed.sort(key=operator.attrgetter("order"))
        orders = [r.order for r in listed]
        if len(set(orders)) != len(orders):
            twice = sorted({o for o in orders if orders.count(o) > 1})
            raise MachineError(f"Rules out of {_name(source)} share the order {twice}: give each its own place.")
        *guarded, last = listed
        if last.order != OTHERWISE or last.when:
            raise MachineError(
                f"The last rule out of {_name(source)} must have order=OTHERWISE and no guard (it is taken when "
                f"no other holds); {last.trigger!r} has order {last.order} and guard {dict(last.when)}."
            )
        unguarded = [r.trigger for r in guarded if not r.when]
        if unguarded:
            raise MachineError(
                f"Rules {unguarded} out of {_name(source)} have no guard but are not its last: they would hide "
                "every rule after them. Give each a guard."
            )
    missing = known_choices - set(by_source)
    if missing:
        raise MachineError(f"Choices {sorted(missing)} have no rules: declare where each goes.")
    return by_source


def compile_rules(rules: Iterable[Rule], choices: Iterable[Choice], facts: Iterable[str]) -> tuple[Transition, ...]:
    """The flat table of ``rules``: for each phase, one edge per way through its rules (and the choices they lead to).

    Each edge's guard is the facts that decide it, in the order its phase's rules first read them;
    every combination of them is checked, so an edge holds exactly where the rules choose it.
    """
    by_source = check_rules(rules, choices, facts)
    taken: set[Rule] = set()
    edges: list[Transition] = []
    for phase in (source for source in by_source if isinstance(source, Phase)):
        names = _read_from(phase, by_source)
        ways: dict[tuple[Rule, ...], list[tuple[bool, ...]]] = {}
        for values in itertools.product((False, True), repeat=len(names)):
            way = _walk(phase, dict(zip(names, values, strict=True)), by_source)
            ways.setdefault(way, []).append(values)
        for way, cases in ways.items():
            taken.update(way)
            edges.append(_edge(phase, way, names, cases, by_source))
    shadowed = [r for listed in by_source.values() for r in listed if r not in taken]
    if shadowed:
        rule = shadowed[0]
        raise MachineError(
            f"Rule {rule.trigger!r} out of {_name(rule.source)} is never taken: the rules before it hold wherever "
            f"its guard {dict(rule.when)} does. Move it before them (a lower order), or narrow their guards."
        )
    return tuple(edges)


def _name(source: Phase | str) -> str:
    return source.value if isinstance(source, Phase) else f"choice {source!r}"


def _read_from(source: Phase | str, by_source: Mapping[Phase | str, list[Rule]]) -> list[str]:
    """The facts the rules out of ``source`` read, and those of the choices they lead to, in order of first reading."""
    names: dict[str, None] = {}
    for rule in by_source[source]:
        names.update(dict.fromkeys(name for name, _ in rule.when))
        if not isinstance(rule.dest, Phase):
            names.update(dict.fromkeys(_read_from(rule.dest, by_source)))
    return list(names)


def _walk(
    source: Phase | str, facts: Mapping[str, bool], by_source: Mapping[Phase | str, list[Rule]]
) -> tuple[Rule, ...]:
    """The rules taken from ``source`` for these facts: the first that holds, and on through the choices it leads to."""
    rule = next(r for r in by_source[source] if all(facts[name] is value for name, value in r.when))
    return (rule,) if isinstance(rule.dest, Phase) else (rule, *_walk(rule.dest, facts, by_source))


def _edge(
    phase: Phase,
    way: tuple[Rule, ...],
    names: list[str],
    cases: list[tuple[bool, ...]],
    by_source: Mapping[Phase | str, list[Rule]],
) -> Transition:
    """The one edge for a way through the rules, taken in ``cases`` (values of ``names``)."""
    first, *through = way
    trigger = first.trigger
    own = not through or through[0].order == OTHERWISE
    if not own:  # out of the choice another way than its last: the trigger the rule names for it
        out = through[0].trigger
        trigger = first.triggers.get(out, f"{first.trigger}_{out}")
    guard = tuple((name, cases[0][i]) for i, name in enumerate(names) if len({case[i] for case in cases}) == 1)
    if len(cases) != 2 ** (len(names) - len(guard)):
        raise MachineError(
            f"The way {[r.trigger for r in way]} out of {phase.value} is taken in cases no single guard describes "
            f"(facts {names}); split the rule so that each way is decided by one set of fact values."
        )
    dest = way[-1].dest
    assert isinstance(dest, Phase)
    # What the edge does where it ends: an exit reason into DONE, an error into FAILED, a pause reason into PAUSED.
    needs = {Phase.DONE: "exit_reason", Phase.FAILED: "error", Phase.PAUSED: "pause"}.get(dest)
    said = [getattr(r, needs) for r in way if getattr(r, needs) is not None] if needs else []
    if needs is not None and not said:
        raise MachineError(
            f"The edge {phase.value} --{trigger}--> {dest.value} does not say its {needs}: give one of the rules "
            f"{[r.trigger for r in way]} a {needs}=."
        )
    effects = [r.effect for r in way[1:] if r.effect is not None]
    if own and first.effect is not None:
        effects.insert(0, first.effect)
    return Transition(
        trigger,
        phase,
        dest,
        guard,
        said[-1] if needs == "exit_reason" else None,
        pause=said[-1] if needs == "pause" else None,
        error=said[-1] if needs == "error" else None,
        effect=_in_order(effects),
        rules=way,
    )


def _in_order(effects: list[Callable[[AgentRun], None]]) -> Callable[[AgentRun], None] | None:
    """One effect doing ``effects`` in order (``None`` for none)."""
    if len(effects) < 2:
        return effects[0] if effects else None

    def both(run: AgentRun) -> None:
        for effect in effects:
            effect(run)

    return both


def compile_interrupts(interrupts: Iterable[Interrupt]) -> tuple[Transition, ...]:
    """The edges of ``interrupts``: one per source and destination."""
    return tuple(
        Transition(i.trigger, source, dest, i.when, i.exit_reason, interrupt=True, note=i.note, pause=i.pause)
        for i in interrupts
        for source in i.sources
        for dest in i.dests
    )


def specialise_rules(rules: Iterable[Rule], constants: ConstantFacts) -> list[Rule]:
    """The rules of runs in which the facts of ``constants`` keep their values: a drawing's rules.

    A rule that needs a constant to have the other value is left out, and so is one the rules
    before it now shadow; the others keep guards on the facts that can change only (the first that
    always holds becomes its source's last). A choice left with its last rule only is passed
    through: rules into it go where that rule goes.
    """
    values = dict(constants)
    by_source: dict[Phase | str, list[Rule]] = {}
    for rule in sorted(rules, key=operator.attrgetter("order")):
        if not all(values.get(name, value) is value for name, value in rule.when):
            continue
        listed = by_source.setdefault(rule.source, [])
        if listed and listed[-1].order == OTHERWISE:
            continue  # after the last rule
        kept = replace(rule, when=tuple((n, v) for n, v in rule.when if n not in values))
        listed.append(kept if kept.when else replace(kept, order=OTHERWISE))
    taken: set[Rule] = set()
    for phase in (source for source in by_source if isinstance(source, Phase)):
        names = _read_from(phase, by_source)
        for facts in itertools.product((False, True), repeat=len(names)):
            taken.update(_walk(phase, dict(zip(names, facts, strict=True)), by_source))
    for source, listed in by_source.items():
        by_source[source] = [r for r in listed if r in taken]
    passed = {
        source: listed[0] for source, listed in by_source.items() if not isinstance(source, Phase) and len(listed) == 1
    }
    kept_rules: list[Rule] = []
    for listed in by_source.values():
        for rule in listed:
            if rule.source in passed:
                continue
            kept = rule
            while not isinstance(kept.dest, Phase) and kept.dest in passed:
                through = passed[kept.dest]
                kept = replace(
                    kept,
                    dest=through.dest,
                    exit_reason=through.exit_reason or kept.exit_reason,
                    error=through.error or kept.error,
                )
            kept_rules.append(kept)
    return kept_rules


# -- the compiled tables, as lookups -------------------------------------------------------------------


class Dispatch:
    """A table of ``Transition`` compiled into dictionaries for the runtime.

    For each phase with guarded edges: the facts its guards read (one ``operator.attrgetter``) and a
    dictionary from each combination of their values to the edge that holds; for a phase with one
    unguarded way out, that edge. Building it checks that exactly one edge holds for every
    combination.
    """

    __slots__ = ("_allowed", "_guarded", "_unguarded")

    def __init__(self, transitions: Iterable[Transition]) -> None:
        """Compile ``transitions`` (the machine's, or a table ``specialise`` made for a configuration)."""
        known = tuple(FACT_WORDS)
        by_source: dict[Phase, list[Transition]] = {}
        allowed: dict[tuple[Phase, str], set[Phase]] = {}
        for t in transitions:
            allowed.setdefault((t.source, t.trigger), set()).add(t.dest)
            if not t.interrupt:
                by_source.setdefault(t.source, []).append(t)
        self._allowed = {key: frozenset(dests) for key, dests in allowed.items()}
        #: Phases with one unguarded way out, and that edge.
        self._unguarded: dict[Phase, Transition] = {}
        #: Phases with guarded edges: the facts to read, and the edge for each combination of their values.
        self._guarded: dict[Phase, tuple[Callable[[object], Any], dict[Any, Transition]]] = {}
        for source, edges in by_source.items():
            if len(edges) == 1 and not edges[0].when:
                self._unguarded[source] = edges[0]
            else:
                self._guarded[source] = _decision_table(source, edges, known)

    def next(self, phase: Phase, facts: object) -> Transition:
        """The one non-interrupt edge out of ``phase`` whose guard holds for ``facts``.

        ``facts`` is a ``Facts`` value or anything with the same attributes, such as a run that works
        each fact out when it is read: only the facts the phase's guards read are read.
        """
        edge = self._unguarded.get(phase)
        if edge is not None:
            return edge
        try:
            read, table = self._guarded[phase]
        except KeyError:
            raise MachineError(f"No declared transition leaves {phase.value}.") from None
        return table[read(facts)]

    def check(self, source: Phase, trigger: str, dest: Phase) -> None:
        """Raise ``MachineError`` unless ``source --trigger--> dest`` is declared."""
        if dest not in self._allowed.get((source, trigger), ()):
            raise MachineError(
                f"Undeclared transition {source.value} --{trigger}--> {dest.value}; "
                "every edge is declared by a rule of a slice (agentfsm/slices/), compiled into agentfsm.machine.TRANSITIONS."
            )


def _decision_table(
    source: Phase, edges: list[Transition], known: tuple[str, ...]
) -> tuple[Callable[[object], Any], dict[Any, Transition]]:
    """The facts ``edges`` read and, for each combination of their values, the one edge that holds."""
    names = sorted({name for t in edges for name, _ in t.when})
    unknown = set(names) - set(known)
    if unknown:
        raise MachineError(f"Guards out of {source.value} read unknown facts {sorted(unknown)}; facts: {known}.")
    table: dict[Any, Transition] = {}
    for values in itertools.product((False, True), repeat=len(names)):
        facts = dict(zip(names, values, strict=True))
        holding = [t for t in edges if all(facts[name] is value for name, value in t.when)]
        if len(holding) != 1:
            raise MachineError(
                f"Out of {source.value} with facts {facts}, {len(holding)} edges hold "
                f"({[t.trigger for t in holding]}); the guards must hold for exactly one."
            )
        table[values if len(names) > 1 else values[0]] = holding[0]
    return operator.attrgetter(*names), table


class CallDispatch:
    """A table of ``CallTransition`` as a lookup from (status, trigger) to the status it leads to.

    Building it checks the table: each (status, trigger) names one edge, every status is reached
    from ``PROPOSED``, and every status but the terminal ones has a way out.
    """

    __slots__ = ("_next", "moves")

    def __init__(self, transitions: Iterable[CallTransition]) -> None:
        """Compile and check ``transitions``."""
        self._next: dict[tuple[CallStatus, str], CallStatus] = {}
        for t in transitions:
            if (t.source, t.trigger) in self._next:
                raise MachineError(
                    f"Two call edges leave {t.source.value} on {t.trigger!r}; give each its own trigger."
                )
            if t.source in TERMINAL_CALL_STATUSES:
                raise MachineError(
                    f"Call edge {t.trigger!r} leaves {t.source.value}, a terminal status; "
                    "drop it or take the status out of TERMINAL_CALL_STATUSES."
                )
            self._next[(t.source, t.trigger)] = t.dest
        reached, frontier = {CallStatus.PROPOSED}, [CallStatus.PROPOSED]
        while frontier:
            source = frontier.pop()
            for (s, _), dest in self._next.items():
                if s is source and dest not in reached:
                    reached.add(dest)
                    frontier.append(dest)
        if set(CallStatus) - reached:
            raise MachineError(
                f"Call statuses {sorted(set(CallStatus) - reached)} are never reached from proposed; "
                "declare an edge into them in a slice's call_edges."
            )
        stuck = set(CallStatus) - TERMINAL_CALL_STATUSES - {s for s, _ in self._next}
        if stuck:
            raise MachineError(
                f"Call statuses {sorted(stuck)} have no way out; declare one in a slice's call_edges "
                "or list them in TERMINAL_CALL_STATUSES."
            )

        #: The table as a mapping, for the runtime's lookups: (status, trigger) -> the status it leads to.
        self.moves: Mapping[tuple[CallStatus, str], CallStatus] = MappingProxyType(self._next)

    def next(self, status: CallStatus, trigger: str) -> CallStatus:
        """Where ``trigger`` moves a call in ``status``; ``MachineError`` when no such edge is declared."""
        try:
            return self._next[(status, trigger)]
        except KeyError:
            raise MachineError(
                f"Undeclared call transition {status.value} --{trigger}-->; "
                "every change of a call's status is declared in a slice's call_edges (agentfsm.machine.CALL_TRANSITIONS)."
            ) from None
