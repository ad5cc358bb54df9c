"""The agent loop as a declared finite-state machine.

Two rules, after h11's ``_state.py``:

1. Everything that decides *what happens next* lives in this file, as data: the phases, the work
   each phase does (``PHASE_WORK``), the edges between phases (``TRANSITIONS``), the facts their
   guards read (``Facts``), the sets of phases the rest of the library treats alike, and, beside
   the phase table, the life of each pending tool call (``CallStatus`` and ``CALL_TRANSITIONS``).
2. Everything else reads that data. The runtime takes edges through ``Dispatch`` (compiled from
   ``TRANSITIONS``, or from ``specialise``'s table for a run's configuration), ``build_machine``
   builds the same table as a ``transitions.Machine`` (the reference implementation the tests
   compare ``Dispatch`` against), diagrams draw both tables (the agent's drawing from the same
   ``specialise``), snapshot validation and the stores read the phase sets, and tests check that
   every edge of both tables is taken.

An edge is *guarded* when its source has more than one way out: its guard is data, the values some
``Facts`` must have (``when``), and its label on a diagram is written from those values. ``Dispatch``
compiles the guards of each phase into a table from every combination of those facts to the one
edge that holds, and refuses a table where some combination has no edge or several. ``pause``,
``fail``, ``resume`` and ``cancel`` are *interrupts*, taken from any active phase rather than once
its work is done: the runtime fires the first three itself when a breakpoint matches, an error
escapes, or a snapshot is resumed; they are declared here all the same, so that an undeclared
pause (say, from IDLE) is refused. ``cancel`` and LLM_CALL's ``usage_limit`` are *guarded*
interrupts (``GUARDED_INTERRUPTS``): the runtime takes one on entering its source phase when its
guard holds (``cancel_requested``; ``usage_limit_reached``). Calls in doubt after a crash are a fact
(``calls_in_doubt``) with its own edge (``in_doubt``, TOOL_RUN to PAUSED), not an interrupt.

A call moves by trigger: ``CALL_TRANSITIONS`` names, for each status, one edge per trigger (from
``proposed``, through ``undecided`` and a decision, to ``done``, ``failed``, ``rejected``, or in doubt
after a crash), and ``CallDispatch`` refuses, when it is built, a table with a duplicate edge, a
status it never reaches, or a status other than the terminal ones without a way out.
``AgentRun.move_call`` is the one way a run changes a call's status.
"""

from __future__ import annotations

import functools
import itertools
import operator
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, NamedTuple

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


# The phases by name, as module constants (as h11 names its states), for the modules that read them
# at every step: on Python 3.11 reading a member off its enum class (``Phase.PAUSED``) is a slow
# lookup, ~45 ns against ~4 for a constant (``EnumType.__getattr__`` keeps the interpreter from
# caching it; Python 3.12 dropped it), and a step of a run reads a few dozen phases and call statuses.
IDLE: Final = Phase.IDLE
LLM_CALL: Final = Phase.LLM_CALL
TOOL_PENDING: Final = Phase.TOOL_PENDING
CONFIRM: Final = Phase.CONFIRM
TOOL_RUN: Final = Phase.TOOL_RUN
EXIT_CHECK: Final = Phase.EXIT_CHECK
DONE: Final = Phase.DONE
PAUSED: Final = Phase.PAUSED
FAILED: Final = Phase.FAILED

#: Phases in which work happens; a run can pause or fail from any of them.
ACTIVE_PHASES: tuple[Phase, ...] = (
    Phase.LLM_CALL,
    Phase.TOOL_PENDING,
    Phase.CONFIRM,
    Phase.TOOL_RUN,
    Phase.EXIT_CHECK,
)
#: Phases a run never leaves.
TERMINAL_PHASES: frozenset[Phase] = frozenset({Phase.DONE, Phase.FAILED})
#: Phases a run cannot fail from: nothing of the run's own is under way there.
CANNOT_FAIL: frozenset[Phase] = frozenset({Phase.IDLE, Phase.PAUSED, *TERMINAL_PHASES})
#: Phases that work on checked calls: a run resumed into one checks its pending calls again first.
PREPARED_PHASES: frozenset[Phase] = frozenset({Phase.CONFIRM, Phase.TOOL_RUN})
#: Entering these starts work whose results must be neither lost nor repeated (tool calls, human
#: decisions): a durable store commits every snapshot recorded before it.
COMMIT_ON_ENTRY: frozenset[Phase] = frozenset({Phase.CONFIRM, Phase.TOOL_RUN})


class Work(StrEnum):
    """One item of a phase's work, done in the order ``PHASE_WORK`` lists them.

    The hook points (``HOOK_POINTS``) are items too: there, the driver runs the hooks configured
    for the point (none configured: nothing to do).
    """

    BEFORE_RUN = "before_run"
    BEFORE_LLM = "before_llm"
    CALL_MODEL = "call_model"
    AFTER_LLM = "after_llm"
    BEFORE_TOOL = "before_tool"
    PREPARE_CALLS = "prepare_calls"
    #: The confirmation strategies decide the calls they cover (a blocking one asks now; a
    #: breakpoint one leaves the call undecided, and the run pauses for the decision).
    DECIDE = "decide"
    RUN_TOOLS = "run_tools"
    AFTER_TOOL = "after_tool"
    #: Each exit attempt starts without a request to continue: only its own ``on_exit`` hooks can make one.
    CLEAR_CONTINUE = "clear_continue_run"
    ON_EXIT = "on_exit"
    #: The model repeats itself (``loop_detected``): the ``on_loop`` hooks, then ``LoopDetection``'s consequence.
    ON_LOOP = "on_loop"
    AFTER_RUN = "after_run"
    ON_ERROR = "on_error"
    #: Hand the caller the result (the last work of a finished run: it is never done).
    FINISH = "finish"
    #: Hand the caller the snapshot (the last work of a paused run: it is never done).
    REPORT_PAUSE = "report_pause"
    #: Hand the caller the error that failed the run (the last work of a failed run: it is never done).
    RAISE_ERROR = "raise_error"


#: Where user hooks run: ``Agent(hooks={"before_llm": [...], ...})`` takes these names.
HOOK_POINTS: tuple[Work, ...] = (
    Work.BEFORE_RUN,
    Work.BEFORE_LLM,
    Work.AFTER_LLM,
    Work.BEFORE_TOOL,
    Work.AFTER_TOOL,
    Work.ON_EXIT,
    Work.AFTER_RUN,
    Work.ON_ERROR,
    Work.ON_LOOP,
)

#: What each phase does before its way out is chosen. A run's ``stage`` is the index of the next
#: item of its phase: where the phase's work stands, kept in snapshots. Phases not listed do nothing.
#: The hook points sit where they fire: ``before_run`` before the ``start`` edge, ``before_llm`` /
#: ``after_llm`` around the model call, ``before_tool`` before the calls are checked (so what is
#: confirmed and run is what the hooks left), ``after_tool`` once the step's results are in,
#: ``on_exit`` when an exit condition is met (the exit is read again after it), ``on_loop`` when the
#: model repeats itself, ``after_run`` on entering DONE, ``on_error`` on entering FAILED.
PHASE_WORK: dict[Phase, tuple[Work, ...]] = {
    Phase.IDLE: (Work.BEFORE_RUN,),
    Phase.LLM_CALL: (Work.BEFORE_LLM, Work.CALL_MODEL, Work.AFTER_LLM),
    Phase.TOOL_PENDING: (Work.BEFORE_TOOL, Work.PREPARE_CALLS),
    Phase.CONFIRM: (Work.DECIDE,),
    Phase.TOOL_RUN: (Work.RUN_TOOLS, Work.AFTER_TOOL),
    Phase.EXIT_CHECK: (Work.CLEAR_CONTINUE, Work.ON_EXIT, Work.ON_LOOP),
    Phase.DONE: (Work.AFTER_RUN, Work.FINISH),
    Phase.PAUSED: (Work.REPORT_PAUSE,),
    Phase.FAILED: (Work.ON_ERROR, Work.RAISE_ERROR),
}

#: Work that is skipped when a fact has the given value: no model call (and so no ``after_llm``)
#: once a hook asked to stop, no ``on_exit`` hooks unless an exit condition is met, and no
#: ``on_loop`` hooks unless the model repeats itself. (A hook
#: point without hooks in a run is skipped too: see ``work_plan``.)
SKIP_WORK: dict[Work, tuple[str, bool]] = {
    Work.CALL_MODEL: ("stop_requested", True),
    Work.RUN_TOOLS: ("calls_in_doubt", True),
    Work.AFTER_TOOL: ("calls_in_doubt", True),
    Work.AFTER_LLM: ("stop_requested", True),
    Work.CLEAR_CONTINUE: ("continue_requested", False),
    Work.ON_EXIT: ("exit_reached", False),
    Work.ON_LOOP: ("loop_detected", False),
}

#: Facts that keep one value in a run, with that value: a run that nothing can write ``stop_run`` or
#: ``continue_run`` into (no hooks, no tool mapping them) never asks to stop or continue, and a
#: run without confirmation strategies never confirms. Runs of each configuration get a work plan
#: and a ``Dispatch`` where such facts are constants: they are never worked out.
ConstantFacts = frozenset[tuple[str, bool]]


#: One entry of a work plan: the item's position in its phase's work, the item, and the fact that
#: skips it with the value that does (``None``: it is never skipped).
PlannedWork = tuple[int, Work, tuple[str, bool] | None]
#: A run's work plan: per phase, for each stage, the next item with something to do.
WorkPlan = dict[Phase, tuple[PlannedWork | None, ...]]


@functools.cache
def work_plan(hooked: frozenset[Work], constants: ConstantFacts = frozenset()) -> WorkPlan:
    """For each phase and each stage of it, the next work item with something to do.

    ``hooked`` are the hook points that have hooks in a run; the others are left out of the plan
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
            skip = SKIP_WORK.get(item)
            if skip is not None and skip[0] in values:
                if values[skip[0]] is skip[1]:
                    continue  # always skipped
                skip = None  # never skipped
            if item not in HOOK_POINTS or item in hooked:
                todo.append((i, item, skip))
        plan[phase] = tuple(next((w for w in todo if w[0] >= stage), None) for stage in range(len(items) + 1))
    return plan


class Facts(NamedTuple):
    """What the guards read: facts about the run at a transition boundary, computed from its data."""

    #: The last model reply asked for at least one tool call, and the run has tools.
    has_tool_calls: bool = False
    #: A confirmation strategy must decide at least one pending call.
    needs_confirmation: bool = False
    #: A pending call is still undecided after the strategies ran: the decision comes later.
    strategy_paused: bool = False
    #: An exit condition is met.
    exit_reached: bool = False
    #: Fewer than ``max_agent_steps`` model calls have been made.
    steps_left: bool = False
    #: ``max_agent_steps`` is above 0, so a run may call the model at all (a configuration's constant).
    model_calls_allowed: bool = False
    #: ``stop_run`` was set (by a hook, or a tool through ``outputs_to_state``), and no tool call waits for its result.
    stop_requested: bool = False
    #: ``continue_run`` was set (by a hook, or a tool through ``outputs_to_state``): the run goes on
    #: although an exit condition is met.
    continue_requested: bool = False
    #: A pending call started before a crash and its result was never recorded (``CallStatus.UNKNOWN``).
    calls_in_doubt: bool = False
    #: A limit of the run's ``UsageLimits`` is reached (requests, tool calls, tokens, cost, wall clock).
    usage_limit_reached: bool = False
    #: The run was cancelled from outside (``RunHandle.cancel()``, or the task of ``run_async``).
    cancel_requested: bool = False
    #: The model repeats itself: its last tool calls are the same call with the same result (``LoopDetection``).
    loop_detected: bool = False
    #: The run ends on an answer (a text reply, or a call of the final-answer tool) that does not fit ``output_type``.
    output_invalid: bool = False
    #: The model was sent back with an answer that did not fit fewer than ``output_retries`` times.
    output_retries_left: bool = False


#: The names of the facts a guard may read.
FACT_NAMES: tuple[str, ...] = Facts._fields

#: Each fact in words, for both of its values: the edge labels on diagrams are written from these.
FACT_WORDS: dict[str, dict[bool, str]] = {
    "has_tool_calls": {True: "reply has tool calls", False: "no tool calls to run"},
    "needs_confirmation": {True: "a strategy covers a call", False: "no strategy applies"},
    "strategy_paused": {True: "a decision is deferred", False: "every call decided"},
    "exit_reached": {True: "exit condition met", False: "no exit condition met"},
    "steps_left": {True: "steps left", False: "max_agent_steps reached"},
    "model_calls_allowed": {True: "max_agent_steps above 0", False: "max_agent_steps is 0"},
    "stop_requested": {True: "stop_run was set", False: "no stop asked"},
    "continue_requested": {True: "continue_run was set", False: "no continue asked"},
    "calls_in_doubt": {True: "calls in doubt after a crash", False: "no call in doubt"},
    "usage_limit_reached": {True: "a usage limit reached", False: "within usage limits"},
    "cancel_requested": {True: "cancellation requested", False: "not cancelled"},
    "loop_detected": {True: "the model repeats itself", False: "no repeated call"},
    "output_invalid": {True: "answer does not fit output_type", False: "answer fits"},
    "output_retries_left": {True: "output retries left", False: "output_retries used up"},
}
if set(FACT_WORDS) != set(FACT_NAMES):
    raise MachineError(f"FACT_WORDS must describe exactly the facts {FACT_NAMES}, not {sorted(FACT_WORDS)}.")


def check_skip_work(skip_work: Mapping[Work, tuple[str, bool]]) -> None:
    """Refuse, with ``MachineError``, work skipped on something that is not a fact (``FACT_NAMES``)."""
    unknown = {item.value: fact for item, (fact, _) in skip_work.items() if fact not in FACT_NAMES}
    if unknown:
        raise MachineError(f"SKIP_WORK reads unknown facts {unknown}; facts: {FACT_NAMES}.")


check_skip_work(SKIP_WORK)

Guard = Callable[[Facts], bool]


@dataclass(frozen=True, slots=True)
class Transition:
    """One declared edge: ``trigger`` moves ``source`` to ``dest`` when the facts in ``when`` have those values.

    ``exit_reason`` (edges into DONE) is the run's ``exit_reason`` once it takes the edge: a
    ``str.format`` template over the run's exit details (``{exit_condition}``: ``"text"`` or
    ``"tool:<name>"``; ``{stop_run}``: the reason a hook gave; ``{usage_limit}``: the ``UsageLimits``
    field reached). ``note`` says what fires an interrupt, which has no guard to describe it.
    """

    trigger: str
    source: Phase
    dest: Phase
    when: tuple[tuple[str, bool], ...] = ()
    exit_reason: str | None = None
    interrupt: bool = False
    note: str = ""

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
    def guard(self) -> Guard | None:
        """``when`` as a predicate over ``Facts`` (``None``: unguarded)."""
        if not self.when:
            return None
        when = self.when
        return lambda facts: all(getattr(facts, name) is value for name, value in when)


def _edge(trigger: str, source: Phase, dest: Phase, exit_reason: str | None = None, **when: bool) -> Transition:
    return Transition(trigger, source, dest, tuple(when.items()), exit_reason)


def _interrupts(trigger: str, dest: Phase, note: str) -> list[Transition]:
    return [Transition(trigger, source, dest, interrupt=True, note=note) for source in ACTIVE_PHASES]


P = Phase

#: The whole control flow of an agent run. Order matters only for readability: the guards of the
#: edges leaving one phase are mutually exclusive and cover every case (``Dispatch`` checks it).
TRANSITIONS: tuple[Transition, ...] = (
    _edge("start", P.IDLE, P.LLM_CALL, stop_requested=False, model_calls_allowed=True),
    _edge("stop", P.IDLE, P.DONE, "{stop_run}", stop_requested=True),
    # max_agent_steps=0: the run ends without calling the model, with the conversation it was given.
    _edge("max_steps", P.IDLE, P.DONE, "max_agent_steps", stop_requested=False, model_calls_allowed=False),
    _edge("stop", P.LLM_CALL, P.DONE, "{stop_run}", stop_requested=True),
    _edge("tool_calls", P.LLM_CALL, P.TOOL_PENDING, stop_requested=False, has_tool_calls=True),
    _edge("text_reply", P.LLM_CALL, P.EXIT_CHECK, stop_requested=False, has_tool_calls=False),
    _edge("confirm", P.TOOL_PENDING, P.CONFIRM, needs_confirmation=True),
    _edge("run_tools", P.TOOL_PENDING, P.TOOL_RUN, needs_confirmation=False),
    _edge("decided", P.CONFIRM, P.TOOL_RUN, strategy_paused=False),
    _edge("hitl_pause", P.CONFIRM, P.PAUSED, strategy_paused=True),
    _edge("tools_done", P.TOOL_RUN, P.EXIT_CHECK, calls_in_doubt=False),
    # A call that may have run before a crash waits for a decision: run it again, or give its result.
    _edge("in_doubt", P.TOOL_RUN, P.PAUSED, calls_in_doubt=True),
    _edge("stop", P.EXIT_CHECK, P.DONE, "{stop_run}", stop_requested=True),
    _edge(
        "exit",
        P.EXIT_CHECK,
        P.DONE,
        "{exit_condition}",
        stop_requested=False,
        exit_reached=True,
        continue_requested=False,
        output_invalid=False,
    ),
    # An answer that does not fit output_type goes back to the model with the problems, on a budget of
    # its own (output_retries), within max_agent_steps and the usage limits; past any, the run fails with them.
    _edge(
        "output_retry",
        P.EXIT_CHECK,
        P.LLM_CALL,
        stop_requested=False,
        exit_reached=True,
        continue_requested=False,
        output_invalid=True,
        output_retries_left=True,
        steps_left=True,
        usage_limit_reached=False,
    ),
    _edge(
        "output_limited",
        P.EXIT_CHECK,
        P.FAILED,
        stop_requested=False,
        exit_reached=True,
        continue_requested=False,
        output_invalid=True,
        output_retries_left=True,
        steps_left=True,
        usage_limit_reached=True,
    ),
    _edge(
        "output_failed",
        P.EXIT_CHECK,
        P.FAILED,
        stop_requested=False,
        exit_reached=True,
        continue_requested=False,
        output_invalid=True,
        output_retries_left=False,
    ),
    _edge(
        "output_capped",
        P.EXIT_CHECK,
        P.FAILED,
        stop_requested=False,
        exit_reached=True,
        continue_requested=False,
        output_invalid=True,
        output_retries_left=True,
        steps_left=False,
    ),
    _edge(
        "continue_run",
        P.EXIT_CHECK,
        P.LLM_CALL,
        stop_requested=False,
        exit_reached=True,
        continue_requested=True,
        steps_left=True,
        usage_limit_reached=False,
    ),
    # A hook that keeps the run going past every exit is bounded by max_agent_steps all the same.
    _edge(
        "continue_capped",
        P.EXIT_CHECK,
        P.DONE,
        "max_agent_steps",
        stop_requested=False,
        exit_reached=True,
        continue_requested=True,
        steps_left=False,
    ),
    _edge(
        "max_steps", P.EXIT_CHECK, P.DONE, "max_agent_steps", stop_requested=False, exit_reached=False, steps_left=False
    ),
    _edge(
        "continue",
        P.EXIT_CHECK,
        P.LLM_CALL,
        stop_requested=False,
        exit_reached=False,
        steps_left=True,
        usage_limit_reached=False,
    ),
    # Usage limits are read before the next model call, once the step's tool calls are answered.
    _edge(
        "usage_limit",
        P.EXIT_CHECK,
        P.DONE,
        "usage_limit:{usage_limit}",
        stop_requested=False,
        exit_reached=False,
        steps_left=True,
        usage_limit_reached=True,
    ),
    _edge(
        "continue_limited",
        P.EXIT_CHECK,
        P.DONE,
        "usage_limit:{usage_limit}",
        stop_requested=False,
        exit_reached=True,
        continue_requested=True,
        steps_left=True,
        usage_limit_reached=True,
    ),
    *_interrupts("pause", P.PAUSED, "breakpoint matches"),
    *[
        Transition("resume", P.PAUSED, dest, interrupt=True, note="phase recorded in snapshot")
        for dest in ACTIVE_PHASES
    ],
    *_interrupts("fail", P.FAILED, "unhandled error"),
    # A guarded interrupt (``GUARDED_INTERRUPTS``): taken at the first transition after a
    # cancellation (or at once when the run's task is cancelled); the run resumes from PAUSED like
    # any paused run.
    *[
        Transition("cancel", source, P.PAUSED, (("cancel_requested", True),), interrupt=True)
        for source in ACTIVE_PHASES
    ],
    # A guarded interrupt too: a run that enters LLM_CALL past a usage limit (resumed there, with a
    # smaller limit than it paused with) ends before the model is called. The other ways into
    # LLM_CALL are guarded by the limit already; with the reply's tool calls still to answer
    # (resumed after the model call), the run goes on to answer them, and ends in EXIT_CHECK.
    Transition(
        "usage_limit",
        P.LLM_CALL,
        P.DONE,
        (("usage_limit_reached", True), ("has_tool_calls", False)),
        "usage_limit:{usage_limit}",
        interrupt=True,
    ),
)

#: The interrupts with a guard, by source phase: the runtime reads their facts on entering an
#: active phase (a resume included), before the phase's work, and takes the first whose guard
#: holds (a cancellation, ``cancel_requested``; a usage limit reached before a model call); it
#: leaves out those whose guard cannot hold there (``agentfsm._core.runtime.watched_interrupts``).
#: It reads them all when the driver reports that the run's task was cancelled, where the phase's
#: work stands.
GUARDED_INTERRUPTS: dict[Phase, tuple[Transition, ...]] = {
    phase: tuple(t for t in TRANSITIONS if t.interrupt and t.when and t.source is phase) for phase in ACTIVE_PHASES
}

#: What an ``exit_reason`` template may name: the runtime fills in the exit condition met, the
#: value of ``stop_run`` and the usage limit reached.
EXIT_REASON_FIELDS = frozenset({"exit_condition", "stop_run", "usage_limit"})


def check_exit_reasons(transitions: Iterable[Transition]) -> None:
    """Refuse, with ``MachineError``, an ``exit_reason`` template naming a field the runtime does not fill in."""
    for t in transitions:
        if t.exit_reason is None:
            continue
        fields = {name for _, name, _, _ in string.Formatter().parse(t.exit_reason) if name is not None}
        if not fields <= EXIT_REASON_FIELDS:
            raise MachineError(
                f"The exit reason {t.exit_reason!r} of {t.source.value} --{t.trigger}--> names "
                f"{sorted(fields - EXIT_REASON_FIELDS)}; a template may name only {sorted(EXIT_REASON_FIELDS)}."
            )


check_exit_reasons(TRANSITIONS)


# -- the call lifecycle: where each pending tool call stands ----------------------------------------


class CallStatus(StrEnum):
    """Where one pending tool call stands; it changes only along ``CALL_TRANSITIONS``."""

    #: As the model proposed it, before it is checked against its tool.
    PROPOSED = "proposed"
    #: Checked: it runs in TOOL_RUN.
    READY = "ready"
    #: It cannot run (unknown tool, bad arguments): ``error`` says why, and the model is told.
    FAILED = "failed"
    #: A confirmation strategy must decide it before it can run.
    UNDECIDED = "undecided"
    #: A person rejected it: it never runs; the model is told, with the feedback (``decision``).
    REJECTED = "rejected"
    #: It ran: ``outcome`` holds what it returned or raised.
    DONE = "done"
    #: In doubt: it started before a crash and its result was never recorded. It runs again only
    #: when a decision says so (or its tool is idempotent).
    UNKNOWN = "outcome_unknown"


# The call statuses by name, as module constants (see the phases'): ``CALL_`` and the member's name.
CALL_PROPOSED: Final = CallStatus.PROPOSED
CALL_READY: Final = CallStatus.READY
CALL_FAILED: Final = CallStatus.FAILED
CALL_UNDECIDED: Final = CallStatus.UNDECIDED
CALL_REJECTED: Final = CallStatus.REJECTED
CALL_DONE: Final = CallStatus.DONE
CALL_UNKNOWN: Final = CallStatus.UNKNOWN

#: Call statuses a call never leaves.
TERMINAL_CALL_STATUSES: frozenset[CallStatus] = frozenset({CallStatus.DONE, CallStatus.FAILED, CallStatus.REJECTED})


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


C = CallStatus

#: The life of one tool call, from the model's proposal to its result. A trigger names one edge out
#: of each status it leaves (``CallDispatch`` checks it), so the run moves a call by naming the trigger.
CALL_TRANSITIONS: tuple[CallTransition, ...] = (
    CallTransition("check", C.PROPOSED, C.READY, "its tool exists and the arguments fit"),
    CallTransition("refuse", C.PROPOSED, C.FAILED, "unknown tool or bad arguments"),
    CallTransition("ask", C.READY, C.UNDECIDED, "a confirmation strategy covers its tool"),
    CallTransition("over_limit", C.READY, C.FAILED, "it would go past UsageLimits(tool_calls=...)"),
    CallTransition("approve", C.UNDECIDED, C.READY, "decision execute=True"),
    CallTransition("modify", C.UNDECIDED, C.READY, "execute=True with new arguments that fit"),
    CallTransition("modify_refused", C.UNDECIDED, C.FAILED, "execute=True with new arguments that do not fit"),
    CallTransition("reject", C.UNDECIDED, C.REJECTED, "decision execute=False"),
    CallTransition("finish", C.READY, C.DONE, "the tool returned or raised"),
    CallTransition("time_out", C.READY, C.DONE, "no result within its timeout: a timeout error, a late result dropped"),
    CallTransition("restore", C.READY, C.DONE, "its result is recorded in the snapshot"),
    CallTransition("in_doubt", C.READY, C.UNKNOWN, "started before a crash, result not recorded"),
    CallTransition("rerun", C.UNKNOWN, C.READY, "idempotent tool, or decision execute=True"),
    CallTransition("modify", C.UNKNOWN, C.READY, "execute=True with new arguments that fit"),
    CallTransition("modify_refused", C.UNKNOWN, C.FAILED, "execute=True with new arguments that do not fit"),
    CallTransition("settle", C.UNKNOWN, C.DONE, "decision execute=False: its feedback is the result"),
)


class CallDispatch:
    """``CALL_TRANSITIONS`` as a lookup from (status, trigger) to the status it leads to.

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
                "declare an edge into them in CALL_TRANSITIONS."
            )
        stuck = set(CallStatus) - TERMINAL_CALL_STATUSES - {s for s, _ in self._next}
        if stuck:
            raise MachineError(
                f"Call statuses {sorted(stuck)} have no way out; declare one in CALL_TRANSITIONS "
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
                "every change of a call's status must be declared in agentfsm.machine.CALL_TRANSITIONS."
            ) from None


CALL_DISPATCH = CallDispatch(CALL_TRANSITIONS)


# -- compiling the phase table ------------------------------------------------------------------------


class Dispatch:
    """The transition table compiled into dictionaries for the runtime.

    For each phase with guarded edges: the facts its guards read (one ``operator.attrgetter``) and a
    dictionary from each combination of their values to the edge that holds; for a phase with one
    unguarded way out, that edge. Building it checks that exactly one edge holds for every
    combination.
    """

    __slots__ = ("_allowed", "_guarded", "_unguarded")

    def __init__(self, transitions: Iterable[Transition]) -> None:
        """Compile ``transitions`` (``TRANSITIONS``, or a table ``specialise`` made for a configuration)."""
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
                self._guarded[source] = _decision_table(source, edges)

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
                "every edge must be declared in agentfsm.machine.TRANSITIONS."
            )


def _decision_table(source: Phase, edges: list[Transition]) -> tuple[Callable[[object], Any], dict[Any, Transition]]:
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


@functools.cache
def specialise(constants: ConstantFacts) -> tuple[Transition, ...]:
    """The table for runs in which the facts of ``constants`` keep their values.

    An edge that needs a constant to have the other value is left out; the others keep guards on the
    facts that can change only. Runs compile it (``dispatch_for``) and diagrams draw it, so a drawing
    shows exactly the edges a run of the configuration can take.
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


def build_machine(model: Any, initial: Phase = Phase.IDLE) -> Any:
    """Build the table as a ``transitions.Machine`` on ``model``.

    Guards read the facts passed to the trigger: ``model.trigger("tool_calls", facts=facts)``; a
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
