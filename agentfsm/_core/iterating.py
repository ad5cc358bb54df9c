"""A run's events as an iterator: ``Agent.iter`` and ``iter_async`` step the run in the caller's own loop.

The drivers are generators of events (``steps_sync``, ``steps_async`` in ``agentfsm._core.drivers``):
given an ``Outbox``, they hand the run's events to it and yield them after each action, so the run
goes no further than the loop has read. The run lives in the caller's thread (or task): no thread
or task of its own. An action whose events come while it is under way (a streamed model call, the
tools that report progress) is done by a worker (a thread; under ``iter_async``, a task) while the
loop yields its events as they come; every other action is done in place. A loop that stops early
(``break``, an exception, ``aclose``) cancels the run where it stands: the action under way is
told (a progress report or streamed chunk after the stop raises ``IterationStoppedError`` in it)
and waited for, then the run takes its ``cancel`` edge and pauses, its snapshot kept in a snapshot
store and in its ``RunHandle``. A pause ends the iteration with the ``RunPaused`` event (it does not
raise); a failed run's ``RunEnded`` event comes, then its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Generic, TypeVar

from agentfsm.errors import IterationStoppedError
from agentfsm.events import Event
from agentfsm.workers import run_in_own_thread

T = TypeVar("T")


class Outbox:
    """Where a run's events wait for the loop over them; ``put`` is the run's event handler (from any thread).

    While a worker does an action (``live``), whoever reports an event waits until the loop took
    it, as the run itself does at every event: the action goes no further than the loop has read.
    """

    __slots__ = ("_closed", "_events", "_stopped", "_waiting", "_wake", "_woken")

    def __init__(self) -> None:
        #: Each event, and what tells its reporter the loop took it (``None``: nobody waits).
        self._events: deque[tuple[Event, Callable[[], object] | None]] = deque()
        #: Set while a worker does an action, to wake the loop at each event (a thread's or a task's).
        self._wake: threading.Event | None = None
        self._woken: asyncio.Event | None = None
        #: The reporters waiting for the loop to take their event (threads' events, or tasks' futures).
        self._waiting: set[threading.Event | asyncio.Future[None]] = set()
        #: The loop stopped while an action was under way: its events raise in whoever reports them.
        self._stopped = False
        #: The loop stopped: events are dropped (the run's other listeners, a store or the log, still get them).
        self._closed = False

    def put(self, event: Event) -> asyncio.Future[None] | None:
        """Keep ``event`` for the loop; during ``live``, wait until it is taken (a task is given a future to await)."""
        if self._closed:
            return None
        if self._stopped:
            raise IterationStoppedError("The loop over the run's events stopped before the run ended.")
        if self._wake is not None:  # a worker thread's event
            taken = threading.Event()
            self._waiting.add(taken)
            self._events.append((event, taken.set))
            self._wake.set()
            taken.wait()
            self._waiting.discard(taken)
            if self._stopped:
                raise IterationStoppedError("The loop over the run's events stopped before the run ended.")
            return None
        if self._woken is not None:  # a task's event: it awaits the future
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.add(future)
            future.add_done_callback(self._waiting.discard)
            self._events.append((event, functools.partial(_release, future)))
            self._woken.set()
            return future
        self._events.append((event, None))
        return None

    def close(self) -> None:
        """The loop stopped: drop every event from now on."""
        self._closed = True

    def _stop(self) -> None:
        """The loop stopped while an action was under way: release its reporters, each of whose events then raises."""
        self._stopped = True
        for waiting in list(self._waiting):
            if isinstance(waiting, threading.Event):
                waiting.set()
            else:
                waiting.cancel()

    def drain(self) -> Generator[Event, None, None]:
        """Yield the events kept so far, oldest first; each reporter waiting for its event is released once it is taken."""
        events = self._events
        while events:
            event, taken = events.popleft()
            yield event
            if taken is not None:
                taken()

    def live(self, action: Callable[[], T]) -> Generator[Event, None, T]:
        """Do ``action`` in a worker thread, yielding its events as they come; its result (or error) once done.

        When the loop stops while it is under way, the action is told (its next event raises in it)
        and waited for before the stop goes on.
        """
        self._wake = wake = threading.Event()
        done = run_in_own_thread(action)
        done.add_done_callback(lambda _: wake.set())
        try:
            while True:
                yield from self.drain()
                if done.done() and not self._events:
                    break
                wake.wait()  # set by each event, and once the action is done
                wake.clear()
        except GeneratorExit:
            self._stop()
            with contextlib.suppress(BaseException):  # what it raised is the stop's own doing
                done.result()
            raise
        finally:
            self._wake = None
        return done.result()

    async def live_async(self, action: Awaitable[T]) -> AsyncGenerator[Event | Result[T], None]:
        """Like ``live``, with ``action`` awaited in a task: its events as they come, then its ``Result``."""
        self._woken = woken = asyncio.Event()
        task = asyncio.ensure_future(action)
        task.add_done_callback(lambda _: woken.set())
        try:
            while True:
                for event in self.drain():
                    yield event
                if task.done() and not self._events:
                    break
                await woken.wait()  # set by each event, and once the action is done
                woken.clear()
        except GeneratorExit:
            self._stop()
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise
        finally:
            self._woken = None
        yield Result(task)


def _release(future: asyncio.Future[None]) -> None:
    """Tell the task that awaits ``future`` its event was taken (unless the loop stopped, and cancelled it)."""
    if not future.done():
        future.set_result(None)


class Result(Generic[T]):
    """What ``live_async`` yields last: the task that did the action, done."""

    __slots__ = ("task",)

    def __init__(self, task: asyncio.Future[T]) -> None:
        self.task = task

    def value(self) -> T:
        """The action's result, or its error raised."""
        return self.task.result()


def ran(steps: Generator[Event, None, T]) -> T:
    """The result of a driver's ``steps`` run without an outbox: they yield nothing, and return it."""
    try:
        next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("a driver without an outbox yields no event")
