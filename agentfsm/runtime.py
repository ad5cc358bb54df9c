"""One agent run as a sans-I/O state machine, and the two thin drivers that perform its I/O.

``AgentRun`` never calls a model or a tool. It says what to do next as data
(``CallModel``, ``RunTools``, ``Finish``), takes the results (``model_replied``, ``tools_ran``),
and moves between phases only through the declared table in ``agentfsm.machine``. ``drive_sync``
and ``drive_async`` are the only places where I/O happens; they share every decision.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from logging import DEBUG
from typing import Any, NamedTuple, Protocol

from agentfsm.errors import MachineError, ModelClientError
from agentfsm.logs import logger, stdlib_logger
from agentfsm.machine import DISPATCH, TERMINAL_PHASES, Phase, Transition
from agentfsm.messages import ChatMessage, StreamingCallback, StreamingChunk, ToolCall
from agentfsm.serialization import serialize_value
from agentfsm.snapshot import AgentSnapshot, Breakpoint, now_iso, pause_exception
from agentfsm.state import State, merge_lists
from agentfsm.tools.invoker import NOT_RUN, CallOutcome, PreparedCall, ToolInvoker
from agentfsm.tools.tool import Tool
from agentfsm.tools.toolset import Toolset
from agentfsm.workers import run_in_worker

# The phases as module constants: ``Phase.X`` is an enum attribute lookup (~0.1 µs in CPython 3.11),
# and the step function asks which phase the run is in a dozen times a step.
IDLE = Phase.IDLE
LLM_CALL = Phase.LLM_CALL
TOOL_PENDING = Phase.TOOL_PENDING
CONFIRM = Phase.CONFIRM
TOOL_RUN = Phase.TOOL_RUN
EXIT_CHECK = Phase.EXIT_CHECK
DONE = Phase.DONE
PAUSED = Phase.PAUSED
FAILED = Phase.FAILED


class TransitionRecord(NamedTuple):
    """One edge taken by a run: at which step, from where to where, by which trigger, after how long."""

    step: int
    source: Phase
    dest: Phase
    trigger: str
    duration_us: float

    def to_dict(self) -> dict[str, Any]:
        """Serialize to JSON-compatible values (phases are ``str`` enums)."""
        return {
            "step": self.step,
            "source": self.source,
            "dest": self.dest,
            "trigger": self.trigger,
            "duration_us": self.duration_us,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransitionRecord:
        """Invert ``to_dict``."""
        return cls(data["step"], Phase(data["source"]), Phase(data["dest"]), data["trigger"], data["duration_us"])


class RunObserver(Protocol):
    """Told about every transition and every finished tool call (durable snapshot stores listen here)."""

    def transition(self, run: AgentRun, record: TransitionRecord) -> None:
        """``run`` just took ``record``'s edge; its phase's work has not started."""

    def tool_completed(self, run: AgentRun, key: str) -> None:
        """The call known as ``key`` finished; its outcome is in ``run.completed``."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What a run needs from its agent, fixed for the run's duration."""

    tools: dict[str, Tool]
    #: The exit conditions that name tools (a text reply always ends the run).
    tool_exits: frozenset[str]
    max_agent_steps: int
    invoker: ToolInvoker
    #: Works out the agent's fingerprint; called once, by the run's first snapshot (a run that
    #: makes none never pays for it).
    fingerprint: Callable[[], str]
    dynamic: tuple[Toolset, ...] = ()
    break_point: Breakpoint | None = None
    observers: tuple[RunObserver, ...] = ()


# -- actions: what the driver must do next ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallModel:
    """Call the chat generator with these messages and tools, then ``model_replied``.

    Both lists belong to the run and are not to be modified: ``messages`` is its history, and
    ``tools`` the same list at every call of a run without dynamic toolsets (which then gets the
    same ``CallModel`` at every call).
    """

    messages: list[ChatMessage]
    tools: list[Tool]


@dataclass(slots=True)
class RunTools:
    """Execute these calls (``None``: already completed), report each to ``tool_completed``, then ``tools_ran``."""

    calls: Sequence[PreparedCall | None]


@dataclass(slots=True)
class Finish:
    """The run is over; ``result`` is what ``Agent.run`` returns."""

    result: dict[str, Any]


@dataclass(slots=True)
class Pause:
    """A breakpoint matched; the driver raises ``BreakpointException`` with this snapshot."""

    snapshot: AgentSnapshot


Action = CallModel | RunTools | Finish | Pause


class AgentRun:
    """The state of one run and the decisions that move it along the declared transitions.

    The facts the guards read (``agentfsm.machine.Facts``) are plain attributes, kept up to date
    where they change: the guards run four times a step.
    """

    #: No confirmation strategies are configurable yet: no call needs one, none pauses the run.
    needs_confirmation = False
    strategy_paused = False

    def __init__(self, config: RunConfig, state: State, run_id: str | None = None) -> None:
        self.config = config
        self.state = state
        self.run_id = run_id or uuid.uuid4().hex
        self.phase = IDLE
        self.step = 0
        self.trace: list[TransitionRecord] = []
        self.pending: list[PreparedCall] = []
        self.completed: dict[str, CallOutcome] = {}
        self.snapshot: AgentSnapshot | None = None
        self._fingerprint: str | None = None
        self._last_calls: list[ToolCall] = []
        self._pending_data: list[dict[str, Any]] | None = None  # _last_calls serialized, once per reply
        self._keys: list[str] = []
        self._data = state.data
        self._observers = config.observers
        #: The tools handed to the model, one list for the whole run unless dynamic toolsets change them.
        self._model_tools = None if config.dynamic else list(config.tools.values())
        #: The last ``CallModel``: the next model call reuses it while its history and tools are the same lists.
        self._call_model: CallModel | None = None
        self._break_point = config.break_point
        self._messages_in_place = state.schema["messages"]["handler"] is merge_lists
        self._has_tools = bool(config.tools or config.dynamic)
        self._entered = time.perf_counter()
        #: Facts: the last reply asked for tool calls and this run has tools to run them.
        self.has_tool_calls = False
        #: Facts: fewer than ``max_agent_steps`` model calls have been made.
        self.steps_left = config.max_agent_steps > 0
        self._set_exit(None)

    def _set_exit(self, reason: str | None) -> None:
        """Set ``exit_reason`` and the ``exit_reached`` fact with it."""
        self.exit_reason = reason
        #: Facts: an exit condition is met (``exit_reason`` says which).
        self.exit_reached = reason is not None

    # -- moving through the table ----------------------------------------------------------------

    def _advance(self, interrupt: Transition | None = None, check_breakpoint: bool = True) -> None:
        """Take the declared edge out of the current phase whose guard holds, or ``interrupt``."""
        if interrupt is None:
            transition = _next_edge(self.phase, self)
        else:
            # Interrupt edges are built by the runtime: check them against the table. Other edges
            # come from Dispatch.next, which only returns declared ones.
            DISPATCH.check(self.phase, interrupt.trigger, interrupt.dest)
            transition = interrupt
        now = _perf_counter()
        dest = transition.dest
        record = _new_record(
            TransitionRecord, (self.step, self.phase, dest, transition.trigger, (now - self._entered) * 1e6)
        )
        self.trace.append(record)
        self.phase = dest
        self._entered = now
        if _log_enabled(DEBUG):
            logger.debug(
                "transition",
                run_id=self.run_id,
                step=record.step,
                source=record.source.value,
                dest=record.dest.value,
                trigger=record.trigger,
                duration_us=round(record.duration_us, 1),
            )
        if self._observers:
            for observer in self._observers:
                observer.transition(self, record)
        bp = self._break_point
        # The visit count scans the trace: only worth it when entering the breakpoint's phase.
        if (
            bp is not None
            and check_breakpoint
            and bp.target_phase is dest
            and bp.matches(dest, self.step, self._visits(), self._pending_names())
        ):
            self._pause(bp)

    def _visits(self) -> int:
        """How many times the current phase was entered before (resumes do not count)."""
        return sum(1 for r in self.trace if r.dest is self.phase and r.trigger != "resume") - 1

    def _pending_names(self) -> list[str]:
        return [c.tool_name for c in self._last_calls]

    def _prepare(self) -> None:
        calls = self._last_calls
        self.pending = self.config.invoker.prepare(calls, self.state, self.current_tools())
        # How each call is known in completed_tool_results: its id, or its position in the reply.
        self._keys = [c.id if c.id is not None else f"#{i}" for i, c in enumerate(calls)]

    def _pause(self, bp: Breakpoint) -> None:
        # The snapshot exists before the pause edge is taken, so observers of that edge can store it.
        self.snapshot = self.make_snapshot(self.phase, bp.to_dict())
        self._advance(Transition("pause", self.phase, PAUSED, interrupt=True), check_breakpoint=False)

    def make_snapshot(self, phase: Phase | None = None, break_point: dict[str, Any] | None = None) -> AgentSnapshot:
        """The run as data, to be resumed in ``phase`` (default: the current phase)."""
        fields = self.snapshot_body(phase or self.phase, break_point)
        # The containers the body shares with the run are copied: the snapshot is the caller's to change.
        fields["pending_tool_calls"] = [dict(call) for call in fields["pending_tool_calls"]]
        fields["completed_tool_results"] = dict(fields["completed_tool_results"])
        fields["created_at"] = now_iso()
        fields["messages"] = [m.to_dict() for m in self.state.data.get("messages") or []]
        fields["trace"] = [r.to_dict() for r in self.trace]
        # Built from the run's own data, valid by construction: validation is for snapshots being loaded.
        return AgentSnapshot.model_construct(**fields)

    def snapshot_body(self, phase: Phase, break_point: dict[str, Any] | None = None) -> dict[str, Any]:
        """The snapshot fields except ``messages`` and ``trace``, which grow with the run, and ``created_at``.

        A field that has not changed since the last body is the same object as in that body (a
        durable store keeps only what changed); the values are not to be modified.
        """
        if self.has_tool_calls and phase in _CALL_PHASES:
            pending = self._pending_data
            if pending is None:
                pending = self._pending_data = [c.to_dict() for c in self._last_calls]
        else:
            pending = _NO_CALLS
        completed = self.completed
        return {
            "run_id": self.run_id,
            "phase": phase,
            "step": self.step,
            "state": serialize_value({k: v for k, v in self.state.data.items() if k != "messages"}),
            "pending_tool_calls": pending,
            "completed_tool_results": {k: o.to_dict() for k, o in completed.items()} if completed else _NO_RESULTS,
            "exit_reason": self.exit_reason,
            "break_point": break_point,
            "agent_fingerprint": self.fingerprint,
        }

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the agent configuration this run belongs to (in its snapshots)."""
        if self._fingerprint is None:
            self._fingerprint = self.config.fingerprint()
        return self._fingerprint

    @classmethod
    def from_snapshot(
        cls, config: RunConfig, state: State, snapshot: AgentSnapshot, fingerprint: str | None = None
    ) -> AgentRun:
        """Rebuild a paused run; the resume edge is taken without re-running what led to it.

        ``fingerprint`` is the agent's, when the caller has worked it out already (to check the snapshot).
        """
        run = cls(config, state, snapshot.run_id)
        run._fingerprint = fingerprint
        run.phase = PAUSED
        run.step = snapshot.step
        run.steps_left = run.step < config.max_agent_steps
        run._set_exit(snapshot.exit_reason)
        run.trace = [TransitionRecord.from_dict(r) for r in snapshot.trace]
        run._last_calls = [ToolCall.from_dict(c) for c in snapshot.pending_tool_calls]
        run.has_tool_calls = bool(run._last_calls)
        run.completed = {key: CallOutcome.from_dict(o) for key, o in snapshot.completed_tool_results.items()}
        run._advance(Transition("resume", PAUSED, snapshot.phase, interrupt=True), check_breakpoint=False)
        if run.phase in (CONFIRM, TOOL_RUN):
            run._prepare()
        return run

    def current_tools(self) -> dict[str, Tool]:
        """The tools the model can call now: the run's tools and what its dynamic toolsets show."""
        if not self.config.dynamic:
            return self.config.tools
        tools = dict(self.config.tools)
        for toolset in self.config.dynamic:
            tools.update((t.name, t) for t in toolset)
        return tools

    def _expect(self, phase: Phase, what: str) -> None:
        if self.phase is not phase:
            raise MachineError(f"{what} is only valid in {phase.value}, but the run is in {self.phase.value}.")

    def _append_messages(self, messages: list[ChatMessage]) -> None:
        if self._messages_in_place:
            # Same result as State.set with merge_lists, without copying the history on every step.
            self._data.setdefault("messages", []).extend(messages)
        else:
            self.state.set("messages", messages)

    # -- the protocol with the drivers ----------------------------------------------------------

    def start(self) -> None:
        """Leave IDLE: the first model call is next."""
        self._expect(IDLE, "start")
        self._data["step_count"] = 0  # reserved key, replace_values: the same as State.set
        self._advance()

    def next_action(self) -> Action:
        """Advance through phases that need no I/O and say which I/O comes next."""
        # The phases in the order a step meets them: each test is one more comparison for the next.
        while True:
            phase = self.phase
            if phase is LLM_CALL:
                messages = self._data["messages"]
                action = self._call_model
                if action is None or action.messages is not messages or self._model_tools is None:
                    tools = self._model_tools
                    action = self._call_model = CallModel(
                        messages, tools if tools is not None else list(self.current_tools().values())
                    )
                return action
            if phase is TOOL_PENDING:
                # Arguments are checked as soon as calls are pending, so a confirmation UI sees checked calls.
                self._prepare()
                self._advance()
            elif phase is TOOL_RUN:
                return RunTools(self.to_execute())
            elif phase is EXIT_CHECK:
                self._advance()
                if self.phase is DONE and self.exit_reason is None:
                    self._set_exit("max_agent_steps")
                    logger.warning(
                        "max_agent_steps reached",
                        run_id=self.run_id,
                        max_agent_steps=self.config.max_agent_steps,
                    )
            elif phase is DONE:
                return Finish(self.result())
            elif phase is CONFIRM:
                # Without confirmation strategies every pending call is approved as prepared.
                self._advance()
            elif phase is IDLE:
                self.start()
            elif phase is PAUSED:
                assert self.snapshot is not None
                return Pause(self.snapshot)
            else:
                raise MachineError(f"The run cannot continue from {phase.value}.")

    def model_replied(self, output: Any) -> None:
        """Record the chat generator's output and move to the tools or to the exit check."""
        if self.phase is not LLM_CALL:
            self._expect(LLM_CALL, "model_replied")
        replies = output.get("replies") if isinstance(output, dict) else None
        if not isinstance(replies, list) or not replies:
            raise _bad_output(output)
        calls: list[ToolCall] = []
        for reply in replies:
            if not isinstance(reply, ChatMessage):
                raise _bad_output(output)
            calls += reply.tool_calls
        self.step += 1
        self.steps_left = self.step < self.config.max_agent_steps
        self._data["step_count"] = self.step  # reserved key, replace_values: the same as State.set
        self._append_messages(replies)
        self.has_tool_calls = bool(calls) and self._has_tools
        self._last_calls = calls
        self._pending_data = None
        self._set_exit(None if self.has_tool_calls else "text")
        self._advance()

    def to_execute(self) -> Sequence[PreparedCall | None]:
        """The pending calls still to run: ``None`` where a call already completed before a pause or crash."""
        completed = self.completed
        if not completed:
            return self.pending
        return [None if key in completed else p for key, p in zip(self._keys, self.pending, strict=True)]

    def tool_completed(self, index: int, outcome: CallOutcome) -> None:
        """Record one finished call (observers may persist it, so a crash does not run it again)."""
        key = self._keys[index]
        self.completed[key] = outcome
        if self._observers:
            for observer in self._observers:
                observer.tool_completed(self, key)

    def tools_ran(self) -> list[ChatMessage]:
        """Turn the completed calls into messages and move to the exit check; returns the new messages."""
        if self.phase is not TOOL_RUN:
            self._expect(TOOL_RUN, "tools_ran")
        completed = self.completed
        outcomes = [completed.get(key) or NOT_RUN for key in self._keys]
        messages = self.config.invoker.finish(self.pending, outcomes, self.state)
        self._append_messages(messages)
        self._set_exit(self._tool_exit(messages) if self.config.tool_exits else None)
        self.pending = []
        self.completed = {}
        self._advance()
        return messages

    def _tool_exit(self, tool_messages: list[ChatMessage]) -> str | None:
        """The first exit-condition tool that ran in this step without an error, if any."""
        errors: dict[str, bool] = {}
        for message in tool_messages:
            result = message.tool_call_result
            if result is not None:
                name = result.origin.tool_name
                errors[name] = errors.get(name, False) or result.error
        matched = [name for name in errors if name in self.config.tool_exits]
        if matched and not any(errors[name] for name in matched):
            return f"tool:{matched[0]}"
        return None

    def fail(self, error: BaseException) -> None:
        """Take the ``fail`` edge after ``error`` escaped from an active phase."""
        if self.phase in TERMINAL_PHASES or self.phase in (IDLE, PAUSED):
            return
        self._advance(Transition("fail", self.phase, FAILED, interrupt=True))
        logger.error("run failed", run_id=self.run_id, step=self.step, error=repr(error))

    def result(self) -> dict[str, Any]:
        """The documented result: state data, ``last_message``, plus ``exit_reason`` and ``trace``."""
        data = dict(self.state.data)
        messages = data.get("messages") or []
        data["last_message"] = messages[-1] if messages else None
        data["exit_reason"] = self.exit_reason
        data["trace"] = list(self.trace)
        return data


#: The phases whose snapshots list the last reply's tool calls: they are pending until the tools ran.
_CALL_PHASES = frozenset({TOOL_PENDING, CONFIRM, TOOL_RUN})
#: Shared by every snapshot body without pending calls or completed results (never modified).
_NO_CALLS: list[dict[str, Any]] = []
_NO_RESULTS: dict[str, Any] = {}

#: A ``TransitionRecord`` without the keyword-argument wrapper NamedTuple puts around tuple.__new__.
_new_record = tuple.__new__
_next_edge = DISPATCH.next
_perf_counter = time.perf_counter
_log_enabled = stdlib_logger.isEnabledFor


def _bad_output(output: Any) -> ModelClientError:
    return ModelClientError(
        f"The chat generator must return {{'replies': [ChatMessage, ...]}} with at least one reply, got {output!r}."
    )


def _tool_chunks(messages: list[ChatMessage]) -> list[StreamingChunk]:
    return [StreamingChunk(tool_call_result=m.tool_call_result, index=i) for i, m in enumerate(messages)]


def drive_sync(
    run: AgentRun, generator: Any, streaming_callback: Callable[[StreamingChunk], Any] | None
) -> dict[str, Any]:
    """Perform a run's I/O synchronously until it finishes."""
    invoker = run.config.invoker
    try:
        while True:
            action = run.next_action()
            if isinstance(action, CallModel):
                run.model_replied(
                    generator.run(
                        messages=action.messages,
                        tools=action.tools or None,
                        streaming_callback=streaming_callback,
                    )
                )
            elif isinstance(action, RunTools):
                invoker.execute_sync(action.calls, streaming_callback, run.tool_completed)
                messages = run.tools_ran()
                if streaming_callback is not None:
                    for chunk in _tool_chunks(messages):
                        streaming_callback(chunk)
            elif isinstance(action, Pause):
                raise pause_exception(action.snapshot)
            else:
                return action.result
    except BaseException as exc:
        run.fail(exc)
        raise


async def drive_async(run: AgentRun, generator: Any, streaming_callback: StreamingCallback | None) -> dict[str, Any]:
    """Perform a run's I/O on the event loop until it finishes; same decisions as ``drive_sync``."""
    invoker = run.config.invoker
    run_async = getattr(generator, "run_async", None)
    try:
        while True:
            action = run.next_action()
            if isinstance(action, CallModel):
                tools = action.tools or None
                if run_async is not None:
                    output = await run_async(
                        messages=action.messages, tools=tools, streaming_callback=streaming_callback
                    )
                else:
                    output = await run_in_worker(
                        generator.run, messages=action.messages, tools=tools, streaming_callback=streaming_callback
                    )
                run.model_replied(output)
            elif isinstance(action, RunTools):
                await invoker.execute_async(action.calls, streaming_callback, run.tool_completed)
                messages = run.tools_ran()
                if streaming_callback is not None:
                    for chunk in _tool_chunks(messages):
                        pending = streaming_callback(chunk)
                        if inspect.isawaitable(pending):
                            await pending
            elif isinstance(action, Pause):
                raise pause_exception(action.snapshot)
            else:
                return action.result
    except BaseException as exc:
        run.fail(exc)
        raise
