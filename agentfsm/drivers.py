"""The two drivers of a run: the only places where a run's I/O happens.

``drive_sync`` and ``drive_async`` ask the run for its next action, perform it, and report the
result back. They make no decisions of their own, so they make the same ones (a hypothesis test
compares them), and each handles every kind of action: a new one that a driver does not handle
fails type checking (``assert_never``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, assert_never

from agentfsm.errors import BreakpointException
from agentfsm.hooks import accepts_error, hook_name
from agentfsm.logs import logger
from agentfsm.machine import Work
from agentfsm.messages import ChatMessage, StreamingCallback, StreamingChunk
from agentfsm.runtime import AgentRun, CallModel, Fail, Finish, Pause, RunHooks, RunTools
from agentfsm.snapshot import AgentSnapshot
from agentfsm.workers import run_in_worker

#: Keeps the snapshot of a paused run (a snapshot store that does not observe the run itself).
SavePause = Callable[[AgentSnapshot], Any]


def pause_exception(snapshot: AgentSnapshot, save: SavePause | None = None) -> BreakpointException:
    """The ``BreakpointException`` for a paused run, once its snapshot is kept where it was asked to be."""
    if save is not None:
        save(snapshot)
    directory = (snapshot.break_point or {}).get("snapshot_file_path")
    path = str(snapshot.to_file(Path(directory) / snapshot.file_name())) if directory else None
    where = f" (saved to {path})" if path else ""
    return BreakpointException(
        f"Breakpoint: run {snapshot.run_id} paused before {snapshot.phase.value} at step {snapshot.step}{where}. "
        "Resume it with agent.run(snapshot=exc.snapshot).",
        snapshot,
        path,
    )


def _tool_chunks(messages: list[ChatMessage]) -> list[StreamingChunk]:
    return [StreamingChunk(tool_call_result=m.tool_call_result, index=i) for i, m in enumerate(messages)]


def _hook_kwargs(action: RunHooks, h: Any) -> dict[str, Any]:
    """What an ``on_error`` hook is given beside the State: the error, if it takes it."""
    return {"error": action.error} if accepts_error(h) else {}


def _hook_failed(action: RunHooks, h: Any, exc: Exception) -> None:
    """An ``on_error`` hook that fails is logged: the error that failed the run is the one to report."""
    if action.point is not Work.ON_ERROR:
        raise exc
    logger.error("on_error hook failed", hook=hook_name(h), error=repr(exc))


def drive_sync(
    run: AgentRun,
    generator: Any,
    streaming_callback: Callable[[StreamingChunk], Any] | None,
    save_pause: SavePause | None = None,
) -> dict[str, Any]:
    """Perform a run's I/O synchronously until it finishes."""
    invoker = run.config.invoker
    while True:
        try:
            action = run.next_action()
            match action:
                case CallModel():
                    run.model_replied(
                        generator.run(
                            messages=action.messages, tools=action.tools or None, streaming_callback=streaming_callback
                        )
                    )
                case RunTools():
                    invoker.execute_sync(action.calls, streaming_callback, run.tool_completed)
                    results = run.tools_ran()
                    if streaming_callback is not None:
                        for chunk in _tool_chunks(results):
                            streaming_callback(chunk)
                case RunHooks():
                    for h in action.hooks:
                        try:
                            if action.error is None:
                                h.run(run.state)
                            else:
                                h.run(run.state, **_hook_kwargs(action, h))
                        except Exception as exc:
                            _hook_failed(action, h, exc)
                    run.hooks_ran(action.point)
                case Pause():
                    raise pause_exception(action.snapshot, save_pause)
                case Finish():
                    return action.result
                case Fail():
                    raise action.error
                case _:
                    assert_never(action)
        except BaseException as exc:
            if not run.fail(exc):  # not an error of the run's own work (a pause, or the failure itself)
                raise


async def drive_async(
    run: AgentRun,
    generator: Any,
    streaming_callback: StreamingCallback | None,
    save_pause: SavePause | None = None,
) -> dict[str, Any]:
    """Perform a run's I/O on the event loop until it finishes; same decisions as ``drive_sync``."""
    invoker = run.config.invoker
    run_async = getattr(generator, "run_async", None)
    while True:
        try:
            action = run.next_action()
            match action:
                case CallModel():
                    call = run_async if run_async is not None else generator.run
                    kwargs = {
                        "messages": action.messages,
                        "tools": action.tools or None,
                        "streaming_callback": streaming_callback,
                    }
                    output = await (call(**kwargs) if run_async is not None else run_in_worker(call, **kwargs))
                    run.model_replied(output)
                case RunTools():
                    await invoker.execute_async(action.calls, streaming_callback, run.tool_completed)
                    results = run.tools_ran()
                    if streaming_callback is not None:
                        for chunk in _tool_chunks(results):
                            pending = streaming_callback(chunk)
                            if inspect.isawaitable(pending):
                                await pending
                case RunHooks():
                    for h in action.hooks:
                        hook_async = getattr(h, "run_async", None)
                        kwargs = {} if action.error is None else _hook_kwargs(action, h)
                        try:
                            if hook_async is not None:
                                await hook_async(run.state, **kwargs)
                            else:  # a sync hook runs off the event loop
                                await run_in_worker(h.run, run.state, **kwargs)
                        except Exception as exc:
                            _hook_failed(action, h, exc)
                    run.hooks_ran(action.point)
                case Pause():
                    raise pause_exception(action.snapshot, save_pause)
                case Finish():
                    return action.result
                case Fail():
                    raise action.error
                case _:
                    assert_never(action)
        except BaseException as exc:
            if not run.fail(exc):
                raise
