"""The drivers of a run: the only places where a run's I/O happens.

``drive_sync`` and ``drive_async`` (and ``agentfsm.durable``'s ``drive_durable``) ask the run for
its next action, write what the run recorded to its observers (``write_deltas``: a durable store
commits there, before the action's I/O), perform the action, and report the result back. They make no decisions of their own, so
they make the same ones (hypothesis tests compare them), and each handles every kind of action: a
new one that a driver does not handle fails type checking (``assert_never``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, assert_never

from agentfsm._core.actions import (
    Backoff,
    CallModel,
    CheckGuardrails,
    Confirm,
    Fail,
    Finish,
    Pause,
    Reconcile,
    RunHooks,
    RunTools,
)
from agentfsm._core.emitting import Emitter, emitter_for
from agentfsm._core.iterating import Outbox, Result, ran
from agentfsm._core.progress import AsyncRelay, SyncRelay, progress_calls
from agentfsm._core.records import RunDelta, RunObserver
from agentfsm._core.runtime import AgentRun
from agentfsm.cancellation import RunHandle
from agentfsm.decisions import ToolExecutionDecision
from agentfsm.errors import (
    AgentFSMSignal,
    BreakpointException,
    HITLBreakpointException,
    InputBreakpointException,
    ModelDeadlineError,
    RunCancelled,
)
from agentfsm.events import Event
from agentfsm.generators.base import ChatGenerator
from agentfsm.guardrails import check_async, check_sync
from agentfsm.hitl.strategies import Decider, optional_keywords
from agentfsm.hooks import Hook, accepts, hook_name
from agentfsm.interrupts import ASK_USER, Asker, AskUser, outside_run
from agentfsm.logs import logger
from agentfsm.machine import Work
from agentfsm.messages import ChatMessage, StreamingCallback, StreamingChunk
from agentfsm.pauses import AwaitingDecision, AwaitingInput, BreakpointHit, Cancelled, InputQuestion, OutcomeUnknown
from agentfsm.reconcile import ask, ask_async
from agentfsm.slices.interrupts import hook_asks
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores.base import SnapshotInfo
from agentfsm.tools.invoker import PreparedCall
from agentfsm.tools.tool import IDEMPOTENCY_KEY, idempotency_key
from agentfsm.workers import result_within, run_in_own_thread, run_in_worker

#: Keeps the snapshot of a paused run (a snapshot store's ``save``): says where it is kept.
SavePause = Callable[[AgentSnapshot], SnapshotInfo]


def pause_exception(snapshot: AgentSnapshot, save: SavePause | None = None) -> BreakpointException:
    """The ``BreakpointException`` for a paused run, once its snapshot is kept where it was asked to be.

    A run that waits for a confirmation decision raises ``HITLBreakpointException``.
    """
    if save is not None:  # the snapshot given out says where it is stored: it is the run's head
        snapshot = snapshot.model_copy(update={"seq": save(snapshot).seq})
    pause = snapshot.pause
    directory = pause.breakpoint.get("snapshot_file_path") if isinstance(pause, BreakpointHit) else None
    if isinstance(pause, AwaitingDecision):
        directory = pause.snapshot_file_path
    path = str(snapshot.to_file(Path(directory) / snapshot.file_name())) if directory else None
    where = f" (saved to {path})" if path else ""
    if isinstance(pause, OutcomeUnknown):
        notes = "".join(f" {key}: {note}." for key, note in pause.notes.items())
        return BreakpointException(
            f"Run {snapshot.run_id} stopped in tool_run: tool calls {pause.tool_call_ids} "
            f"({', '.join(pause.tool_names)}) started before the run was interrupted, and their outcome "
            f"is unknown{where}.{notes} Resume it with agent.run(snapshot=exc.snapshot, decisions=[...]): "
            "execute=True runs a call again, execute=False records its feedback as the call's result.",
            snapshot,
            path,
        )
    if isinstance(pause, AwaitingInput):
        asked = "; ".join(f"{q.id}: {q.question!r}" for q in pause.questions)
        return InputBreakpointException(
            f"Run {snapshot.run_id} waits for a person's answers ({asked}){where}. Resume it with "
            "agent.run(snapshot=exc.snapshot, decisions=[InputAnswer(question_id, answer), ...]).",
            snapshot,
            path,
        )
    if isinstance(pause, Cancelled):
        return RunCancelled(
            f"Run {snapshot.run_id} was cancelled and stopped in {snapshot.phase.value.lower()} at step "
            f"{snapshot.step}{where}. Resume it with agent.run(snapshot=exc.snapshot).",
            snapshot,
            path,
        )
    if isinstance(pause, AwaitingDecision):
        return HITLBreakpointException(
            f"Run {snapshot.run_id} waits for a decision on {pause.tool_name} (call {pause.tool_call_id})"
            f"{where}. Resume it with agent.run(snapshot=exc.snapshot, decisions=[...]).",
            pause.tool_name,
            path,
            pause.tool_call_id,
            snapshot,
        )
    return BreakpointException(
        f"Breakpoint: run {snapshot.run_id} paused before {snapshot.phase.value} at step {snapshot.step}{where}. "
        "Resume it with agent.run(snapshot=exc.snapshot).",
        snapshot,
        path,
    )


def model_arguments(action: CallModel, streaming_callback: Any) -> dict[str, Any]:
    """The chat generator's arguments for a model call.

    ``streaming_callback`` is passed only when one is set, as Haystack does: a generator whose
    ``run(messages, tools=None)`` does not take one works as long as nobody streams.
    """
    arguments: dict[str, Any] = {"messages": action.messages, "tools": action.tools or None}
    if streaming_callback is not None:
        arguments["streaming_callback"] = streaming_callback
    if action.generation_kwargs is not None:  # only to generators that declare they take them
        arguments["generation_kwargs"] = action.generation_kwargs
    return arguments


def _model_timed_out(timeout: float) -> ModelDeadlineError:
    return ModelDeadlineError(
        f"The chat generator did not answer within the agent's model_timeout of {timeout:g} s; the run stopped "
        "waiting for it. Give the agent a larger model_timeout (an HTTP client's own deadline= cancels its request)."
    )


def call_model(generator: ChatGenerator, action: CallModel, streaming_callback: Any) -> Any:
    """The generator's output for a model call, in this thread; with a timeout, waited for that long.

    A timed call runs in a thread of its own: past the timeout the run stops waiting (the call,
    which cannot be stopped, runs on and its reply is dropped) and ``ModelDeadlineError`` is raised.
    """
    if action.timeout is None:
        return generator.run(**model_arguments(action, streaming_callback))
    gate = _Gate(streaming_callback)
    arguments = model_arguments(action, None if streaming_callback is None else gate)
    done, output = result_within(run_in_own_thread(generator.run, **arguments), action.timeout)
    if not done:
        gate.close()
        raise _model_timed_out(action.timeout)
    return output


async def call_model_async(generator: ChatGenerator, action: CallModel, streaming_callback: Any) -> Any:
    """Like ``call_model`` on the event loop: ``run_async`` when the generator has it (cancelled at the timeout)."""
    run_async = getattr(generator, "run_async", None)
    if action.timeout is None:
        arguments = model_arguments(action, streaming_callback)
        return (
            await run_async(**arguments) if run_async is not None else await run_in_worker(generator.run, **arguments)
        )
    if run_async is not None:  # cancelled at the timeout: it streams nothing after it
        call = run_async(**model_arguments(action, streaming_callback))
    else:
        gate = _Gate(streaming_callback)
        arguments = model_arguments(action, None if streaming_callback is None else gate)
        call = asyncio.wrap_future(run_in_own_thread(generator.run, **arguments))
    try:
        async with asyncio.timeout(action.timeout) as bound:
            return await call
    except TimeoutError:
        if not bound.expired():
            raise  # the generator's own TimeoutError
        if run_async is None:
            gate.close()
        raise _model_timed_out(action.timeout) from None


class _Gate:
    """A streaming callback that passes chunks on until the call it serves is abandoned at its timeout.

    An abandoned sync call runs on in its thread: without the gate its chunks would reach the
    user's callback after the run failed, or between the chunks of the next call.
    """

    __slots__ = ("_callback", "_open")

    def __init__(self, callback: Any) -> None:
        self._callback = callback
        self._open = True

    def __call__(self, chunk: StreamingChunk) -> Any:
        return self._callback(chunk) if self._open else None

    def close(self) -> None:
        """Drop every chunk from now on."""
        self._open = False


def _tool_chunks(messages: list[ChatMessage]) -> list[StreamingChunk]:
    return [StreamingChunk(tool_call_result=m.tool_call_result, index=i) for i, m in enumerate(messages)]


def _hook_kwargs(action: RunHooks, h: Hook) -> dict[str, Any]:
    """What a hook is given beside the State, when it takes it: the error (``on_error``), the run's ``hook_context``."""
    kwargs: dict[str, Any] = {}
    if action.error is not None and accepts(h, "error"):
        kwargs["error"] = action.error
    if action.context is not None and accepts(h, "hook_context"):
        kwargs["hook_context"] = action.context
    return kwargs


def _hook_failed(action: RunHooks, h: Hook, exc: Exception) -> None:
    """An ``on_error`` hook that fails is logged: the error that failed the run is the one to report."""
    if action.point is not Work.ON_ERROR:
        raise exc
    logger.error("on_error hook failed", hook=hook_name(h), error=repr(exc))


def _question(
    decide: Callable[..., Any], call: PreparedCall, context: dict[str, Any] | None = None, key: str | None = None
) -> dict[str, Any]:
    """What a strategy is asked about one call, and the extras ``decide`` declares of.

    The extras: the tool's schema, the run's context, and the call's idempotency key (``key``: the
    one its tool is given when it runs, so that a strategy doing work outside the run for the call
    can name it).
    """
    tool = call.tool
    asked: dict[str, Any] = {
        "tool_name": call.call.tool_name,
        "tool_description": tool.description if tool else "",
        "tool_params": dict(call.call.arguments),
        "tool_call_id": call.key,
    }
    extras: dict[str, Any] = {}
    if tool is not None:
        extras["tool_schema"] = tool.parameters
    if context is not None:  # Haystack's name for the request-scoped objects, and agentfsm's
        extras["confirmation_strategy_context"] = extras["hook_context"] = context
    if key is not None:
        extras[IDEMPOTENCY_KEY] = key
    return {**asked, **optional_keywords(decide, extras)}


def _for_call(decision: ToolExecutionDecision, call: PreparedCall) -> ToolExecutionDecision:
    """A strategy's decision, bound to the call it was asked about when it names none (Haystack makes the id optional)."""
    if isinstance(decision, ToolExecutionDecision) and decision.tool_call_id is None:
        return dataclasses.replace(decision, tool_call_id=call.key)
    return decision


def _ask(
    strategy: Decider, call: PreparedCall, context: dict[str, Any] | None = None, key: str | None = None
) -> ToolExecutionDecision | None:
    """The strategy's decision for one call, or ``None`` when it defers (raises ``HITLBreakpointException``)."""
    try:
        return _for_call(strategy.run(**_question(strategy.run, call, context, key)), call)
    except HITLBreakpointException:
        return None


async def _ask_async(
    strategy: Decider, call: PreparedCall, context: dict[str, Any] | None = None, key: str | None = None
) -> ToolExecutionDecision | None:
    """Like ``_ask``: ``run_async`` when the strategy has it, else ``run`` in a worker thread (a UI may block)."""
    decide = getattr(strategy, "run_async", None)
    if decide is None:
        return await run_in_worker(_ask, strategy, call, context, key)
    try:
        return _for_call(await decide(**_question(decide, call, context, key)), call)
    except HITLBreakpointException:
        return None


def back_off(delay: float, handle: RunHandle | None) -> None:
    """Wait ``delay`` seconds before a call's next attempt, in this thread; at once when ``handle`` is cancelled."""
    if delay <= 0:
        return
    if handle is None:
        time.sleep(delay)
        return
    woken = threading.Event()
    handle.on_cancel(woken.set)  # called at once when it was cancelled already
    woken.wait(delay)


async def back_off_async(delay: float, handle: RunHandle | None) -> None:
    """Like ``back_off`` on the event loop: cancelling the task ends the wait too (``asyncio.CancelledError``)."""
    if delay <= 0:
        return
    if handle is None:
        await asyncio.sleep(delay)
        return
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # from the cancelling thread
        loop.call_soon_threadsafe(woken.set)

    handle.on_cancel(wake)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay):
            await woken.wait()


def write_deltas(run: AgentRun) -> None:
    """Hand what the run recorded since the last call to its observers, in this thread, oldest first."""
    _observe_all(run.config.observers, run.take_deltas())


class AsyncDeltaWriter:
    """Writes a run's deltas in worker threads, off the event loop, one write after the other, in order.

    ``completed`` is the ``on_complete`` of the run's tool calls: each finished call's delta is
    written before another call starts in its place, so a failed write stops the run before any
    further tool runs, as under ``drive_sync``.
    """

    __slots__ = ("_lock", "_run")

    def __init__(self, run: AgentRun) -> None:
        self._run = run
        self._lock = asyncio.Lock()

    async def write(self) -> None:
        """Write what the run recorded since the last write, and wait for it."""
        await self._write_in_order(self._run.take_deltas())

    async def _write_in_order(self, deltas: list[RunDelta]) -> None:
        if deltas:
            async with self._lock:  # FIFO: writes happen in the order the deltas were taken
                await run_in_worker(_observe_all, self._run.config.observers, deltas)

    async def completed(self, call: PreparedCall) -> None:
        """Record a finished call and write its delta."""
        self._run.tool_completed(call)
        await self._write_in_order(self._run.take_deltas())


async def _execute_async(
    run: AgentRun,
    action: RunTools,
    streaming_callback: StreamingCallback | None,
    writer: AsyncDeltaWriter | None,
    emitter: Emitter | None = None,
) -> None:
    """Run the action's calls on the event loop; with observers, each finished call's delta is written.

    With a handler, the progress the tools report is handed out as they report it (``AsyncRelay``).
    """
    on_complete = run.tool_completed if writer is None else writer.completed
    invoker = run.config.invoker
    if emitter is not None:
        record = on_complete

        async def completed(call: PreparedCall) -> None:
            await emitter.send_async(emitter.tool_ended(call))
            if inspect.isawaitable(pending := record(call)):
                await pending
            await emitter.send_async()

        on_complete = completed
        reporting = progress_calls(action.calls) if emitter.handler is not None else []
        if reporting:
            relay = AsyncRelay(emitter.send_async)
            relay.attach(run.run_id, run.step, reporting)
            pump = asyncio.ensure_future(relay.pump())
            try:
                await invoker.execute_async(action.calls, streaming_callback, relay.completing(on_complete))
            finally:
                await relay.close(pump)
            return
    await invoker.execute_async(action.calls, streaming_callback, on_complete)


def _observe_all(observers: tuple[RunObserver, ...], deltas: list[RunDelta]) -> None:
    """Each delta, oldest first, to every observer (the sync driver's thread, or a worker of the async one)."""
    for delta in deltas:
        for observer in observers:
            observer.observe(delta)


def _hook_asker(run: AgentRun, action: RunHooks, index: int, h: Hook) -> AskUser | None:
    """What the ``index``-th of the action's hooks is given as ``ask_user``, when it declares it (else ``None``)."""
    if not hook_asks(h):
        return None
    asker = run.hook_asker(action.point, action.first + index)
    return outside_run if asker is None else asker


def _question_of(asker: AskUser | None) -> InputQuestion | None:
    """The question a hook's asker was asked and has no answer for, if any."""
    return asker.asked if isinstance(asker, Asker) else None


def run_hooks(run: AgentRun, action: RunHooks, emitter: Emitter | None = None) -> InputQuestion | None:
    """Run the action's hooks on the run's State, in order, in this thread; each firing an event with an ``emitter``.

    A hook that asks a person (``ask_user``) without an answer stops the point there: its question is returned.
    """
    asking = action.point in run.config.asking_hooks
    if emitter is not None or asking:
        for i, h in enumerate(action.hooks):
            kwargs = _hook_kwargs(action, h)
            asker = _hook_asker(run, action, i, h) if asking else None
            if asker is not None:
                kwargs[ASK_USER] = asker
            started = time.perf_counter()
            try:
                h.run(run.state, **kwargs)
            except Exception as exc:
                question = _question_of(asker)
                if emitter is not None:
                    emitter.send(emitter.hook_ran(action.point, hook_name(h), started, None if question else exc))
                if question is not None:
                    return question
                _hook_failed(action, h, exc)
            else:
                if emitter is not None:
                    emitter.send(emitter.hook_ran(action.point, hook_name(h), started, None))
                if (question := _question_of(asker)) is not None:
                    return question
        return None
    for h in action.hooks:
        try:
            if action.error is None and action.context is None:
                h.run(run.state)
            else:
                h.run(run.state, **_hook_kwargs(action, h))
        except Exception as exc:
            _hook_failed(action, h, exc)
    return None


def ask_strategies(run: AgentRun, action: Confirm) -> list[ToolExecutionDecision | None]:
    """Each call's decision from its strategy (``None`` where it defers), asked in this thread."""
    return [
        _ask(s, c, run.config.hook_context, idempotency_key(run.run_id, run.step, c.key)) for c, s in action.asked()
    ]


def _completed_with_events(emitter: Emitter, record: Callable[[PreparedCall], None]) -> Callable[[PreparedCall], None]:
    """``record`` for each finished call, after its ``tool_ended`` event, and the events it recorded."""

    def completed(call: PreparedCall) -> None:
        emitter.send(emitter.tool_ended(call))
        record(call)
        emitter.send()

    return completed


#: How ``drive_sync`` runs a step's calls: ``ToolInvoker.execute_sync``'s signature.
_ExecuteTools = Callable[[list[PreparedCall], StreamingCallback | None, Callable[[PreparedCall], None]], None]


def _execute_with_events(
    run: AgentRun,
    emitter: Emitter,
    calls: list[PreparedCall],
    streaming_callback: StreamingCallback | None,
    on_complete: Callable[[PreparedCall], None],
) -> None:
    """Run a step's calls for a run someone listens to: the progress its tools report is handed out as they report it.

    Each report goes to the handler in the reporting thread (``SyncRelay``).
    """
    invoker = run.config.invoker
    handler = emitter.handler
    reporting = progress_calls(calls) if handler is not None else []
    if handler is None or not reporting:
        invoker.execute_sync(calls, streaming_callback, on_complete)
        return
    relay = SyncRelay(handler)
    relay.attach(run.run_id, run.step, reporting)
    try:
        invoker.execute_sync(calls, streaming_callback, relay.completing(on_complete))
    finally:
        relay.close()


def drive_sync(
    run: AgentRun,
    generator: ChatGenerator,
    streaming_callback: Callable[[StreamingChunk], Any] | None,
    save_pause: SavePause | None = None,
) -> dict[str, Any]:
    """Perform a run's I/O synchronously until it finishes."""
    return ran(steps_sync(run, generator, streaming_callback, save_pause))


def steps_sync(  # noqa: PLR0915 (one match over every kind of action, the drivers' one place for it)
    run: AgentRun,
    generator: ChatGenerator,
    streaming_callback: Callable[[StreamingChunk], Any] | None,
    save_pause: SavePause | None = None,
    outbox: Outbox | None = None,
) -> Generator[Event, None, dict[str, Any]]:
    """``drive_sync``'s loop; with an ``outbox`` (``Agent.iter``) it yields the run's events after each action.

    Without one it yields nothing and returns the result.
    """
    observers = run.config.observers
    emitter = emitter_for(run, generator)
    execute: _ExecuteTools = (
        run.config.invoker.execute_sync if emitter is None else functools.partial(_execute_with_events, run, emitter)
    )
    on_complete = _recording(run, emitter)
    if emitter is not None:
        emitter.start()
    while True:
        try:
            action = run.next_action()
            if observers:
                write_deltas(run)
            if emitter is not None:
                emitter.announce(action)
                yield from _drained(outbox)  # what the last action and this one's start gave
            match action:
                # Each action's events are handed out before the run records what it did: a loop that
                # stops at one finds the run where it stood when the event happened.
                case CallModel():
                    output = yield from _model_output(generator, action, streaming_callback, emitter, outbox)
                    yield from _drained(outbox)
                    run.model_replied(output)
                case RunTools():
                    yield from _tools_ran(run, action, streaming_callback, execute, on_complete, outbox)
                case Backoff():
                    back_off(action.delay, run.config.cancel)
                    run.backed_off()
                case Reconcile():
                    run.reconciled([ask(f, question) for f, question in action.asked()])
                case RunHooks():
                    asked = run_hooks(run, action, emitter)
                    yield from _drained(outbox)
                    run.hooks_ran(action.point, asked)
                case Confirm():
                    decisions = ask_strategies(run, action)
                    yield from _drained(outbox)
                    run.decided(decisions)
                case CheckGuardrails():
                    run.guardrails_checked(check_sync(action))
                case Pause():
                    paused = pause_exception(action.snapshot, save_pause)
                    if emitter is not None:
                        emitter.send(emitter.paused(paused.snapshot, paused.snapshot_file_path))
                    yield from _drained(outbox)
                    raise paused
                case Finish():
                    return action.result
                case Fail():
                    raise action.error
                case _:
                    assert_never(action)
        except GeneratorExit:  # the loop over the events stopped: the run pauses where it stands
            _stop_where_it_stands(run, save_pause, emitter, outbox)
            raise
        except BaseException as exc:
            if not run.fail(exc):  # not an error of the run's own work (a pause, or the failure itself)
                if emitter is not None:
                    emitter.escaped(exc)
                if not isinstance(exc, AgentFSMSignal):
                    yield from _drained(outbox)
                raise


def _model_output(
    generator: ChatGenerator,
    action: CallModel,
    streaming_callback: StreamingCallback | None,
    emitter: Emitter | None,
    outbox: Outbox | None,
) -> Generator[Event, None, Any]:
    """The generator's output for ``action``; a streamed call's events yielded as they come, with an ``outbox``."""
    if emitter is None:
        return call_model(generator, action, streaming_callback)
    call = functools.partial(call_model, generator, action, emitter.streaming(streaming_callback))
    if outbox is not None and streaming_callback is not None:
        return (yield from outbox.live(functools.partial(emitter.call_model, call, action)))
    return emitter.call_model(call, action)


def _tools_ran(
    run: AgentRun,
    action: RunTools,
    streaming_callback: StreamingCallback | None,
    execute: _ExecuteTools,
    on_complete: Callable[[PreparedCall], None],
    outbox: Outbox | None,
) -> Generator[Event, None, None]:
    """Run the step's calls and record their results; the progress they report yielded as it comes, with an ``outbox``."""
    if outbox is not None and progress_calls(action.calls):
        yield from outbox.live(functools.partial(execute, action.calls, streaming_callback, on_complete))
    else:
        execute(action.calls, streaming_callback, on_complete)
    yield from _drained(outbox)
    results = run.tools_ran()
    if streaming_callback is not None:
        for chunk in _tool_chunks(results):
            streaming_callback(chunk)


def _drained(outbox: Outbox | None) -> Iterator[Event]:
    """The events ``outbox`` holds, oldest first (none without one)."""
    return iter(()) if outbox is None else outbox.drain()


def _recording(run: AgentRun, emitter: Emitter | None) -> Callable[[PreparedCall], None]:
    """What records each finished call under ``drive_sync``: committed before the next one is (with observers), its end an event."""

    def committed(call: PreparedCall) -> None:
        run.tool_completed(call)
        write_deltas(run)

    on_complete = committed if run.config.observers else run.tool_completed
    return on_complete if emitter is None else _completed_with_events(emitter, on_complete)


def _stop_where_it_stands(
    run: AgentRun, save_pause: SavePause | None, emitter: Emitter | None, outbox: Outbox | None
) -> None:
    """Pause a run whose events nobody reads any more, and keep its snapshot: in the store, and in its ``RunHandle``.

    The sync twin of ``_keep_cancelled``: its listeners but the loop (a store, the log) learn it as
    they learn of any pause.
    """
    if outbox is not None:
        outbox.close()
    if not run.task_cancelled():  # it was not in a phase it can pause from
        return
    action = run.next_action()  # its pause reported: nothing else is left to do
    assert isinstance(action, Pause)
    write_deltas(run)
    if emitter is not None:
        emitter.announce(action)
    stopped = pause_exception(action.snapshot, save_pause)
    if emitter is not None:
        emitter.send(emitter.paused(stopped.snapshot, stopped.snapshot_file_path))
    if run.config.cancel is not None:
        run.config.cancel.snapshot = stopped.snapshot


async def _call_model_with_events(
    generator: ChatGenerator, action: CallModel, streaming_callback: StreamingCallback | None, emitter: Emitter
) -> Any:
    """The model's output under ``drive_async``, its start, chunks and end sent as events."""
    call = functools.partial(call_model_async, generator, action, emitter.streaming_async(streaming_callback))
    return await emitter.call_model_async(call, action)


async def _run_hooks_async(run: AgentRun, action: RunHooks, emitter: Emitter | None) -> InputQuestion | None:
    """Run the action's hooks on the event loop, in order (sync ones in worker threads); each firing an event with an ``emitter``.

    A hook that asks a person (``ask_user``) without an answer stops the point there: its question is returned.
    """
    asking = action.point in run.config.asking_hooks
    for i, h in enumerate(action.hooks):
        hook_async = getattr(h, "run_async", None)
        kwargs = {} if action.error is None and action.context is None else _hook_kwargs(action, h)
        asker = _hook_asker(run, action, i, h) if asking else None
        if asker is not None:
            kwargs[ASK_USER] = asker
        started = time.perf_counter()
        try:
            if hook_async is not None:
                await hook_async(run.state, **kwargs)
            else:  # a sync hook runs off the event loop
                await run_in_worker(h.run, run.state, **kwargs)
        except Exception as exc:
            question = _question_of(asker)
            if emitter is not None:
                await emitter.send_async(
                    emitter.hook_ran(action.point, hook_name(h), started, None if question else exc)
                )
            if question is not None:
                return question
            _hook_failed(action, h, exc)
            continue
        if emitter is not None:
            await emitter.send_async(emitter.hook_ran(action.point, hook_name(h), started, None))
        if (question := _question_of(asker)) is not None:
            return question
    return None


async def drive_async(
    run: AgentRun,
    generator: ChatGenerator,
    streaming_callback: StreamingCallback | None,
    save_pause: SavePause | None = None,
) -> dict[str, Any]:
    """Perform a run's I/O on the event loop until it finishes; same decisions as ``drive_sync``.

    What the run records is written to its observers in worker threads, off the event loop.
    """
    result: list[dict[str, Any]] = []
    async for _ in steps_async(run, generator, streaming_callback, save_pause, None, result):
        raise AssertionError("a driver without an outbox yields no event")
    return result[0]


async def steps_async(  # noqa: PLR0915 (one match over every kind of action, as in steps_sync)
    run: AgentRun,
    generator: ChatGenerator,
    streaming_callback: StreamingCallback | None,
    save_pause: SavePause | None,
    outbox: Outbox | None,
    into: list[dict[str, Any]],
) -> AsyncGenerator[Event, None]:
    """``drive_async``'s loop; with an ``outbox`` (``Agent.iter_async``) it yields the run's events after each action.

    The result of a finished run is appended to ``into``.
    """
    writer = AsyncDeltaWriter(run) if run.config.observers else None
    emitter = emitter_for(run, generator)
    if emitter is not None:
        await emitter.start_async()
    while True:
        try:
            action = run.next_action()
            if writer is not None:
                await writer.write()
            if emitter is not None:
                await emitter.announce_async(action)
                for event in _drained(outbox):  # what the last action and this one's start gave
                    yield event
            match action:
                case CallModel():
                    calling = _model_replied_async(run, generator, action, streaming_callback, emitter, outbox)
                    async with contextlib.aclosing(calling):  # a loop that stops closes what runs under it
                        async for event in calling:
                            yield event
                case RunTools():
                    running = _tools_ran_async(run, action, streaming_callback, writer, emitter, outbox)
                    async with contextlib.aclosing(running):
                        async for event in running:
                            yield event
                case Backoff():
                    await back_off_async(action.delay, run.config.cancel)
                    run.backed_off()
                case Reconcile():
                    run.reconciled([await ask_async(f, question) for f, question in action.asked()])
                case RunHooks():
                    asked = await _run_hooks_async(run, action, emitter)
                    for event in _drained(outbox):  # before the run records what the action did (see steps_sync)
                        yield event
                    run.hooks_ran(action.point, asked)
                case Confirm():
                    run.decided(
                        [
                            await _ask_async(
                                s, c, run.config.hook_context, idempotency_key(run.run_id, run.step, c.key)
                            )
                            for c, s in action.asked()
                        ]
                    )
                case CheckGuardrails():
                    run.guardrails_checked(await check_async(action))
                case Pause():
                    paused = pause_exception(action.snapshot, save_pause)
                    if emitter is not None:
                        await emitter.send_async(emitter.paused(paused.snapshot, paused.snapshot_file_path))
                    for event in _drained(outbox):
                        yield event
                    raise paused
                case Finish():
                    into.append(action.result)
                    return
                case Fail():
                    raise action.error
                case _:
                    assert_never(action)
        except (asyncio.CancelledError, GeneratorExit):  # the task, or the loop over the events, stopped
            await _keep_cancelled(run, writer, save_pause, emitter, outbox)
            raise  # the task ends cancelled, as asyncio expects
        except BaseException as exc:
            if not run.fail(exc):
                if emitter is not None:
                    await emitter.escaped_async(exc)
                if not isinstance(exc, AgentFSMSignal):
                    for event in _drained(outbox):
                        yield event
                raise


async def _model_replied_async(
    run: AgentRun,
    generator: ChatGenerator,
    action: CallModel,
    streaming_callback: StreamingCallback | None,
    emitter: Emitter | None,
    outbox: Outbox | None,
) -> AsyncGenerator[Event, None]:
    """Call the model and record its reply; a streamed call's events yielded as they come, with an ``outbox``."""
    call = (
        call_model_async(generator, action, streaming_callback)
        if emitter is None
        else _call_model_with_events(generator, action, streaming_callback, emitter)
    )
    output: list[Any] = []
    awaiting = _awaited(call, outbox if streaming_callback is not None else None, output)
    async with contextlib.aclosing(awaiting):
        async for event in awaiting:
            yield event
    for event in _drained(outbox):
        yield event
    run.model_replied(output[0])


async def _tools_ran_async(
    run: AgentRun,
    action: RunTools,
    streaming_callback: StreamingCallback | None,
    writer: AsyncDeltaWriter | None,
    emitter: Emitter | None,
    outbox: Outbox | None,
) -> AsyncGenerator[Event, None]:
    """Run the step's calls on the event loop and record their results; their progress yielded as it comes, with an ``outbox``."""
    tools = _execute_async(run, action, streaming_callback, writer, emitter)
    awaiting = _awaited(tools, outbox if progress_calls(action.calls) else None, [])
    async with contextlib.aclosing(awaiting):
        async for event in awaiting:
            yield event
    for event in _drained(outbox):
        yield event
    results = run.tools_ran()
    if streaming_callback is not None:
        for chunk in _tool_chunks(results):
            pending = streaming_callback(chunk)
            if inspect.isawaitable(pending):
                await pending


async def _awaited(action: Awaitable[Any], outbox: Outbox | None, into: list[Any]) -> AsyncGenerator[Event, None]:
    """Await ``action``, its result appended to ``into``; with an ``outbox``, its events yielded as they come."""
    if outbox is None:
        into.append(await action)
        return
    live = outbox.live_async(action)
    async with contextlib.aclosing(live):
        async for item in live:
            if isinstance(item, Result):
                into.append(item.value())
            else:
                yield item


async def _keep_cancelled(
    run: AgentRun,
    writer: AsyncDeltaWriter | None,
    save_pause: SavePause | None,
    emitter: Emitter | None,
    outbox: Outbox | None = None,
) -> None:
    """Pause a run whose task (or loop over its events) was cancelled, and keep its snapshot: in the store, and in its ``RunHandle``.

    Its listeners learn it as they learn of any pause: the ``cancel`` transition, then ``paused``
    (but a loop that stopped). The task's cancellation was delivered already, so these awaits are
    not cut short.
    """
    if outbox is not None:
        outbox.close()
    if not run.task_cancelled():  # it was not in a phase it can pause from
        return
    action = run.next_action()  # its pause reported: nothing else is left to do
    assert isinstance(action, Pause)
    if writer is not None:
        await writer.write()
    if emitter is not None:
        await emitter.announce_async(action)
    stopped = await run_in_worker(pause_exception, action.snapshot, save_pause)
    if emitter is not None:
        await emitter.send_async(emitter.paused(stopped.snapshot, stopped.snapshot_file_path))
    if run.config.cancel is not None:
        run.config.cancel.snapshot = stopped.snapshot
