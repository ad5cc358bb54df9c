"""A run's events as an iterator: the run waits at each event until the loop asks for the next one.

``Agent.iter`` drives the run (``Agent.run`` with an ``on_event`` handler) in a worker thread,
``Agent.iter_async`` in a task; either way the handler hands each event to the loop and waits
until the loop is back for the next, so the run goes no further than the loop has read. A loop
that stops early (``break``, an exception) cancels the run at the event it waits at (the handler
raises ``IterationStoppedError``, which the run takes as a cancellation): it pauses, its snapshot
kept in a snapshot store and in its ``RunHandle``, and the thread or task is gone when the loop
has stopped. A pause ends the iteration with the
``RunPaused`` event (it does not raise); a failed run's ``RunEnded`` event comes, then its error.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from agentfsm.errors import BreakpointException, IterationStoppedError
from agentfsm.events import Event, EventHandler

#: What the run's side hands the loop: an event, the run's error, or its end.
_Item = tuple[str, Any]


def iterate(drive: Callable[[EventHandler], object]) -> Iterator[Event]:
    """The events of ``drive(on_event)`` (a run), which runs in a worker thread as the loop reads them."""
    out: queue.SimpleQueue[_Item] = queue.SimpleQueue()
    go_on: queue.SimpleQueue[bool] = queue.SimpleQueue()
    stopped = threading.Event()

    def on_event(event: Event) -> None:
        if stopped.is_set():  # the run's last events after the loop stopped (on_error hooks, its end)
            return
        out.put(("event", event))
        if not go_on.get():
            raise IterationStoppedError("The loop over the run's events stopped before the run ended.")

    def body() -> None:
        try:
            drive(on_event)
        except BreakpointException:  # its RunPaused event was the last
            out.put(("end", None))
        except BaseException as exc:
            out.put(("error", exc))
        else:
            out.put(("end", None))

    # The run sees the caller's context variables, as in Agent.run.
    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(body,), name="agentfsm-iter", daemon=True)
    worker.start()
    done = False
    try:
        while True:
            tag, value = out.get()
            if tag == "event":
                yield value
                go_on.put(True)
            elif tag == "error":
                done = True
                raise value
            else:
                done = True
                return
    finally:
        if not done:
            stopped.set()
            go_on.put(False)
            while out.get()[0] == "event":  # the run fails where it waited; wait for its end
                pass
        worker.join()


async def iterate_async(drive: Callable[[EventHandler], Awaitable[object]]) -> AsyncIterator[Event]:
    """The events of ``drive(on_event)`` (a run), which runs in a task as the loop reads them."""
    out: asyncio.Queue[_Item] = asyncio.Queue()
    go_on: asyncio.Queue[bool] = asyncio.Queue()
    stopped = False

    async def on_event(event: Event) -> None:
        if stopped:
            return
        out.put_nowait(("event", event))
        if not await go_on.get():
            raise IterationStoppedError("The loop over the run's events stopped before the run ended.")

    async def body() -> None:
        try:
            await drive(on_event)
        except BreakpointException:
            out.put_nowait(("end", None))
        except BaseException as exc:
            out.put_nowait(("error", exc))
        else:
            out.put_nowait(("end", None))

    task = asyncio.ensure_future(body())
    done = False
    try:
        while True:
            tag, value = await out.get()
            if tag == "event":
                yield value
                go_on.put_nowait(True)
            elif tag == "error":
                done = True
                raise value
            else:
                done = True
                return
    finally:
        if not done:
            stopped = True
            go_on.put_nowait(False)
        await task
