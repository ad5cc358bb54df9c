"""The agent loop as a declared finite-state machine.

Two rules, after h11's ``_state.py``:

1. Everything that decides *what happens next* lives in this file, as data: ``TRANSITIONS``.
2. Everything else reads that data. The runtime takes edges through ``Dispatch`` (compiled from
   ``TRANSITIONS``), ``build_machine`` builds the same table as a ``transitions.Machine`` (the
   reference implementation the tests compare ``Dispatch`` against), diagrams and snapshot
   validation read the table, and a test checks that every edge is taken.

An edge is *guarded* when its source has more than one way out: the runtime asks ``Dispatch.next``
which edge to take, and the guards (functions of ``Facts``) answer. ``pause``, ``fail`` and
``resume`` are *interrupts*: the runtime fires them itself when a breakpoint matches, an error
escapes, or a snapshot is resumed; they are declared here all the same, so that an undeclared
pause (say, from IDLE) is refused.
"""

from __future__ import annotations

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


Guard = Callable[[Facts], bool]


@dataclass(frozen=True, slots=True)
class Transition:
    """One declared edge: ``trigger`` moves ``source`` to ``dest`` when ``guard`` holds."""

    trigger: str
    source: Phase
    dest: Phase
    condition: str = ""
    guard: Guard | None = None
    interrupt: bool = False

    @property
    def label(self) -> str:
        """``trigger [condition]``, as drawn on diagrams."""
        return f"{self.trigger} [{self.condition}]" if self.condition else self.trigger


def _edge(trigger: str, source: Phase, dest: Phase, condition: str = "", guard: Guard | None = None) -> Transition:
    return Transition(trigger, source, dest, condition, guard)


def _interrupts(trigger: str, dest: Phase, condition: str) -> list[Transition]:
    return [Transition(trigger, source, dest, condition, interrupt=True) for source in ACTIVE_PHASES]


P = Phase

#: The whole control flow of an agent run. Order matters only for readability: the guards of the
#: edges leaving one phase are mutually exclusive (a test checks it for every combination of facts).
TRANSITIONS: tuple[Transition, ...] = (
    _edge("start", P.IDLE, P.LLM_CALL),
    _edge("tool_calls", P.LLM_CALL, P.TOOL_PENDING, "reply has tool calls", lambda f: f.has_tool_calls),
    _edge("text_reply", P.LLM_CALL, P.EXIT_CHECK, "no tool calls to run", lambda f: not f.has_tool_calls),
    _edge("confirm", P.TOOL_PENDING, P.CONFIRM, "a strategy covers a call", lambda f: f.needs_confirmation),
    _edge("run_tools", P.TOOL_PENDING, P.TOOL_RUN, "no strategy applies", lambda f: not f.needs_confirmation),
    _edge("decided", P.CONFIRM, P.TOOL_RUN, "decisions made", lambda f: not f.strategy_paused),
    _edge("hitl_pause", P.CONFIRM, P.PAUSED, "strategy pauses", lambda f: f.strategy_paused),
    _edge("tools_done", P.TOOL_RUN, P.EXIT_CHECK),
    _edge("exit", P.EXIT_CHECK, P.DONE, "exit condition met", lambda f: f.exit_reached),
    _edge(
        "max_steps",
        P.EXIT_CHECK,
        P.DONE,
        "max_agent_steps reached",
        lambda f: not f.exit_reached and not f.steps_left,
    ),
    _edge(
        "continue",
        P.EXIT_CHECK,
        P.LLM_CALL,
        "not met, steps left",
        lambda f: not f.exit_reached and f.steps_left,
    ),
    *_interrupts("pause", P.PAUSED, "breakpoint matches"),
    *[Transition("resume", P.PAUSED, dest, "phase recorded in snapshot", interrupt=True) for dest in ACTIVE_PHASES],
    *_interrupts("fail", P.FAILED, "unhandled error"),
)


class Dispatch:
    """The transition table compiled into dictionaries for the runtime's hot path."""

    __slots__ = ("_allowed", "_guarded", "_only")

    def __init__(self, transitions: Iterable[Transition]) -> None:
        by_source: dict[Phase, list[Transition]] = {}
        allowed: dict[tuple[Phase, str], set[Phase]] = {}
        for t in transitions:
            allowed.setdefault((t.source, t.trigger), set()).add(t.dest)
            if not t.interrupt:
                by_source.setdefault(t.source, []).append(t)
        self._guarded = {source: tuple(edges) for source, edges in by_source.items()}
        #: Phases with a single, unguarded way out: no guard to ask.
        self._only = {
            source: edges[0] for source, edges in self._guarded.items() if len(edges) == 1 and edges[0].guard is None
        }
        self._allowed = {key: frozenset(dests) for key, dests in allowed.items()}

    def next(self, phase: Phase, facts: Facts) -> Transition:
        """The one non-interrupt edge out of ``phase`` whose guard holds for ``facts``."""
        only = self._only.get(phase)
        if only is not None:
            return only
        for t in self._guarded.get(phase, ()):
            if t.guard is None or t.guard(facts):
                return t
        raise MachineError(f"No declared transition leaves {phase.value} for these facts; the table is incomplete.")

    def check(self, source: Phase, trigger: str, dest: Phase) -> None:
        """Raise ``MachineError`` unless ``source --trigger--> dest`` is declared."""
        if dest not in self._allowed.get((source, trigger), ()):
            raise MachineError(
                f"Undeclared transition {source.value} --{trigger}--> {dest.value}; "
                "every edge must be declared in agentfsm.machine.TRANSITIONS."
            )


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
