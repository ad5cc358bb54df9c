"""The agent loop as a declared finite-state machine.

Two rules, after h11's ``_state.py``:

1. Everything that decides *what happens next* lives in this file, as data: ``TRANSITIONS``.
2. Everything else reads that data. The runtime takes edges through ``Dispatch`` (compiled from
   ``TRANSITIONS``), ``build_machine`` builds the same table as a ``transitions.Machine`` (the
   reference implementation the tests compare ``Dispatch`` against), diagrams and snapshot
   validation read the table, and a test checks that every edge is taken.

An edge is *guarded* when its source has more than one way out: its guard is data, the values some
``Facts`` must have (``when``). ``Dispatch`` compiles the guards of each phase into a table from
every combination of those facts to the one edge that holds, and refuses a table where some
combination has no edge or several. The runtime asks ``Dispatch.next`` which edge to take. ``pause``, ``fail`` and
``resume`` are *interrupts*: the runtime fires them itself when a breakpoint matches, an error
escapes, or a snapshot is resumed; they are declared here all the same, so that an undeclared
pause (say, from IDLE) is refused.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from agentfsm.errors import MachineError


class Phase(StrEnum):
    """The states of an agent run."""

    IDLE = "IDLE"
    LLM_CALL = "LLM_CALL"
    TOOL_PENDING = "TOOL_PENDING"
    CONFIRM = "CONFIRM"
    TOOL_RUN = "TOOL_RUN"
    EXIT_CHECK = "EXIT_CHECK"
    DONE = "DONE"
    PAUSED = "PAUSED"
    FAILED = "FAILED"


#: Phases in which work happens; a run can pause or fail from any of them.
ACTIVE_PHASES: tuple[Phase, ...] = (
    Phase.LLM_CALL,
    Phase.TOOL_PENDING,
    Phase.CONFIRM,
    Phase.TOOL_RUN,
    Phase.EXIT_CHECK,
)
TERMINAL_PHASES: frozenset[Phase] = frozenset({Phase.DONE, Phase.FAILED})


class Facts(Protocol):
    """What the guards may look at: read-only facts about the run at a transition boundary."""

    @property
    def has_tool_calls(self) -> bool:
        """The last model reply asked for at least one tool call (and the run has tools)."""
        ...

    @property
    def needs_confirmation(self) -> bool:
        """A confirmation strategy covers at least one pending tool call."""
        ...

    @property
    def strategy_paused(self) -> bool:
        """A confirmation strategy asked to pause the run for an out-of-band decision."""
        ...

    @property
    def exit_reached(self) -> bool:
        """An exit condition is met."""
        ...

    @property
    def steps_left(self) -> bool:
        """Fewer than ``max_agent_steps`` model calls have been made."""
        ...


#: The names of the facts a guard may read.
FACT_NAMES: tuple[str, ...] = ("has_tool_calls", "needs_confirmation", "strategy_paused", "exit_reached", "steps_left")

Guard = Callable[[Facts], bool]


@dataclass(frozen=True, slots=True)
class Transition:
    """One declared edge: ``trigger`` moves ``source`` to ``dest`` when the facts in ``when`` have those values."""

    trigger: str
    source: Phase
    dest: Phase
    condition: str = ""
    when: tuple[tuple[str, bool], ...] = ()
    interrupt: bool = False

    @property
    def label(self) -> str:
        """``trigger [condition]``, as drawn on diagrams."""
        return f"{self.trigger} [{self.condition}]" if self.condition else self.trigger

    @property
    def guard(self) -> Guard | None:
        """``when`` as a predicate over ``Facts`` (``None``: unguarded)."""
        if not self.when:
            return None
        when = self.when
        return lambda facts: all(bool(getattr(facts, name)) is value for name, value in when)


def _edge(trigger: str, source: Phase, dest: Phase, condition: str = "", **when: bool) -> Transition:
    return Transition(trigger, source, dest, condition, tuple(when.items()))


def _interrupts(trigger: str, dest: Phase, condition: str) -> list[Transition]:
    return [Transition(trigger, source, dest, condition, interrupt=True) for source in ACTIVE_PHASES]


P = Phase

#: The whole control flow of an agent run. Order matters only for readability: the guards of the
#: edges leaving one phase are mutually exclusive and cover every case (``Dispatch`` checks it).
TRANSITIONS: tuple[Transition, ...] = (
    _edge("start", P.IDLE, P.LLM_CALL),
    _edge("tool_calls", P.LLM_CALL, P.TOOL_PENDING, "reply has tool calls", has_tool_calls=True),
    _edge("text_reply", P.LLM_CALL, P.EXIT_CHECK, "no tool calls to run", has_tool_calls=False),
    _edge("confirm", P.TOOL_PENDING, P.CONFIRM, "a strategy covers a call", needs_confirmation=True),
    _edge("run_tools", P.TOOL_PENDING, P.TOOL_RUN, "no strategy applies", needs_confirmation=False),
    _edge("decided", P.CONFIRM, P.TOOL_RUN, "decisions made", strategy_paused=False),
    _edge("hitl_pause", P.CONFIRM, P.PAUSED, "strategy pauses", strategy_paused=True),
    _edge("tools_done", P.TOOL_RUN, P.EXIT_CHECK),
    _edge("exit", P.EXIT_CHECK, P.DONE, "exit condition met", exit_reached=True),
    _edge("max_steps", P.EXIT_CHECK, P.DONE, "max_agent_steps reached", exit_reached=False, steps_left=False),
    _edge("continue", P.EXIT_CHECK, P.LLM_CALL, "not met, steps left", exit_reached=False, steps_left=True),
    *_interrupts("pause", P.PAUSED, "breakpoint matches"),
    *[Transition("resume", P.PAUSED, dest, "phase recorded in snapshot", interrupt=True) for dest in ACTIVE_PHASES],
    *_interrupts("fail", P.FAILED, "unhandled error"),
)


class Dispatch:
    """The transition table compiled into dictionaries for the runtime's hot path.

    For each phase with guarded edges: the facts its guards read (one ``operator.attrgetter``) and a
    dictionary from each combination of their values to the edge that holds; for a phase with one
    unguarded way out, that edge. Building it checks that exactly one edge holds for every
    combination.
    """

    __slots__ = ("_allowed", "_decisions")

    def __init__(self, transitions: Iterable[Transition]) -> None:
        by_source: dict[Phase, list[Transition]] = {}
        allowed: dict[tuple[Phase, str], set[Phase]] = {}
        for t in transitions:
            allowed.setdefault((t.source, t.trigger), set()).add(t.dest)
            if not t.interrupt:
                by_source.setdefault(t.source, []).append(t)
        self._allowed = {key: frozenset(dests) for key, dests in allowed.items()}
        #: Per phase: the facts to read and the edge for each combination of their values, or
        #: ``None`` and the phase's one unguarded edge (a single lookup per decision either way).
        self._decisions: dict[Phase, tuple[Callable[[Any], Any] | None, Any]] = {}
        for source, edges in by_source.items():
            if len(edges) == 1 and not edges[0].when:
                self._decisions[source] = (None, edges[0])
            else:
                self._decisions[source] = _decision_table(source, edges)

    def next(self, phase: Phase, facts: Facts) -> Transition:
        """The one non-interrupt edge out of ``phase`` whose guard holds for ``facts``."""
        try:
            read, edges = self._decisions[phase]
        except KeyError:
            raise MachineError(f"No declared transition leaves {phase.value}.") from None
        edge: Transition  # ``edges`` is a Transition or a dict of them, as ``read`` says
        if read is None:
            edge = edges
            return edge
        values = read(facts)
        try:
            edge = edges[values]
        except (KeyError, TypeError):  # facts that are truthy or falsy but not bools
            edge = edges[tuple(map(bool, values)) if type(values) is tuple else bool(values)]
        return edge

    def check(self, source: Phase, trigger: str, dest: Phase) -> None:
        """Raise ``MachineError`` unless ``source --trigger--> dest`` is declared."""
        if dest not in self._allowed.get((source, trigger), ()):
            raise MachineError(
                f"Undeclared transition {source.value} --{trigger}--> {dest.value}; "
                "every edge must be declared in agentfsm.machine.TRANSITIONS."
            )


def _decision_table(source: Phase, edges: list[Transition]) -> tuple[Callable[[Any], Any], dict[Any, Transition]]:
    """The facts ``edges`` read and, for each combination of their values, the one edge that holds."""
    names = sorted({name for t in edges for name, _ in t.when})
    unknown = set(names) - set(FACT_NAMES)
    if unknown:
        raise MachineError(f"Guards out of {source.value} read unknown facts {sorted(unknown)}; facts: {FACT_NAMES}.")
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


DISPATCH = Dispatch(TRANSITIONS)


def build_machine(model: Any, initial: Phase = Phase.IDLE) -> Any:
    """Build the table as a ``transitions.Machine`` on ``model``.

    Guards read the facts passed to the trigger: ``model.trigger("tool_calls", facts=run)``; a
    resume names its destination: ``model.trigger("resume", to=Phase.TOOL_RUN)``. Auto transitions
    are off, so only declared edges exist.
    """
    from transitions import Machine

    def guarded(guard: Guard) -> Callable[..., bool]:
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
