"""Worker threads for the sync calls of async runs (sync tools, generators without ``run_async``).

``asyncio.to_thread`` wakes the event loop once per finished call, with a system call and a switch
to the loop thread each time; with a thousand runs on one loop that hand-off costs more than the
calls. Here a worker that finishes a call queues the result in its loop's inbox and wakes the loop
only if no wake-up is pending already, so the loop takes in every result finished meanwhile at
once. Like ``asyncio.to_thread``, each call runs in a copy of the caller's ``contextvars`` context.

The workers are daemon threads shared by the whole process, started as needed up to
``DEFAULT_MAX_WORKERS`` (``set_max_workers`` changes it; the event loop's default executor is not
used). A call still running when the interpreter exits (its run was cancelled) stops with it.
``run_in_own_thread`` starts a call that may be abandoned at a timeout in a thread of its own;
``CallThread`` runs such calls one after the other in one thread, until one is abandoned.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from agentfsm.errors import ConfigurationError

T = TypeVar("T")

#: The size of ``asyncio.to_thread``'s default executor.
DEFAULT_MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)


class _Inbox:
    """The results waiting for one event loop, and whether a wake-up of it is scheduled."""

    __slots__ = ("_lock", "_results", "_wake_scheduled", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)  # the registry's weak key must not be kept alive by its value
        self._results: deque[tuple[asyncio.Future[Any], BaseException | None, Any]] = deque()
        self._lock = threading.Lock()
        self._wake_scheduled = False

    def post(self, future: asyncio.Future[Any], error: BaseException | None, value: Any) -> None:
        """Called by a worker: queue one result, and wake the loop unless a wake-up is pending."""
        self._results.append((future, error, value))
        with self._lock:
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        loop = self.loop()
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop was closed: nobody awaits these results now
            loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        """On the loop: hand every queued result to its future."""
        with self._lock:
            self._wake_scheduled = False  # before draining, so a result queued from now on wakes again
        results = self._results
        while results:
            future, error, value = results.popleft()
            if future.cancelled():
                continue
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)


_Job = tuple[_Inbox, "asyncio.Future[Any]", contextvars.Context, Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Pool:
    """A job queue, the daemon threads that serve it, and the inbox of each event loop it serves."""

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self.start_afresh()

    def start_afresh(self) -> None:
        """Forget every worker and inbox: at start, and in the child of a ``fork`` (which has no workers)."""
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()  # a worker may have held it when the process forked
        self._workers = 0
        self._idle = 0  # workers waiting for a job and not yet claimed by a submitted one
        self._inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()
        self._recent: _Inbox | None = None  # the inbox asked for last: most programs run one event loop

    def inbox_of(self, loop: asyncio.AbstractEventLoop) -> _Inbox:
        inbox = self._recent
        if inbox is not None and inbox.loop() is loop:  # a weak-keyed lookup costs ~0.3 µs more
            return inbox
        inbox = self._inboxes.get(loop)
        if inbox is None:
            with self._lock:  # loops of several threads may ask at once
                inbox = self._inboxes.setdefault(loop, _Inbox(loop))
        self._recent = inbox
        return inbox

    def submit(self, job: _Job) -> None:
        self._jobs.put(job)
        with self._lock:
            if self._idle:
                self._idle -= 1
                return
            if self._workers >= self.max_workers:
                return
            self._workers += 1
            number = self._workers
        threading.Thread(target=self._work, name=f"agentfsm-worker-{number}", daemon=True).start()

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                with self._lock:
                    self._idle += 1
                job = jobs.get()
            _run(*job)
            del job  # hold nothing of a finished call while waiting for the next


def _run(
    inbox: _Inbox,
    future: asyncio.Future[Any],
    context: contextvars.Context,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    try:
        value = context.run(function, *args, **kwargs)
    except BaseException as error:  # handed to the awaiting task, as asyncio.to_thread does
        inbox.post(future, error, None)
    else:
        inbox.post(future, None, value)


_pool = _Pool(DEFAULT_MAX_WORKERS)
if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_pool.start_afresh)


def set_max_workers(count: int) -> None:
    """Let up to ``count`` sync calls run at once (e.g. more for tools that wait on the network).

    Workers already started keep serving; new ones start only while fewer than ``count`` exist.
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ConfigurationError(f"The number of worker threads must be an int >= 1, got {count!r}.")
    _pool.max_workers = count


def run_in_own_thread(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
    """Start ``function(*args, **kwargs)`` in a daemon thread of its own; its future gives the result.

    For calls that may be abandoned at a timeout (a sync tool, a sync model call): a pool's worker
    would stay taken by a call nobody waits for any more. The thread runs to the call's end, in a
    copy of the caller's ``contextvars`` context; a result nobody waits for is dropped.
    """
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(context.run(function, *args, **kwargs))
        except BaseException as error:  # handed to whoever still waits, as a pool's future does
            future.set_exception(error)

    threading.Thread(target=run, name="agentfsm-timed-call", daemon=True).start()
    return future


class CallThread:
    """Runs calls that may be abandoned at a timeout one after the other, in one thread kept between them.

    Starting a thread per call (``run_in_own_thread``) costs more than a short call. A call that is
    abandoned (``abandon``) keeps the thread until it ends, and the next call starts a new one.
    Each call runs in a copy of the caller's ``contextvars`` context.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None] | None = None

    def call(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        """Run ``function(*args, **kwargs)`` in the thread once the calls before it are done; its future gives the result."""
        if self._calls is None:
            self._calls = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(self._calls,), name=self.name, daemon=True).start()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        context = contextvars.copy_context()
        self._calls.put((future, lambda: context.run(function, *args, **kwargs)))
        return future

    def abandon(self) -> None:
        """Nobody waits for the call under way any more: the thread ends once it is done, and the next call gets a new one."""
        if self._calls is not None:
            self._calls.put(None)
            self._calls = None

    close = abandon


def _serve(calls: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None]) -> None:
    """A ``CallThread``'s loop: each call in turn, until told to stop."""
    while (item := calls.get()) is not None:
        future, call = item
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(call())
        except BaseException as error:  # handed to whoever still waits, as a pool's future does
            future.set_exception(error)
        del future, call, item  # nothing of a finished call is kept while the thread waits for the next


def result_within(future: concurrent.futures.Future[T], timeout: float) -> tuple[bool, T | None]:
    """``(True, result)`` once ``future`` is done within ``timeout`` seconds (its error raised), else ``(False, None)``.

    Unlike ``future.result(timeout)``, a ``TimeoutError`` the call raised itself is raised as its own.
    """
    done, _ = concurrent.futures.wait([future], timeout)
    return (True, future.result()) if done else (False, None)


def run_in_worker(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """Run ``function(*args, **kwargs)`` in a worker thread; await the returned future for its result.

    Must be called with an event loop running in this thread. Cancelling the future does not stop
    the call; its result is then dropped.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    _pool.submit((_pool.inbox_of(loop), future, contextvars.copy_context(), function, args, kwargs))
    return future
