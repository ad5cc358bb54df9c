"""How running tools' progress reports reach a run's event handler: in order, from any thread.

A tool's ``report_progress`` (``agentfsm.tools.progress``) is called wherever the tool runs: the
driver's thread, a worker thread, the thread of a timed call, an MCP connection's thread, the
event loop. The driver of a run someone listens to gives each ready call of a tool that takes
progress a ``Reporter`` of a relay made for the step's calls; each relay hands the reports out
its driver's way:

- ``SyncRelay`` (``drive_sync``): in the reporting thread, under the relay's lock, which the driver
  also holds while it hands out a finished call's events. One event at a time, in the order they
  happen, while the tool runs: ``Agent.iter`` yields it then (the tool waits until the loop asks
  for the next event, as the run does at every event).
- ``AsyncRelay`` (``drive_async``): queued, and the event loop woken; the step's pump task hands
  the queue out (awaiting an async handler) under an asyncio lock, which the driver also holds
  while it hands out a finished call's events. A tool running in a worker thread or awaited on the
  loop is reported while it runs; one run inline on the loop (``sync_tools_in_threads=False``)
  blocks the loop, so its reports go out when it returns.
- ``BufferRelay`` (``agentfsm.durable``): kept, and sent by the driver between the call's
  ``tool_started`` and ``tool_ended``, which the durable driver sends together once the call's step
  has run here.

Every report of a call goes out before its ``tool_ended``. A call's reporter closes when its end is
handed out, and every reporter of the step when the step's calls are over: a report made later
(from a thread the tool left running, or by a call abandoned at its timeout) is dropped. A handler
that raises on a progress event does not raise in the tool: the error is kept, later reports are
dropped, and the driver raises it when it hands out the next finished call, as if the handler had
raised there (``IterationStoppedError``, from a loop over ``Agent.iter`` that stopped, cancels the run).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable

from agentfsm.events import Event, EventHandler, ToolProgress
from agentfsm.machine import CALL_READY
from agentfsm.tools.invoker import AsyncOnComplete, OnComplete, PreparedCall
from agentfsm.tools.progress import checked_report


def progress_calls(calls: list[PreparedCall]) -> list[PreparedCall]:
    """The calls about to run whose tool takes a progress reporter."""
    return [c for c in calls if c.status is CALL_READY and c.tool is not None and c.tool.takes_progress]


class Reporter:
    """What one call's ``report_progress`` is given: each report checked, made an event and handed to its relay."""

    __slots__ = ("_call", "_relay", "_run_id", "_step", "open")

    def __init__(self, relay: _Relay, run_id: str, step: int, call: PreparedCall) -> None:
        self._relay = relay
        self._run_id = run_id
        self._step = step
        self._call = call
        #: Reports are handed on until the call's end is (then they are dropped).
        self.open = True

    def __call__(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far the call got (``agentfsm.tools.progress.ProgressReporter``)."""
        progress, total, message = checked_report(progress, total, message)
        if self.open:
            c = self._call
            event = ToolProgress(
                self._run_id, self._step, time.time(), c.key, c.call.id, c.call.tool_name, progress, total, message
            )
            self._relay.deliver(self, event)


class _Relay(abc.ABC):
    """The reporters of one step's calls, and what is done with their reports."""

    def __init__(self) -> None:
        self._reporters: list[Reporter] = []
        #: Held while a reporter is closed, and by ``deliver`` while it reads whether one is open.
        #: Re-entrant: a sync handler that reports progress itself (in the reporting thread) does not deadlock.
        self._guard = threading.RLock()

    def attach(self, run_id: str, step: int, calls: list[PreparedCall]) -> None:
        """Give each of ``calls`` a reporter of this relay."""
        for c in calls:
            c.reporter = reporter = Reporter(self, run_id, step, c)
            self._reporters.append(reporter)

    @abc.abstractmethod
    def deliver(self, reporter: Reporter, event: ToolProgress) -> None:
        """Hand on ``event``, reported by ``reporter`` (in any thread)."""

    @staticmethod
    def _close(call: PreparedCall) -> None:
        """Drop the reports ``call`` makes from now on (the caller holds ``_guard``)."""
        if isinstance(call.reporter, Reporter):
            call.reporter.open = False

    def _close_all(self) -> None:
        with self._guard:
            for reporter in self._reporters:
                reporter.open = False
                reporter._call.reporter = None


class SyncRelay(_Relay):
    """``drive_sync``'s relay: each report goes to the handler in the reporting thread, under a lock the driver shares."""

    def __init__(self, handler: EventHandler) -> None:
        super().__init__()
        self._handler = handler
        self._error: Exception | None = None

    def deliver(self, reporter: Reporter, event: ToolProgress) -> None:
        """Call the handler with ``event`` now, unless the call's end was handed out or a handler raised."""
        with self._guard:
            if not reporter.open or self._error is not None:
                return
            try:
                self._handler(event)
            except Exception as exc:  # raised in the driver, at the next finished call
                self._error = exc

    def completing(self, record: OnComplete) -> OnComplete:
        """``record`` for each finished call, after its reports and with none between: the error of a handler first."""

        def completed(call: PreparedCall) -> None:
            with self._guard:
                self._close(call)
                if self._error is not None:
                    raise self._error
                record(call)

        return completed

    def close(self) -> None:
        """The step's calls are over: drop every later report."""
        self._close_all()


class AsyncRelay(_Relay):
    """``drive_async``'s relay: reports are queued from any thread and handed out on the event loop by ``pump``."""

    def __init__(self, send: Callable[[Event], Awaitable[None]]) -> None:
        super().__init__()
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._queue: deque[ToolProgress] = deque()
        self._wake = asyncio.Event()
        #: Held while events are handed out: by the pump, and by the driver at a finished call.
        self._lock = asyncio.Lock()
        self._closed = False
        self._error: Exception | None = None

    def deliver(self, reporter: Reporter, event: ToolProgress) -> None:
        """Queue ``event`` and wake the pump (in any thread), unless the call's end was handed out."""
        with self._guard:
            if not reporter.open:
                return
            first = not self._queue  # otherwise the pump was woken already, and empties the queue
            self._queue.append(event)
        if first:
            with contextlib.suppress(RuntimeError):  # the loop was closed: nobody listens any more
                self._loop.call_soon_threadsafe(self._wake.set)

    async def _flush(self) -> None:
        """Hand out every queued event, oldest first (the caller holds ``_lock``)."""
        while True:
            with self._guard:
                if not self._queue:
                    return
                event = self._queue.popleft()
            if self._error is None:
                try:
                    await self._send(event)
                except Exception as exc:  # raised in the driver, at the next finished call
                    self._error = exc

    async def pump(self) -> None:
        """Hand out the reports as they come, until ``close``."""
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            async with self._lock:
                await self._flush()

    def completing(self, record: AsyncOnComplete) -> AsyncOnComplete:
        """``record`` for each finished call, after its reports and with none between: the error of a handler first."""

        async def completed(call: PreparedCall) -> None:
            async with self._lock:
                with self._guard:
                    self._close(call)
                await self._flush()
                if self._error is not None:
                    raise self._error
                if inspect.isawaitable(pending := record(call)):
                    await pending

        return completed

    async def close(self, pump: asyncio.Future[None]) -> None:
        """The step's calls are over: drop every later report, and wait for ``pump`` to end."""
        self._close_all()
        with self._guard:
            self._queue.clear()
        self._closed = True
        self._wake.set()
        await pump


class BufferRelay(_Relay):
    """The durable driver's relay: each call's reports are kept until the driver takes them, with the call's end."""

    def __init__(self) -> None:
        super().__init__()
        self._kept: dict[str, list[ToolProgress]] = {}

    def deliver(self, reporter: Reporter, event: ToolProgress) -> None:
        """Keep ``event`` for its call (in any thread), unless the call's end was taken."""
        with self._guard:
            if reporter.open:
                self._kept.setdefault(event.call, []).append(event)

    def take(self, call: PreparedCall) -> list[ToolProgress]:
        """The reports ``call`` made, oldest first; later ones are dropped."""
        with self._guard:
            self._close(call)
            return self._kept.pop(call.key, [])

    def close(self) -> None:
        """The step's calls are over: drop every later report."""
        self._close_all()
