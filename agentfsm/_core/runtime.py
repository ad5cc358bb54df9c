"""One agent run as a sans-I/O state machine.

``AgentRun`` never calls a model, a tool, a hook, a user or a store: it does no I/O. ``next_action`` does the current
phase's work that needs no I/O, says what the driver must do next as data (``CallModel``,
``RunTools``, ``Confirm``, ``RunHooks``, ``Pause``, ``Finish``, ``Fail``) and, once the phase's
work is done, takes the one declared edge whose guard holds. It is the only place that moves the
run. The driver performs each action and reports the result (``model_replied``,
``tool_completed``, ``tools_ran``, ``decided``, ``hooks_ran``); reports only record. What must be
persisted comes out as deltas (``take_deltas``) that the drivers write to the run's observers after
each step, before the I/O that follows: so entering CONFIRM or TOOL_RUN is committed before any
decision is asked or tool runs.
Guards read ``Facts`` computed from the run's data (its State included) at each boundary.
The drivers are in ``agentfsm._core.drivers``.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from logging import DEBUG
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

import orjson

from agentfsm._core import listeners
from agentfsm._core.decisions import check_decisions
from agentfsm.breakpoints import Breakpoint
from agentfsm.decisions import as_decision, call_fingerprint
from agentfsm.errors import (
    ConfigurationError,
    IterationStoppedError,
    MachineError,
    ModelClientError,
    OutputValidationError,
    ToolCallLimitError,
)
from agentfsm.events import CallChanged, DecisionTaken, Event, EventHandler, PhaseChanged, RunResumed
from agentfsm.hitl.strategy_table import StrategyTable
from agentfsm.limits import RUN_USAGE_KEY, UsageLimits
from agentfsm.logs import logger, stdlib_logger
from agentfsm.loops import LoopDetection, repeated_call
from agentfsm.machine import (
    ACTIVE_PHASES,
    CALL_DISPATCH,
    CALL_DONE,
    CALL_READY,
    CALL_UNDECIDED,
    CALL_UNKNOWN,
    CANNOT_FAIL,
    DISPATCH,
    EXIT_CHECK,
    FACT_NAMES,
    FAILED,
    GUARDED_INTERRUPTS,
    HOOK_POINTS,
    IDLE,
    PAUSED,
    PHASE_WORK,
    TOOL_RUN,
    TRANSITIONS,
    ConstantFacts,
    Facts,
    Phase,
    Transition,
    Work,
    dispatch_for,
    work_plan,
)
from agentfsm.messages import ChatMessage, ChatRole, ToolCall, have_own_ids, with_unique_call_ids
from agentfsm.output import FINAL_ANSWER_TOOL, OutputType, answer_of, retries_made, retry_message
from agentfsm.pauses import AwaitingDecision, BreakpointHit, Cancelled, OutcomeUnknown, PauseReason
from agentfsm.result import AgentResult
from agentfsm.serialization import deserialize_value, serialize_value
from agentfsm.snapshot import AgentSnapshot, now_iso
from agentfsm.state import State
from agentfsm.tools.invoker import CallOutcome, PreparedCall, ToolInvoker, timed_out
from agentfsm.tools.tool import IDEMPOTENCY_KEY, Tool
from agentfsm.tools.toolset import Toolset

if TYPE_CHECKING:
    from agentfsm.cancellation import RunHandle
    from agentfsm.decisions import ToolExecutionDecision
    from agentfsm.hitl.strategies import Decider
    from agentfsm.hooks import Hook

#: The hook points after which the pending calls are read again from the conversation.
_REREAD_CALLS = frozenset({Work.AFTER_LLM, Work.BEFORE_TOOL})
#: No call of a run is in doubt until one goes in doubt after a crash (see ``AgentRun.move_call``).
_NO_DOUBT: ConstantFacts = frozenset({("calls_in_doubt", False)})
#: The declared call transitions: (status, trigger) -> the status it leads to.
_CALL_MOVES = CALL_DISPATCH.moves
#: The statuses of calls waiting for a decision.
_DECIDABLE = (CALL_UNDECIDED, CALL_UNKNOWN)
#: Reads every fact off a run, in the order of ``Facts``.
_READ_FACTS = operator.attrgetter(*FACT_NAMES)
#: The pause reason in the snapshot of a run that takes a guarded interrupt (``GUARDED_INTERRUPTS``).
_INTERRUPT_PAUSES: dict[str, Callable[[], PauseReason]] = {"cancel": Cancelled}
#: What an agent without an output type has instead of an ``output``: its result has no such key.
_NO_OUTPUT: Any = object()
#: The phase whose work each work item is.
_PHASE_OF: dict[Work, Phase] = {item: phase for phase, items in PHASE_WORK.items() for item in items}


def add_usage(totals: Mapping[str, int] | None, usages: list[dict[str, Any]]) -> dict[str, int]:
    """Token counts summed: ``totals`` plus every integer count of the replies' ``usage`` metadata."""
    summed = dict(totals or {})
    for usage in usages:
        for name, count in usage.items():
            if isinstance(count, int) and not isinstance(count, bool):
                summed[name] = summed.get(name, 0) + count
    return summed


def unanswered_calls(messages: list[ChatMessage]) -> list[ToolCall]:
    """The tool calls of the assistant messages after the conversation's last tool result."""
    calls: list[ToolCall] = []
    for message in reversed(messages):
        if message.role is ChatRole.TOOL:
            break
        if message.role is ChatRole.ASSISTANT:
            calls[:0] = message.tool_calls
    return calls


def bad_model_output(output: Any) -> ModelClientError:
    """The error for a chat generator's output that is not ``{'replies': [ChatMessage, ...]}``."""
    return ModelClientError(
        f"The chat generator must return {{'replies': [ChatMessage, ...]}} with at least one reply, got {output!r}."
    )


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
_new_record = functools.partial(tuple.__new__, TransitionRecord)


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


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What a run needs from its agent, fixed for the run's duration."""

    tools: dict[str, Tool]
    #: The exit conditions that name tools (a text reply always ends the run).
    tool_exits: frozenset[str]
    max_agent_steps: int
    invoker: ToolInvoker
    #: Works out the agent's fingerprint; called once, by the run's first snapshot.
    fingerprint: Callable[[], str]
    dynamic: tuple[Toolset, ...] = ()
    break_point: Breakpoint | None = None
    #: Told what changed (``RunDelta``), by the drivers: the run records deltas only when it has some.
    observers: tuple[RunObserver, ...] = ()
    #: The hooks of each hook point, in the order they run.
    hooks: Mapping[Work, tuple[Hook, ...]] = field(default_factory=dict)
    #: The confirmation strategy of each tool a strategy covers (``agentfsm.hitl``).
    confirmation: StrategyTable = field(default_factory=StrategyTable)
    #: Request-scoped objects for hooks and confirmation strategies (``Agent.run(hook_context=...)``):
    #: never in a snapshot.
    hook_context: dict[str, Any] | None = None
    #: Told each event of the run (``agentfsm.events``), by the drivers: the run records events only when
    #: one is given, or when it logs (its log reads them).
    on_event: EventHandler | None = None
    #: Keeps each event of the run, beside ``on_event``: the agent's snapshot store, when it records
    #: events (``record_events=True``, for other processes to read).
    record_event: EventHandler | None = None
    #: The agent's name in the run's ``RunStarted`` event.
    agent_name: str = "agent"
    #: What the run may use (``Agent(usage_limits=...)`` or ``run(usage_limits=...)``).
    usage_limits: UsageLimits | None = None
    #: Cancels the run from another thread (``run(cancel=...)``).
    cancel: RunHandle | None = None
    #: Detects a model that repeats itself (``Agent(loop_detection=...)``); its consequence is in ``hooks``.
    loop_detection: LoopDetection | None = None
    #: The type the final answer must fit (``Agent(output_type=...)``), and how often the model may try again.
    output: OutputType | None = None
    output_retries: int = 0
    #: Given to the chat generator with every call (the output type's ``response_format``).
    generation_kwargs: dict[str, Any] | None = None
    #: Seconds a model call may take before the run stops waiting for it (``Agent(model_timeout=...)``).
    model_timeout: float | None = None


# -- actions: what the driver must do next ---------------------------------------------------------


@dataclass(slots=True)
class CallModel:
    """Call the chat generator with these messages and tools, then ``model_replied``.

    ``messages`` is the conversation as it stood at the call, a list of its own: a generator that
    keeps it never sees later messages appear in it.
    """

    messages: list[ChatMessage]
    tools: list[Tool]
    #: Passed to the generator as ``generation_kwargs`` (a ``response_format``), when the run has some.
    generation_kwargs: dict[str, Any] | None = None
    #: Seconds the driver waits for the reply (``None``: as long as the generator takes).
    timeout: float | None = None


@dataclass(slots=True)
class RunTools:
    """Execute the ready calls, report each to ``tool_completed``, then ``tools_ran``."""

    calls: list[PreparedCall]


@dataclass(slots=True)
class Confirm:
    """Ask each call's confirmation strategy for its decision, then ``decided`` with one per call, in order.

    A strategy that defers (it raised ``HITLBreakpointException``) is reported as ``None``: the call
    stays undecided and the run pauses for the decision.
    """

    calls: list[PreparedCall]
    strategies: list[Decider]


@dataclass(frozen=True, slots=True)
class RunHooks:
    """Run these hooks on the run's ``state``, in order, then ``hooks_ran``.

    ``error`` (``on_error`` only) is the exception that failed the run: hooks that take an ``error``
    keyword are given it.
    """

    point: Work
    hooks: tuple[Hook, ...]
    error: BaseException | None = None
    #: The run's ``hook_context`` (``Agent.run(hook_context=...)``): hooks that take it are given it.
    context: dict[str, Any] | None = None


@dataclass(slots=True)
class Pause:
    """A breakpoint matched; the driver raises ``BreakpointException`` with this snapshot."""

    snapshot: AgentSnapshot


@dataclass(slots=True)
class Finish:
    """The run is over; ``result`` is what ``Agent.run`` returns."""

    result: dict[str, Any]


@dataclass(slots=True)
class Fail:
    """The run failed and its ``on_error`` hooks ran: the driver raises ``error`` to the caller."""

    error: BaseException


Action = CallModel | RunTools | Confirm | RunHooks | Pause | Finish | Fail


class AgentRun:
    """The data of one run, and the decisions that move it along the declared transitions."""

    def __init__(
        self, config: RunConfig, state: State, run_id: str | None = None, fingerprint: str | None = None
    ) -> None:
        self.config = config
        self.state = state
        #: State's live dictionary, to read from (every write goes through ``state``).
        self._data = state.data
        self.run_id = run_id or uuid.uuid4().hex
        self.phase = IDLE
        #: How many items of the phase's work (``PHASE_WORK``) are done.
        self.stage = 0
        #: Model calls made.
        self.step = 0
        self.trace: list[TransitionRecord] = []
        #: The tool calls of the last reply, pending until they ran.
        self.calls: list[ToolCall] = []
        #: The pending calls, checked (from TOOL_PENDING's work on) and as far as they got.
        self.pending: list[PreparedCall] = []
        self.exit_reason: str | None = None
        #: The snapshot of a paused run.
        self.snapshot: AgentSnapshot | None = None
        #: The exception that failed the run.
        self.error: BaseException | None = None
        #: Every confirmation decision taken in the run (``ToolExecutionDecision.to_dict()`` and its ``step``).
        self.decisions: list[dict[str, Any]] = []
        self._fingerprint = fingerprint
        self._has_tools = bool(config.tools or config.dynamic)
        #: Whether any confirmation strategy is given (read at every step's prepare, fixed for the run).
        self._confirming = bool(config.confirmation)
        constants = constant_facts(
            config.tools.values(),
            dynamic=bool(config.dynamic),
            hooks=config.hooks,
            confirmation=config.confirmation,
            max_agent_steps=config.max_agent_steps,
            state=state.data,
            usage_limits=config.usage_limits,
            loop_detection=config.loop_detection,
            output_retries=None if config.output is None else config.output_retries,
        )
        #: The facts this run cannot change; until a call goes in doubt, ``calls_in_doubt`` is false too.
        self._constants = constants
        #: What each phase still has to do from each stage, in this run (hook points without hooks left out).
        self._plan = work_plan(frozenset(config.hooks), constants | _NO_DOUBT)
        #: The table compiled for this run's configuration (facts it cannot change are constants).
        self._dispatch = dispatch_for(constants | _NO_DOUBT)
        #: Whether a call of the run went in doubt (the run's plan and table then read ``calls_in_doubt``).
        self._doubted = False
        #: The tools shown to the model when no dynamic toolset changes them between calls.
        self._static_tools = None if config.dynamic else list(config.tools.values())
        #: The conversation's version when the last hooks were handed out (did they change it?).
        self._conversation_before_hooks = (0, 0)
        #: Deltas recorded for the observers and not taken by the driver yet.
        self._deltas: list[RunDelta] = []
        #: What the deltas recorded of the conversation (its version and length) and of the trace.
        self._told: tuple[int, int] | None = None
        self._told_trace = 0
        self._entered = time.perf_counter()
        #: The work item whose action was handed out and whose report has not come yet.
        self._awaiting: Work | None = None
        #: Whether the run logs its transitions (decided when it starts: see ``agentfsm.logs``).
        self._logging = stdlib_logger.isEnabledFor(DEBUG)
        #: Whether a tool of the run may take an idempotency key (dynamic toolsets may show one later).
        self._keyed = bool(config.dynamic) or any(t.takes_idempotency_key for t in config.tools.values())
        #: Whether the run records its events, for its ``on_event`` handler, its store or its log (decided
        #: when it starts: nobody listening costs nothing). The drivers hand them out (``agentfsm._core.emitting``).
        self.records_events = (
            config.on_event is not None or config.record_event is not None or self._logging or bool(listeners.consumers)
        )
        #: Events recorded for the driver and not taken by it yet.
        self._events: list[Event] = []
        #: The action of each hook point, made once: a point's hooks and context are the same at each firing.
        self._hook_actions = {
            point: RunHooks(point, hooks, None, config.hook_context) for point, hooks in config.hooks.items()
        }
        #: The usage limits the run counts for (``None``: no limit and no prices, nothing to count).
        self._limits = (
            config.usage_limits if config.usage_limits is not None and config.usage_limits.configured else None
        )
        #: When this run object started the wall clock (epoch seconds): a new run's first start.
        self.clock_started: float | None = None
        if self._limits is not None and self._limits.wall_clock is not None:
            self._start_clock()
        #: Set when the task driving the run was cancelled, or the loop over its events stopped (the
        #: handle, if any, says the same for a thread).
        self._task_cancelled = False
        #: The guarded interrupts whose guard can come to hold between two of the run's transitions
        #: (``watched_interrupts``): ``usage_limit`` with limits set; ``cancel`` once the run's
        #: ``RunHandle`` is cancelled, which sets this from the cancelling thread (``_watch_cancel``;
        #: the run reads it at its next transition). A cancelled task is reported by the driver,
        #: ``task_cancelled``, which reads every guarded interrupt.
        self._watched = watched_interrupts(cancel=False, limits=self._limits is not None and self._limits.bounded)
        if config.cancel is not None:
            config.cancel.on_cancel(self._watch_cancel)
        #: The check of the conversation's final answer against the output type, for the conversation's
        #: version it was made for: (version, (parsed value, problems)).
        self._checked_output: tuple[tuple[int, int], tuple[Any, list[str]] | None] | None = None
        #: The run's trace context (W3C ``traceparent``/``tracestate``), kept in its snapshots so that
        #: the segments of a paused, crashed or moved run join one trace (``agentfsm.telemetry``).
        self.trace_context: dict[str, str] | None = None

    # -- facts: what the guards read, worked out from the run's data whenever one is read ---------------

    def facts(self) -> Facts:
        """The facts the guards read (``agentfsm.machine.Facts``), as they stand now."""
        return Facts._make(_READ_FACTS(self))

    @property
    def has_tool_calls(self) -> bool:
        """Fact: the last reply asked for tool calls that have not run yet (and the run has tools)."""
        return bool(self.calls)

    @property
    def needs_confirmation(self) -> bool:
        """Fact: a confirmation strategy must decide at least one pending call."""
        return self._any_undecided()

    @property
    def strategy_paused(self) -> bool:
        """Fact: a pending call is still undecided after the strategies ran."""
        return self._any_undecided()

    def _any_undecided(self) -> bool:
        for c in self.pending:  # noqa: SIM110 (a loop, not any() over a generator: read at every step)
            if c.status is CALL_UNDECIDED:
                return True
        return False

    @property
    def calls_in_doubt(self) -> bool:
        """Fact: a pending call started before a crash and its result was never recorded."""
        for c in self.pending:  # noqa: SIM110 (see _any_undecided)
            if c.status is CALL_UNKNOWN:
                return True
        return False

    @property
    def exit_reached(self) -> bool:
        """Fact: the end of the conversation meets an exit condition."""
        return self.exit_condition() is not None

    @property
    def steps_left(self) -> bool:
        """Fact: fewer than ``max_agent_steps`` model calls have been made."""
        return self.step < self.config.max_agent_steps

    @property
    def model_calls_allowed(self) -> bool:
        """Fact: ``max_agent_steps`` is above 0 (always a constant of the run's table)."""
        return self.config.max_agent_steps > 0

    @property
    def stop_requested(self) -> bool:
        """Fact: ``stop_run`` was set (by a hook, or a tool through ``outputs_to_state``), and no tool call waits for its result."""
        return bool(self._data.get("stop_run")) and not self.calls

    @property
    def continue_requested(self) -> bool:
        """Fact: ``continue_run`` was set (by a hook, or a tool through ``outputs_to_state``)."""
        return bool(self._data.get("continue_run"))

    @property
    def usage_limit_reached(self) -> bool:
        """Fact: a limit of the run's ``UsageLimits`` is reached (``usage_limit`` names which)."""
        limits = self._limits
        return limits is not None and limits.reached(self.step, self._data) is not None

    @property
    def cancel_requested(self) -> bool:
        """Fact: the run was cancelled from outside (its ``RunHandle``, or the task of ``run_async``)."""
        handle = self.config.cancel
        return self._task_cancelled or (handle is not None and handle.cancelled)

    @property
    def loop_detected(self) -> bool:
        """Fact: the model repeats itself (``LoopDetection``): the same call, with the same result, in a row."""
        detection = self.config.loop_detection
        return detection is not None and repeated_call(self._data["messages"], detection.repeats) is not None

    def task_cancelled(self) -> bool:
        """Take the ``cancel`` edge once the run's task is cancelled; False where a run cannot pause.

        The loop over the run's events stopping (``IterationStoppedError``) is reported here too.
        The work under way (a model call, tool calls, hooks) is done again on resume: the snapshot
        is taken at its stage, with the calls that started and have no result in doubt.
        """
        if self.phase in CANNOT_FAIL:
            return False
        self._task_cancelled = True
        self._awaiting = None
        return self._take_guarded_interrupt(GUARDED_INTERRUPTS.get(self.phase, ()))

    def _watch_cancel(self) -> None:
        """The run's ``RunHandle`` was cancelled (in any thread): from now on its transitions read ``cancel_requested``."""
        self._watched = watched_interrupts(cancel=True, limits=self._limits is not None and self._limits.bounded)

    def _take_guarded_interrupt(self, interrupts: tuple[Transition, ...]) -> bool:
        """Take the first of ``interrupts`` (out of the current phase) whose guard holds; False if none does.

        Into PAUSED, the snapshot is taken where the phase's work stands, before the edge (its delta carries it).
        """
        for t in interrupts:
            for name, value in t.when:  # in the guard's order, reading no fact past the first that fails
                if getattr(self, name) is not value:
                    break
            else:
                if t.dest is PAUSED:
                    self.snapshot = self.make_snapshot(_INTERRUPT_PAUSES[t.trigger]())
                self._move(t)
                return True
        return False

    def usage_limit(self) -> str | None:
        """The first limit of the run's ``UsageLimits`` that is reached (its field name), or ``None``."""
        limits = self._limits
        return None if limits is None else limits.reached(self.step, self._data)

    def _start_clock(self) -> None:
        """Start the wall clock of a run's first start; a resumed run's goes on from its snapshot."""
        usage = self._data.get(RUN_USAGE_KEY) or {}
        if "started_at" not in usage:
            self.clock_started = time.time()
            self.state.set(RUN_USAGE_KEY, {**usage, "started_at": self.clock_started})

    def clock_started_at(self, started_at: float) -> None:
        """Count the wall clock from ``started_at`` (epoch seconds): a durable run's first start, read back on recovery."""
        usage = self._data.get(RUN_USAGE_KEY) or {}
        self.clock_started = started_at
        self.state.set(RUN_USAGE_KEY, {**usage, "started_at": started_at})

    def resumed_after(self, paused_at: float) -> None:
        """Leave the time since ``paused_at`` (the pause snapshot's time, epoch seconds) off the run's wall clock."""
        usage = self._data.get(RUN_USAGE_KEY) or {}
        if "started_at" in usage:
            paused = usage.get("paused_seconds", 0.0) + max(0.0, time.time() - paused_at)
            self.state.set(RUN_USAGE_KEY, {**usage, "paused_seconds": paused})

    def _count_usage(self, replies: list[ChatMessage]) -> None:
        """Check that the replies report what the limits count, and add up their cost (with prices)."""
        limits = self._limits
        assert limits is not None
        if limits.counts_tokens:
            cost = limits.replies_cost(replies)
            if limits.tracks_cost:
                usage = self._data.get(RUN_USAGE_KEY) or {}
                self.state.set(RUN_USAGE_KEY, {**usage, "cost": usage.get("cost", 0.0) + cost})

    def _refuse_over_limit(self, completed: Mapping[str, CallOutcome] | None) -> None:
        """Refuse the ready calls past ``UsageLimits(tool_calls=...)``: they never run, and their results say why."""
        limits = self._limits
        assert limits is not None and limits.tool_calls is not None
        left = limits.tool_calls - sum((self._data.get("tool_call_counts") or {}).values())
        if len(self.pending) <= left:  # every call fits
            return
        counted = [c for c in self.pending if c.tool is None or not c.tool.is_answer]
        if len(counted) <= left:
            return
        refused = 0
        for c in counted:
            if c.status is not CALL_READY:
                continue
            # A call that finished before a resume took its place under the limit (the step's calls
            # are counted in tool_call_counts only once all of them are done).
            if left > 0 or (completed and c.key in completed):
                left -= 1
                continue
            c.error = ToolCallLimitError(
                f"Tool call {c.call.tool_name!r} was not run: the run reached its limit of "
                f"{limits.tool_calls} tool calls (UsageLimits(tool_calls=...))."
            )
            self.move_call(c, "over_limit")
            refused += 1
        if refused and completed is None:  # a resumed run's State counted them when they were first refused
            usage = self._data.get(RUN_USAGE_KEY) or {}
            self.state.set(RUN_USAGE_KEY, {**usage, "refused_tool_calls": usage.get("refused_tool_calls", 0) + refused})

    @property
    def output_invalid(self) -> bool:
        """Fact: the run ends on an answer that does not fit the output type."""
        checked = self.checked_output()
        return checked is not None and bool(checked[1])

    @property
    def output_retries_left(self) -> bool:
        """Fact: the model was sent back fewer than ``output_retries`` times for this answer."""
        return retries_made(self._data["messages"]) < self.config.output_retries

    def checked_output(self) -> tuple[Any, list[str]] | None:
        """The final answer checked against the output type: (parsed value, problems); ``None`` when there is none.

        The conversation must end on an answer: a text reply, or a call of the final-answer tool.
        """
        output = self.config.output
        if output is None:
            return None
        version = self._conversation_version()
        if self._checked_output is None or self._checked_output[0] != version:
            answer = answer_of(self._data["messages"], self.exit_condition())
            self._checked_output = (version, None if answer is None else output.check(answer))
        return self._checked_output[1]

    def output(self) -> Any:
        """The final answer as the output type's value (``None``: the run ended without a fitting answer)."""
        checked = self.checked_output()
        return None if checked is None or checked[1] else checked[0]

    def _send_output_back(self) -> None:
        """The ``output_retry`` edge's work: tell the model what is wrong with its answer."""
        checked = self.checked_output()
        assert checked is not None
        number = retries_made(self._data["messages"]) + 1
        tool = FINAL_ANSWER_TOOL in self.config.tools
        self.state.append("messages", [retry_message(checked[1], number, tool)])

    def _output_failed(self) -> None:
        """The ``output_failed`` / ``output_capped`` / ``output_limited`` edges' work: the error the failed run raises."""
        checked = self.checked_output()
        assert checked is not None and self.config.output is not None
        answer = answer_of(self._data["messages"], self.exit_condition())
        self.error = OutputValidationError(
            self.config.output.name,
            checked[1],
            answer if isinstance(answer, str) else orjson.dumps(answer).decode(),  # a tool's arguments, as JSON
            retries_made(self._data["messages"]),
        )

    def exit_condition(self) -> str | None:
        """The exit condition the end of the conversation meets: ``"text"``, ``"tool:<name>"`` or ``None``.

        A reply without tool calls to run meets ``"text"``. A step's tool results meet ``"tool:<name>"``
        for the first exit-condition tool that ran in it, if none of that tool's calls failed.
        """
        messages: list[ChatMessage] = self._data.get("messages") or []
        if not messages:
            return None
        last = messages[-1]
        role = last.role
        if role is ChatRole.ASSISTANT:
            return None if self._has_tools and last.tool_call is not None else "text"
        if role is not ChatRole.TOOL or not self.config.tool_exits:
            return None
        failed: dict[str, bool] = {}
        for message in reversed(messages):
            if message.role is not ChatRole.TOOL:
                break
            for result in message.tool_call_results:
                name = result.origin.tool_name
                failed[name] = failed.get(name, False) or result.error
        exits = [name for name in reversed(failed) if name in self.config.tool_exits]
        if exits and not any(failed[name] for name in exits):
            return f"tool:{exits[0]}"
        return None

    # -- the step --------------------------------------------------------------------------------

    def next_action(self) -> Action:
        """Do the work that needs no I/O, take the edges it leads to, and say which I/O comes next."""
        while True:
            upcoming = self._plan[self.phase][self.stage]
            if upcoming is None:  # the phase's work is done
                self._move(self._dispatch.next(self.phase, self))
                continue
            # The next item of the phase's work: work that needs I/O becomes an action for the driver
            # (its report moves the stage on); the rest is done here.
            self.stage, item, skip = upcoming
            if skip is not None and getattr(self, skip[0]) is skip[1]:
                self.stage += 1
                continue
            action = _DO[item](self, item)
            if action is not None:
                self._awaiting = item
                return action

    # -- the work items (``_DO`` says which method does which) ----------------------------------------

    def _call_model(self, item: Work) -> Action:
        tools = self._static_tools
        if tools is None:
            tools = list(self.current_tools().values())
        config = self.config
        return CallModel(list(self._data["messages"]), tools, config.generation_kwargs, config.model_timeout)

    def _prepare_calls(self, item: Work) -> None:
        self.prepare_calls()
        self.stage += 1

    def _run_tools(self, item: Work) -> Action:
        return RunTools(self.pending)

    def _decide(self, item: Work) -> Action | None:
        undecided = [c for c in self.pending if c.status is CALL_UNDECIDED]
        if not undecided:
            self.stage += 1
            return None
        # A call is undecided only when a strategy covers it (prepare_calls), so each has one.
        table = self.config.confirmation
        return Confirm(undecided, [cast("Decider", table.strategy_for(c.call.tool_name)) for c in undecided])

    def _clear_continue(self, item: Work) -> None:
        self.state.set("continue_run", False)
        self.stage += 1

    def _run_hooks(self, item: Work) -> Action:
        if item in _REREAD_CALLS:
            self._conversation_before_hooks = self._conversation_version()
        if self.error is not None:  # on_error's hooks are given the error
            return RunHooks(item, self.config.hooks[item], self.error, self.config.hook_context)
        return self._hook_actions[item]

    def _conversation_version(self) -> tuple[int, int]:
        """The conversation's State version and length: the same pair means at most the same messages."""
        return self.state.version("messages"), len(self._data["messages"])

    def _finish(self, item: Work) -> Action:
        return Finish(self.result())

    def _report_pause(self, item: Work) -> Action:
        assert self.snapshot is not None
        return Pause(self.snapshot)

    def _raise_error(self, item: Work) -> Action:
        assert self.error is not None
        return Fail(self.error)

    def prepare_calls(self, completed: Mapping[str, CallOutcome] | None = None) -> None:
        """Check the pending calls against the tools; ``completed`` gives the outcomes of calls that ran already.

        ``completed`` is given (if empty) when a resumed run prepares its calls again.
        """
        self.pending = self.config.invoker.check(self.calls, self.state, self.current_tools())
        for c in self.pending:
            self.move_call(c, "check" if c.error is None else "refuse")
        if self._limits is not None and self._limits.tool_calls is not None:
            self._refuse_over_limit(completed)
        if self._keyed:
            for c in self.pending:
                self._give_key(c)
        if completed or self._confirming:
            covered = self.config.confirmation
            for c in self.pending:
                if completed and c.key in completed:
                    c.outcome = completed[c.key]
                    self.move_call(c, "restore")
                elif (
                    c.status is CALL_READY
                    and not (c.tool is not None and c.tool.is_answer)
                    and covered.strategy_for(c.call.tool_name) is not None
                ):
                    self.move_call(c, "ask")
            keys = {c.key for c in self.pending}
            for decision in self.decisions:  # confirmations taken before a pause or a crash
                if (
                    decision.get("step") == self.step
                    and decision.get("tool_call_id") in keys
                    and not decision.get("outcome_unknown")
                ):
                    self.apply_decision(decision, taken_before=True)

    def _give_key(self, call: PreparedCall) -> None:
        """Pass the call its idempotency key, when its tool takes one."""
        if call.tool is not None and call.tool.takes_idempotency_key and call.status is CALL_READY:
            call.arguments[IDEMPOTENCY_KEY] = self.idempotency_key(call.key)

    def idempotency_key(self, call_key: str) -> str:
        """The key of a call of this step: the same each time the call runs, distinct from every other call's."""
        return hashlib.sha256(f"{self.run_id}/{self.step}/{call_key}".encode()).hexdigest()[:32]

    def current_tools(self) -> dict[str, Tool]:
        """The tools the model can call now: the run's tools and what its dynamic toolsets show."""
        if not self.config.dynamic:
            return self.config.tools
        tools = dict(self.config.tools)
        for toolset in self.config.dynamic:
            tools.update((t.name, t) for t in toolset)
        if self.config.output is not None and FINAL_ANSWER_TOOL in tools and not tools[FINAL_ANSWER_TOOL].is_answer:
            raise ConfigurationError(
                f"A dynamic toolset shows a tool named {FINAL_ANSWER_TOOL!r}, the name of the tool an agent with an "
                "output_type gives the model for its answer: rename the toolset's tool."
            )
        return tools

    # -- the driver's reports: they record, and never move the run ----------------------------------

    # Each report answers the action handed out for its work item, once: it checks ``_awaiting``.

    def _unexpected(self, item: Work, what: str) -> MachineError:
        """The error for a report that answers no action handed out."""
        where = f"{self.phase.value} with {item.value} done" if _PHASE_OF[item] is self.phase else self.phase.value
        return MachineError(
            f"{what} is only valid in {_PHASE_OF[item].value} while {item.value} is under way; the run is in {where}."
        )

    def model_replied(self, output: Any) -> None:
        """Record the chat generator's output: the replies join the conversation, their tool calls are pending."""
        if self._awaiting is not Work.CALL_MODEL:
            raise self._unexpected(Work.CALL_MODEL, "model_replied")
        self._awaiting = None
        replies = output.get("replies") if isinstance(output, dict) else None
        if not isinstance(replies, list) or not replies:
            raise bad_model_output(output)
        calls: list[ToolCall] = []
        usage: list[dict[str, Any]] = []
        for reply in replies:
            if not isinstance(reply, ChatMessage):
                raise bad_model_output(output)
            calls += reply.tool_calls
            reported = reply.meta.get("usage")
            if type(reported) is dict:
                usage.append(reported)
            elif reported is not None and isinstance(reported, Mapping):
                usage.append(dict(reported))  # counted as the limits' check accepts it (``replies_cost``)
        if calls and not have_own_ids([c.id for c in calls]):
            # Each call needs an id of its own to be decided and answered: the model's, or a new one.
            replies = with_unique_call_ids(replies, self.step + 1)
            calls = [c for reply in replies for c in reply.tool_calls]
        if self._limits is not None:
            self._count_usage(replies)
        self.step += 1
        self.state.set("step_count", self.step)
        self.state.append("messages", replies)
        if usage:
            self.state.set("token_usage", add_usage(self._data.get("token_usage"), usage))
        self.calls = calls if self._has_tools else []
        self.stage += 1

    def tool_completed(self, call: PreparedCall) -> None:
        """Record one finished call, its ``outcome`` set: it takes its ``finish`` edge to DONE.

        Its delta lets observers persist it, so that a crash does not run it again.
        """
        if call.outcome is None:
            raise MachineError(f"tool_completed takes a call with its outcome; {call.key} has none.")
        self.move_call(call, "time_out" if timed_out(call.outcome) else "finish")
        if self.config.observers:
            self._tell(None)

    def tools_ran(self) -> list[ChatMessage]:
        """Record the step's tool results in the conversation and State; returns the new messages."""
        if self._awaiting is not Work.RUN_TOOLS:
            raise self._unexpected(Work.RUN_TOOLS, "tools_ran")
        self._awaiting = None
        if self._doubted and self.calls_in_doubt:  # the run pauses for them (``in_doubt``): no result is recorded yet
            self.stage += 1
            return []
        messages = self.config.invoker.finish(self.pending, self.state)
        self.state.append("messages", messages)
        self.calls, self.pending = [], []
        self.stage += 1
        return messages

    def decided(self, decisions: Sequence[ToolExecutionDecision | None]) -> None:
        """Record the strategies' decisions for the ``Confirm`` action's calls (``None``: deferred)."""
        if self._awaiting is not Work.DECIDE:
            raise self._unexpected(Work.DECIDE, "decided")
        self._awaiting = None
        for decision in decisions:
            if decision is not None:
                self.apply_decision(decision)
        self.stage += 1
        if self.config.observers:
            self._tell(None)

    def apply_decision(self, decision: ToolExecutionDecision | Mapping[str, Any], taken_before: bool = False) -> None:
        """Apply one ``ToolExecutionDecision`` (or its dict) to the pending call it was taken for.

        It is checked first (``agentfsm._core.decisions.check_decisions``): it must name a pending call
        waiting for a decision, for the same tool, and, when it carries one, the fingerprint of that
        call's tool name and arguments as proposed. Otherwise ``DecisionError``, and nothing changes.
        ``taken_before``: replayed from the snapshot (checked when it was taken).
        For a call in doubt, ``execute=False`` records ``feedback`` as its result.
        """
        if taken_before:
            d = as_decision(decision)
        else:
            calls = {c.key: (c.call.tool_name, c.call.arguments) for c in self.pending}
            waiting = [c.key for c in self.pending if c.status in _DECIDABLE]
            [d] = check_decisions(self.run_id, calls, waiting, [decision])
        call = next(c for c in self.pending if c.key == d.tool_call_id)
        proposed = call_fingerprint(call.call.tool_name, call.call.arguments)
        ran = call.status is CALL_DONE  # before a pause or crash: only what it says is restored
        unknown = call.status is CALL_UNKNOWN
        if not unknown:  # a confirmation: the tool result shows it, bound to the call as the snapshot keeps it
            call.decision = d if d.call_fingerprint is not None else replace(d, call_fingerprint=proposed)
        if d.execute and d.final_tool_params is not None and d.final_tool_params != call.call.arguments:
            modified = ToolCall(call.call.tool_name, dict(d.final_tool_params), call.call.id, call.call.extra)
            if ran:
                call.call = modified
            else:  # the new arguments are checked again, as the model's were
                [checked] = self.config.invoker.check([modified], self.state, self.current_tools())
                call.call, call.tool, call.arguments = checked.call, checked.tool, checked.arguments
                call.error = checked.error
                self.move_call(call, "modify" if checked.error is None else "modify_refused")
                self._give_key(call)
        elif unknown:
            if not d.execute:
                call.outcome = CallOutcome(value=d.feedback)
            self.move_call(call, "rerun" if d.execute else "settle")
        elif not ran:
            self.move_call(call, "approve" if d.execute else "reject")
        if not taken_before:
            taken = {**d.to_dict(), "call_fingerprint": proposed, "step": self.step}
            self.decisions.append({**taken, "outcome_unknown": True} if unknown else taken)
            if self.records_events:
                self._events.append(DecisionTaken(self.run_id, self.step, time.time(), call.key, d.to_dict()))

    def hooks_ran(self, point: Work) -> None:
        """Record that the hooks of ``point`` ran.

        After ``after_llm`` and ``before_tool`` hooks, the pending calls are those the conversation now
        holds: the hooks may have changed them, and what is checked and run is what they left.
        """
        if self._awaiting is not point:
            raise self._unexpected(point, "hooks_ran")
        self._awaiting = None
        if point in _REREAD_CALLS and self._conversation_version() != self._conversation_before_hooks:
            self.calls = unanswered_calls(self._data["messages"]) if self._has_tools else []
        self.stage += 1
        if self.config.observers and self.phase in ACTIVE_PHASES:
            self._tell(None)

    def move_call(self, call: PreparedCall, trigger: str) -> None:
        """Move a pending call along its declared edge ``trigger`` (``CALL_TRANSITIONS``).

        The one way a call's status changes in a run; an undeclared move raises ``MachineError``.
        """
        source = call.status
        dest = _CALL_MOVES.get((source, trigger)) or CALL_DISPATCH.next(source, trigger)  # the latter raises
        call.status = dest
        if dest is CALL_UNKNOWN and not self._doubted:
            # From now on the run's plan and table read the fact (the constants still hold).
            self._doubted = True
            self._plan = work_plan(frozenset(self.config.hooks), self._constants)
            self._dispatch = dispatch_for(self._constants)
        if self.records_events:
            self._events.append(
                CallChanged(self.run_id, self.step, time.time(), call.key, call.call.tool_name, source, dest, trigger)
            )

    def crashed_during_tool_run(self, started: Iterable[str], decided: Iterable[str] = ()) -> None:
        """Apply the in-doubt rule to the calls ``started`` (keys) before a crash, their results never recorded.

        Each ready one takes its ``in_doubt`` edge; one of an idempotent tool (``runs_again_after_crash``)
        then takes its ``rerun`` edge, unless a decision for it is at hand (``decided``, keys): the
        decision settles it. Every driver that finds calls in doubt calls this.
        """
        started, decided = set(started), set(decided)
        for c in self.pending:
            if c.key in started and c.status is CALL_READY:
                self.move_call(c, "in_doubt")
                if c.key not in decided and runs_again_after_crash(c):
                    self.move_call(c, "rerun")

    # -- moving through the table ----------------------------------------------------------------

    def interrupt(self, trigger: str, dest: Phase, stage: int = 0) -> None:
        """Take the interrupt edge ``trigger`` to ``dest`` (``pause``, ``fail``, ``resume``, ``cancel``); it must be declared.

        ``stage``: how much of ``dest``'s work is done already (a resumed run's snapshot says).
        """
        DISPATCH.check(self.phase, trigger, dest)
        self._move(Transition(trigger, self.phase, dest, interrupt=True), stage)

    def _move(self, transition: Transition, stage: int = 0) -> None:
        if transition.dest is PAUSED and self.snapshot is None:
            # A decision is deferred, or calls are in doubt: the run resumes into this phase's work, and
            # it waits for the decisions.
            self.snapshot = self.make_snapshot(self._waiting_for(), stage=0)
        now = time.perf_counter()
        record = _new_record((self.step, self.phase, transition.dest, transition.trigger, (now - self._entered) * 1e6))
        self.trace.append(record)
        effect = _EDGE_WORK.get(transition.trigger) if self.config.output is not None else None
        if effect is not None:
            effect(self)
        self.phase, self.stage, self._entered = transition.dest, stage, now
        if transition.exit_reason is not None:
            self.exit_reason = transition.exit_reason.format(
                exit_condition=self.exit_condition(),
                stop_run=self._data.get("stop_run"),
                usage_limit=self.usage_limit(),
            )
            if self.exit_reason == "max_agent_steps":
                logger.warning(
                    "max_agent_steps reached", run_id=self.run_id, max_agent_steps=self.config.max_agent_steps
                )
        if self.config.observers:
            self._tell(record)
        if self.records_events:
            self._record_transition(record, transition)
        bp = self.config.break_point
        if (
            bp is not None
            and transition.trigger != "resume"
            and bp.target_phase is record.dest
            and bp.matches(record.dest, self.step, self._visits(), [c.tool_name for c in self.calls])
        ):
            # The snapshot exists before the pause edge is taken, so that the edge's delta carries it.
            self.snapshot = self.make_snapshot(BreakpointHit(bp.to_dict()))
            self.interrupt("pause", PAUSED)
        if self._watched:
            watched = self._watched.get(self.phase)
            if watched is not None:
                interrupts = watched.get(transition.trigger, watched[None])
                if interrupts:
                    self._take_guarded_interrupt(interrupts)

    def _record_transition(self, record: TransitionRecord, transition: Transition) -> None:
        exit_reason = self.exit_reason if transition.exit_reason is not None else None
        self._events.append(
            PhaseChanged(
                self.run_id,
                record.step,
                time.time(),
                record.source,
                record.dest,
                record.trigger,
                record.duration_us,
                exit_reason,
            )
        )
        if record.trigger == "resume":
            self._events.append(RunResumed(self.run_id, self.step, time.time(), record.dest))

    @property
    def logs(self) -> bool:
        """Whether the run logs its transitions (decided when it started: ``agentfsm.logs``)."""
        return self._logging

    def take_events(self) -> list[Event]:
        """The events recorded since the last call, oldest first, for the driver to hand out."""
        events = self._events
        if events:  # an empty list is handed out as it is: nothing to allocate at the many calls without events
            self._events = []
        return events

    def _visits(self) -> int:
        """How many times the current phase was entered before (resumes do not count)."""
        return sum(1 for r in self.trace if r.dest is self.phase and r.trigger != "resume") - 1

    def fail(self, error: BaseException) -> bool:
        """Take the ``fail`` edge after ``error`` escaped from the run's work; False where a run cannot fail.

        The failed run's next actions run its ``on_error`` hooks, then hand ``error`` back (``Fail``).
        ``IterationStoppedError`` (the loop over the run's events stopped) is no failure of the run:
        it is cancelled from outside, as when its task is (``task_cancelled``).
        """
        if self.phase in CANNOT_FAIL:
            return False
        if isinstance(error, IterationStoppedError):
            return self.task_cancelled()
        self.error = error
        self.interrupt("fail", FAILED)
        logger.error("run failed", run_id=self.run_id, step=self.step, phase=self.trace[-1].source, error=repr(error))
        return True

    def _tell(self, record: TransitionRecord | None) -> None:
        """Record, for the observers, what changed since the last delta (the driver hands it to them)."""
        messages: list[ChatMessage] = self._data.get("messages") or []
        version = self.state.version("messages")
        told = self._told
        rewritten = told is None or told[0] != version or told[1] > len(messages)
        new_messages = list(messages) if rewritten else messages[told[1] :]  # type: ignore[index]
        self._told = (version, len(messages))
        # A rewritten conversation starts a whole snapshot (stores replay from it): it carries the
        # whole trace, as it carries every message.
        trace, self._told_trace = self.trace[0 if rewritten else self._told_trace :], len(self.trace)
        fields = None if record is not None and record.dest not in ACTIVE_PHASES else self.snapshot_fields()
        snapshot = self.snapshot if record is not None and record.dest is PAUSED else None
        self._deltas.append(
            RunDelta(self.run_id, record, new_messages, rewritten, trace, fields, snapshot, self.exit_reason)
        )

    def take_deltas(self) -> list[RunDelta]:
        """The deltas recorded since the last call, oldest first, for the driver to give the observers."""
        deltas, self._deltas = self._deltas, []
        return deltas

    # -- snapshots -------------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the agent configuration this run belongs to (in its snapshots)."""
        if self._fingerprint is None:
            self._fingerprint = self.config.fingerprint()
        return self._fingerprint

    def _waiting_for(self) -> PauseReason:
        """Why a run pauses for decisions: its calls in doubt, or those a confirmation waits for."""
        unknown = [c for c in self.pending if c.status is CALL_UNKNOWN]
        if unknown:
            return OutcomeUnknown([c.key for c in unknown], [c.call.tool_name for c in unknown])
        waiting = [c for c in self.pending if c.status is CALL_UNDECIDED]
        first = waiting[0]
        strategy = self.config.confirmation.strategy_for(first.call.tool_name)
        return AwaitingDecision(
            first.call.tool_name,
            first.key,
            [c.key for c in waiting],
            getattr(strategy, "snapshot_file_path", None),
            {c.call.tool_name: c.tool.description if c.tool else "" for c in waiting},
        )

    def started_calls(self) -> list[str]:
        """The journal: the calls handed to the tools (or in doubt after a crash), while TOOL_RUN's tools run.

        After a crash, those without a recorded result are in doubt (``runs_again_after_crash``).
        """
        if self.phase is not TOOL_RUN or PHASE_WORK[TOOL_RUN][self.stage : self.stage + 1] != (Work.RUN_TOOLS,):
            return []
        started = (CALL_READY, CALL_DONE, CALL_UNKNOWN)
        return [c.key for c in self.pending if c.status in started]

    def snapshot_fields(self, pause: PauseReason | None = None, stage: int | None = None) -> dict[str, Any]:
        """The snapshot of the run where it stands (paused for ``pause``), but ``messages``, ``trace`` and ``created_at``."""
        return {
            "run_id": self.run_id,
            "phase": self.phase,
            "stage": self.stage if stage is None else stage,
            "step": self.step,
            "state": serialize_value({k: v for k, v in self._data.items() if k != "messages"}),
            "pending_tool_calls": [c.to_dict() for c in self.calls],
            "completed_tool_results": {
                c.key: c.outcome.to_dict() for c in self.pending if c.status is CALL_DONE and c.outcome
            },
            "started_tool_calls": self.started_calls() if pause is None or isinstance(pause, Cancelled) else [],
            "exit_reason": self.exit_reason,
            "break_point": None if pause is None else pause.to_dict(),
            "decisions": list(self.decisions),
            "agent_fingerprint": self.fingerprint,
            "trace_context": self.trace_context,
        }

    def make_snapshot(self, pause: PauseReason | None = None, stage: int | None = None) -> AgentSnapshot:
        """The run as data, to be resumed where it stands (or at ``stage`` of its phase), paused for ``pause``."""
        return AgentSnapshot.from_dict(
            {
                **self.snapshot_fields(pause, stage),
                "messages": [m.to_dict() for m in self._data.get("messages") or []],
                "trace": [r.to_dict() for r in self.trace],
                "created_at": now_iso(),
            }
        )

    def result(self) -> AgentResult:
        """The documented result: state data, ``last_message``, plus ``exit_reason`` and ``trace``."""
        return run_result(self._data, self.exit_reason, self.trace, self.output() if self.config.output else _NO_OUTPUT)


def result_record(run: AgentRun) -> dict[str, Any]:
    """A finished run as data (the workflow's output): its snapshot fields, in DONE."""
    return {
        **run.snapshot_fields(),
        "phase": run.phase.value,
        "messages": [m.to_dict() for m in run.state.data.get("messages") or []],
        "trace": [r.to_dict() for r in run.trace],
        "created_at": now_iso(),
    }


def result_from_record(record: dict[str, Any], output: OutputType | None = None) -> AgentResult:
    """``Agent.run``'s result for a finished run's record (``output``: the agent's output type, if it has one)."""
    data = {**deserialize_value(record["state"]), "messages": [ChatMessage.from_dict(m) for m in record["messages"]]}
    trace = [TransitionRecord.from_dict(r) for r in record["trace"]]
    if output is None:
        return run_result(data, record["exit_reason"], trace)
    # A run that ended on an answer ended on the exit condition its exit reason names.
    answer = answer_of(data["messages"], record["exit_reason"])
    value, problems = (None, [""]) if answer is None else output.check(answer)
    return run_result(data, record["exit_reason"], trace, None if problems else value)


def final_snapshot(record: dict[str, Any], segment: int) -> AgentSnapshot:
    """A finished run where it stood last: in EXIT_CHECK with its work done, before the edge to DONE.

    What a snapshot store keeps of a finished run; resuming it takes the same edge to the same result.
    ``record`` is ``result_record``'s; ``segment`` numbers the snapshot (its ``seq``).
    """
    return AgentSnapshot.from_dict(
        {
            **record,
            "phase": EXIT_CHECK.value,
            "stage": len(PHASE_WORK[EXIT_CHECK]),
            "trace": record["trace"][:-1],
            "seq": segment,
        }
    )


def runs_again_after_crash(call: PreparedCall) -> bool:
    """The in-doubt rule: whether a call that started before a crash, its result never recorded, runs again.

    It does when its tool is idempotent; any other waits for a decision (run it again, or give its result).
    """
    return call.tool is not None and call.tool.idempotent


def run_result(
    data: Mapping[str, Any], exit_reason: str | None, trace: list[TransitionRecord], output: Any = _NO_OUTPUT
) -> AgentResult:
    """What ``Agent.run`` returns for a run with this State data, exit reason, trace (and ``output``, if it has one)."""
    return (
        AgentResult(data, exit_reason, trace) if output is _NO_OUTPUT else AgentResult(data, exit_reason, trace, output)
    )


def constant_facts(
    tools: Iterable[Tool],
    *,
    dynamic: bool,
    hooks: Mapping[Work, Sequence[Hook]],
    confirmation: StrategyTable,
    max_agent_steps: int,
    state: Mapping[str, Any] | None = None,
    usage_limits: UsageLimits | None = None,
    loop_detection: LoopDetection | None = None,
    output_retries: int | None = None,
) -> ConstantFacts:
    """The facts runs of a configuration can never change (see ``ConstantFacts``).

    The one rule for runs (``AgentRun``) and drawings (``agentfsm.diagrams``): ``stop_run`` and
    ``continue_run`` are reserved State keys that only hooks (but those whose ``writes`` leaves the
    key out) and tools that map them (``outputs_to_state``; a ``dynamic`` toolset may show such a
    tool) write; without confirmation strategies nothing confirms; ``max_agent_steps`` decides
    whether the model is called at all; without ``usage_limits`` (or with prices only) no usage
    limit is ever reached; without ``loop_detection`` no loop is.
    ``state``: a run's starting State values (a resumed run's may hold
    either key); ``None`` for any new run, which starts without them. ``output_retries``: ``None``
    without an output type (no answer is ever checked), else how often the model may try again.
    """
    start = state or {}

    def never_written(key: str) -> bool:
        writers = dynamic or any(key in (t.outputs_to_state or {}) for t in tools)
        # A hook may say which of these keys it writes (``writes``, as the loop detection's do); else it may write any.
        hooked = any(key in getattr(h, "writes", (key,)) for hs in hooks.values() for h in hs)
        return not (writers or hooked) and not start.get(key)

    constants = [("model_calls_allowed", max_agent_steps > 0)]
    if never_written("stop_run"):
        constants.append(("stop_requested", False))
    if never_written("continue_run"):
        constants.append(("continue_requested", False))
    if not confirmation:
        constants += [("needs_confirmation", False), ("strategy_paused", False)]
    if usage_limits is None or not usage_limits.bounded:
        constants.append(("usage_limit_reached", False))
    if loop_detection is None:
        constants.append(("loop_detected", False))
    if output_retries is None:
        constants += [("output_invalid", False), ("output_retries_left", False)]
    elif output_retries == 0:
        constants.append(("output_retries_left", False))
    return frozenset(constants)


@functools.cache
def watched_interrupts(*, cancel: bool, limits: bool) -> Mapping[Phase, Mapping[str | None, tuple[Transition, ...]]]:
    """The guarded interrupts (``GUARDED_INTERRUPTS``) a run reads on entering a phase, by phase and entering trigger.

    ``cancel``: the run's ``RunHandle`` was cancelled (until then nothing can make ``cancel_requested``
    hold between two transitions: a cancelled task is reported by the driver, ``task_cancelled``);
    ``limits``: the run has a usage limit set. After a trigger, an interrupt whose guard contradicts
    the guard of every declared edge of that trigger into the phase is not read: the edge's guard
    was read at the same boundary, and nothing between the two reads changes what they read
    (EXIT_CHECK's ``continue`` into LLM_CALL holds only while ``usage_limit_reached`` is false, so
    ``usage_limit`` cannot hold after it; the work of the edge, an ``output_retry``'s message,
    counts for no limit; the wall clock moves on by the microseconds in between). ``None`` gives
    those read after any other trigger (a start's, a resume's).
    """
    # A guarded interrupt not named here (a new one in the table) is read wherever its guard is not contradicted.
    read = {"cancel": cancel, "usage_limit": limits}
    watched: dict[Phase, Mapping[str | None, tuple[Transition, ...]]] = {}
    for phase, guarded in GUARDED_INTERRUPTS.items():
        interrupts = tuple(t for t in guarded if read.get(t.trigger, True))
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


def check_facts_readable(run_class: type) -> None:
    """Refuse, with ``MachineError``, a fact (``FACT_NAMES``) that ``run_class`` has no attribute for."""
    missing = [name for name in FACT_NAMES if not hasattr(run_class, name)]
    if missing:
        raise MachineError(
            f"Facts {missing} are declared in agentfsm.machine.Facts but {run_class.__name__} does not work them "
            "out: add a property for each."
        )


check_facts_readable(AgentRun)
#: The work of edges that change the run's data as they are taken (runs with an output type only).
_EDGE_WORK: dict[str, Callable[[AgentRun], None]] = {
    "output_retry": AgentRun._send_output_back,
    "output_failed": AgentRun._output_failed,
    "output_capped": AgentRun._output_failed,
    "output_limited": AgentRun._output_failed,
}

#: Which method does each work item: an action for the driver, or ``None`` once done in the run.
_DO: dict[Work, Callable[[AgentRun, Work], Action | None]] = {
    Work.CALL_MODEL: AgentRun._call_model,
    Work.PREPARE_CALLS: AgentRun._prepare_calls,
    Work.RUN_TOOLS: AgentRun._run_tools,
    Work.DECIDE: AgentRun._decide,
    Work.CLEAR_CONTINUE: AgentRun._clear_continue,
    Work.FINISH: AgentRun._finish,
    Work.REPORT_PAUSE: AgentRun._report_pause,
    Work.RAISE_ERROR: AgentRun._raise_error,
    **dict.fromkeys(HOOK_POINTS, AgentRun._run_hooks),
}
if set(_DO) != set(Work):
    raise MachineError(f"Work items without a method in agentfsm._core.runtime._DO: {sorted(set(Work) - set(_DO))}.")
