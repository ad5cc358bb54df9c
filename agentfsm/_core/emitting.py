"""How the drivers hand a run's events to its ``on_event`` handler.

The run records the events of its own moves (transitions of both machines, decisions, resume:
``AgentRun.take_events``); the drivers add those of the I/O they do (model calls and chunks, tool
calls, hooks, pause, start and end) through an ``Emitter``. Each event goes out after the run's
recorded ones, so the handler sees them in the order they happened. A driver builds an
``Emitter`` only when the run records events (``AgentRun.records_events``: it has a handler, its
snapshot store keeps events, logging is on, or a process-wide consumer is registered,
``agentfsm._core.listeners``): nobody listening costs nothing. Logging (``agentfsm.logs``),
OpenTelemetry (``agentfsm.telemetry``) and a store that keeps the events for other processes (the
review page's live view) are consumers of the events like any handler: ``log_event`` writes the
transitions of both machines.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentfsm._core import listeners
from agentfsm._core.actions import Action, CallModel, Fail, Finish, RunTools
from agentfsm._core.runtime import AgentRun, add_usage, bad_model_output
from agentfsm.events import (
    CallChanged,
    Event,
    EventHandler,
    HookRan,
    ModelChunk,
    ModelEnded,
    ModelFailed,
    ModelStarted,
    PhaseChanged,
    RunEnded,
    RunPaused,
    RunStarted,
    ToolEnded,
    ToolStarted,
    error_text,
)
from agentfsm.logs import logger
from agentfsm.machine import CALL_FAILED, CALL_READY, DONE, IDLE, Work
from agentfsm.messages import ChatMessage, StreamingCallback, StreamingChunk
from agentfsm.snapshot import AgentSnapshot
from agentfsm.tools.invoker import PreparedCall, error_type_name


def log_event(event: Event) -> None:
    """Log an event at DEBUG, as ``agentfsm.logs`` documents: one ``transition`` or ``call transition`` per edge."""
    if isinstance(event, PhaseChanged):
        logger.debug(
            "transition",
            run_id=event.run_id,
            step=event.step,
            source=str(event.source),  # the Phase member's value
            dest=str(event.dest),
            trigger=event.trigger,
            duration_us=round(event.duration_us, 1),
        )
    elif isinstance(event, CallChanged):
        logger.debug(
            "call transition",
            run_id=event.run_id,
            step=event.step,
            call=event.call,
            source=str(event.source),
            dest=str(event.dest),
            trigger=event.trigger,
        )


def emitter_for(run: AgentRun, generator: Any) -> Emitter | None:
    """The emitter of a run that records events: to its log, the process-wide consumers, its store and its handler; ``None`` when nothing listens."""
    if not run.records_events:
        return None
    handler = run.config.on_event
    consumers = [make(run, generator) for make in listeners.consumers]
    if run.config.record_event is not None:
        consumers.append(run.config.record_event)
    if handler is None and not consumers:
        return LogOnly(run, log_event, generator)
    if run.logs:
        consumers.insert(0, log_event)
    if consumers:
        handler = _chained(consumers, handler)
    assert handler is not None  # a handler, or consumers
    return Emitter(run, handler, generator)


def _chained(consumers: list[EventHandler], handler: EventHandler | None) -> EventHandler:
    """Each event to the ``consumers`` (sync, in order), then to ``handler``, whose return (an awaitable) is passed on."""
    if handler is None and len(consumers) == 1:
        return consumers[0]
    if handler is not None and len(consumers) == 1:
        first = consumers[0]

        def both(event: Event) -> Any:
            first(event)
            return handler(event)

        return both

    def each(event: Event) -> Any:
        for consumer in consumers:
            consumer(event)
        return None if handler is None else handler(event)

    return each


def model_name(generator: Any) -> str:
    """What events call a chat generator: its ``model`` (or ``model_name``), else its class name."""
    for attribute in ("model", "model_name"):
        name = getattr(generator, attribute, None)
        if isinstance(name, str) and name:
            return name
    return type(generator).__name__


class Emitter:
    """Builds the drivers' events for one run and hands them, after the run's own, to its handler."""

    __slots__ = ("_handler", "_model", "_run", "_tools_started")

    def __init__(self, run: AgentRun, handler: EventHandler, generator: Any) -> None:
        self._run = run
        self._handler = handler
        self._model = model_name(generator)
        self._tools_started = 0.0

    # -- handing events out ----------------------------------------------------------------------

    @property
    def handler(self) -> EventHandler | None:
        """What the run's events are handed to; ``None`` when the run only logs (then the drivers' I/O makes no event)."""
        return self._handler

    def send(self, event: Event | None = None) -> None:
        """Hand out the run's recorded events, then ``event`` (in this thread)."""
        handler = self._handler
        for recorded in self._run.take_events():
            handler(recorded)
        if event is not None:
            handler(event)

    def start(self) -> None:
        """Send the run's first event, ``RunStarted``, then what the run recorded before it was driven (a resume)."""
        self._handler(self.started())
        self.send()

    async def start_async(self) -> None:
        """Like ``start``, awaiting an async handler."""
        if inspect.isawaitable(pending := self._handler(self.started())):
            await pending
        await self.send_async()

    async def send_async(self, event: Event | None = None) -> None:
        """Like ``send``; an async handler is awaited."""
        handler = self._handler
        for recorded in self._run.take_events():
            if inspect.isawaitable(pending := handler(recorded)):
                await pending
        if event is not None and inspect.isawaitable(pending := handler(event)):
            await pending

    def _before(self, action: Action) -> list[Event]:
        """The events of the action the run handed out, before it is done: tools started, the run's end."""
        match action:
            case RunTools():
                return [*self.tools_started(action.calls), *self.tools_refused(action.calls)]
            case Finish():
                return [self.ended(action.result)]
            case Fail():
                return [self.failed(action.error)]
        return []

    def announce(self, action: Action) -> None:
        """Send what the run recorded, then the events of ``action`` before the driver does it."""
        self.send()
        if type(action) is not CallModel:  # the most frequent action has none
            for event in self._before(action):
                self._handler(event)

    async def announce_async(self, action: Action) -> None:
        """Like ``announce``, awaiting an async handler."""
        await self.send_async()
        for event in self._before(action):
            await self.send_async(event)

    # -- the events of the driver's I/O -------------------------------------------------------------

    def _head(self) -> tuple[str, int, float]:
        return self._run.run_id, self._run.step, time.time()

    def started(self) -> RunStarted:
        """The run's first event: a resumed run's trace ends with its ``resume`` edge."""
        trace = self._run.trace
        return RunStarted(*self._head(), self._run.config.agent_name, bool(trace) and trace[-1].trigger == "resume")

    def model_started(self, action: CallModel) -> ModelStarted:
        """A model call is about to start."""
        run = self._run
        return ModelStarted(run.run_id, run.step, time.time(), self._model, len(action.messages))

    def model_ended(self, output: Any, started: float) -> ModelEnded | ModelFailed:
        """What the model call that started at ``started`` (``perf_counter``) gave."""
        duration = (time.perf_counter() - started) * 1e6
        replies = output.get("replies") if isinstance(output, dict) else None
        if not isinstance(replies, list) or not replies:
            return self.model_failed(bad_model_output(output), started)
        usages, model, reasons = [], None, []
        for reply in replies:
            if not isinstance(reply, ChatMessage):
                return self.model_failed(bad_model_output(output), started)
            meta = reply.meta
            if meta:
                if isinstance(usage := meta.get("usage"), dict):
                    usages.append(usage)
                if model is None and isinstance(named := meta.get("model"), str):
                    model = named
                if isinstance(reason := meta.get("finish_reason"), str):
                    reasons.append(reason)
        run = self._run
        usage = add_usage(None, usages) if usages else {}
        return ModelEnded(run.run_id, run.step, time.time(), model or self._model, usage, reasons, duration)

    def model_failed(self, error: BaseException, started: float) -> ModelFailed:
        """The model call that started at ``started`` raised ``error``."""
        return ModelFailed(*self._head(), self._model, error_text(error), (time.perf_counter() - started) * 1e6)

    def call_model(self, call: Callable[[], Any], action: CallModel) -> Any:
        """Call the model (``call``), its start and end (or failure) sent around it."""
        self.send(self.model_started(action))
        started = time.perf_counter()
        try:
            output = call()
        except BaseException as exc:
            self.send(self.model_failed(exc, started))
            raise
        self.send(self.model_ended(output, started))
        return output

    async def call_model_async(self, call: Callable[[], Awaitable[Any]], action: CallModel) -> Any:
        """Like ``call_model``, awaiting ``call()``."""
        await self.send_async(self.model_started(action))
        started = time.perf_counter()
        try:
            output = await call()
        except BaseException as exc:
            await self.send_async(self.model_failed(exc, started))
            raise
        await self.send_async(self.model_ended(output, started))
        return output

    def chunk(self, chunk: StreamingChunk) -> ModelChunk:
        """A chunk the model streamed."""
        return ModelChunk(*self._head(), chunk)

    def streaming(self, callback: StreamingCallback | None) -> Callable[[StreamingChunk], None] | None:
        """The model's streaming callback: each chunk an event, then given to ``callback`` as before.

        ``None`` without a ``callback``: listening to a run does not change how the model is called.
        """
        if callback is None:
            return None

        def on_chunk(chunk: StreamingChunk) -> None:
            self.send(self.chunk(chunk))
            callback(chunk)

        return on_chunk

    def streaming_async(self, callback: StreamingCallback | None) -> Callable[[StreamingChunk], Awaitable[None]] | None:
        """Like ``streaming``, under ``run_async``: ``callback`` may be async."""
        if callback is None:
            return None

        async def on_chunk(chunk: StreamingChunk) -> None:
            await self.send_async(self.chunk(chunk))
            if inspect.isawaitable(pending := callback(chunk)):
                await pending

        return on_chunk

    def tools_started(self, calls: list[PreparedCall]) -> list[ToolStarted]:
        """The calls of a step handed to their tools (those ready to run)."""
        self._tools_started = time.perf_counter()
        at = time.time()
        return [self._tool_started(c, at) for c in calls if c.status is CALL_READY]

    def _tool_started(self, call: PreparedCall, at: float) -> ToolStarted:
        run = self._run
        return ToolStarted(run.run_id, run.step, at, call.key, call.call.id, call.call.tool_name, dict(call.arguments))

    def tools_refused(self, calls: list[PreparedCall]) -> list[ToolEnded]:
        """The calls of a step answered without running, each ending at once with the error the model reads.

        They were refused: an unknown tool, bad arguments, or past the ``tool_calls`` limit.
        """
        run_id, step, at = self._head()
        return [
            ToolEnded(run_id, step, at, c.key, c.call.id, c.call.tool_name, None, _error_text(c.error), 0.0)
            for c in calls
            if c.status is CALL_FAILED and c.error is not None
        ]

    def tool_ended(self, call: PreparedCall, started: float | None = None) -> ToolEnded:
        """A call finished, its outcome set; it started at ``started`` (``perf_counter``), else with its step's calls."""
        outcome = call.outcome
        error = outcome.error if outcome is not None else None
        result = outcome.value if outcome is not None and error is None else None
        text = _error_text(error) if error is not None else None
        duration = (time.perf_counter() - (self._tools_started if started is None else started)) * 1e6
        run = self._run
        return ToolEnded(
            run.run_id, run.step, time.time(), call.key, call.call.id, call.call.tool_name, result, text, duration
        )

    def tool_ran(self, call: PreparedCall, at: float, started: float) -> tuple[ToolStarted, ToolEnded]:
        """A call that started at ``at`` (``time.time``; ``started``: ``perf_counter``) and finished, outcome set.

        For a driver that learns only once a call finished whether it ran here (a recovered durable
        workflow finds some calls recorded): both of its events then go out together.
        """
        return self._tool_started(call, at), self.tool_ended(call, started)

    def hook_ran(self, point: Work, name: str, started: float, error: BaseException | None) -> HookRan:
        """A hook that started at ``started`` (``perf_counter``) ran, and raised ``error`` if not ``None``."""
        duration = (time.perf_counter() - started) * 1e6
        return HookRan(*self._head(), point.value, name, duration, None if error is None else error_text(error))

    def paused(self, snapshot: AgentSnapshot, path: str | None) -> RunPaused:
        """The run paused: ``snapshot`` as stored (its ``seq``), written to ``path`` if to a file."""
        pause = snapshot.pause
        assert pause is not None  # a paused run's snapshot says why
        return RunPaused(*self._head(), pause.kind, pause.to_dict(), snapshot.seq, path, snapshot)

    def ended(self, result: dict[str, Any]) -> RunEnded:
        """The run finished with ``result``."""
        return RunEnded(*self._head(), result, self._run.exit_reason, None)

    def failed(self, error: BaseException) -> RunEnded:
        """The run failed with ``error``."""
        return RunEnded(*self._head(), None, None, error_text(error))

    def escaped(self, error: BaseException) -> None:
        """``error`` leaves the driver from where the run cannot fail (a hook of IDLE or DONE): its ``RunEnded``.

        From PAUSED and FAILED the stream already ended (``paused``, or ``run_ended`` with the error).
        """
        if self._run.phase in _ENDS_UNANNOUNCED:
            self.send(self.failed(error))

    async def escaped_async(self, error: BaseException) -> None:
        """Like ``escaped``, awaiting an async handler."""
        if self._run.phase in _ENDS_UNANNOUNCED:
            await self.send_async(self.failed(error))


#: Where an error leaves the driver without the run taking its fail edge or announcing its end.
_ENDS_UNANNOUNCED = frozenset({IDLE, DONE})


class LogOnly(Emitter):
    """The emitter of a run that only logs: the log reads the run's transitions, so the drivers' I/O makes no event."""

    __slots__ = ()

    @property
    def handler(self) -> EventHandler | None:
        """``None``: the log reads only what the run recorded."""
        return None

    def send(self, event: Event | None = None) -> None:
        """Log what the run recorded (``event``, one of the drivers', is not logged)."""
        for recorded in self._run.take_events():
            log_event(recorded)

    async def send_async(self, event: Event | None = None) -> None:
        """Like ``send``."""
        self.send()

    def start(self) -> None:
        """Log what the run recorded before it was driven."""
        self.send()

    async def start_async(self) -> None:
        """Like ``start``."""
        self.send()

    def announce(self, action: Action) -> None:
        """Log what the run recorded."""
        self.send()

    async def announce_async(self, action: Action) -> None:
        """Like ``announce``."""
        self.send()

    def call_model(self, call: Callable[[], Any], action: CallModel) -> Any:
        """Call the model."""
        return call()

    async def call_model_async(self, call: Callable[[], Awaitable[Any]], action: CallModel) -> Any:
        """Call the model."""
        return await call()

    def streaming(self, callback: StreamingCallback | None) -> Any:
        """The streaming callback as it is."""
        return callback

    def streaming_async(self, callback: StreamingCallback | None) -> Any:
        """The streaming callback as it is."""
        return callback


def _error_text(error: Exception) -> str:
    """A tool call's error as events give it: its type's name and message."""
    return f"{error_type_name(error)}: {error}"
