"""MCPConnection: one session with one MCP server, owned by an event loop of its own.

Why a thread. The ``mcp`` SDK is async (anyio): a session lives inside an ``async with`` whose
task groups and cancel scopes must be entered and left by the same task. agentfsm runs tools from
sync code (``Agent.run``, worker threads) and from async code (``Agent.run_async``), on loops
that come and go. So each connection starts one daemon thread running an asyncio loop, and one
task on it, the *holder*, opens the SDK ``Client`` and keeps it open until the connection closes
(or the session drops). Everything else is a coroutine submitted to that loop:

- sync callers hand the coroutine over and wait on a lock its task releases (``_Handoff``); an
  interrupt while waiting (``KeyboardInterrupt``) cancels the call before it propagates;
- async callers ``await asyncio.wrap_future(...)``: cancelling the awaiting task cancels the call.

A cancelled or timed-out call is cancelled inside the SDK, which sends ``notifications/cancelled``
to the server. Because only the loop thread touches the session and the state, they need no lock.

The connection's state changes only through ``agentfsm.mcp.connection_states``: connecting at
``open`` (or at first use), ready, lost after the transport ended (the server process died),
closed. A call made while lost (or disconnected, or closed) first connects again, with
``max_reconnects`` retries and exponential backoff. A call in flight when the connection dropped is never sent again: it
raises ``MCPConnectionLostError``, and the run's journal decides what happens to it.

The tool list is fetched when the connection opens and again whenever the server says it changed
(``notifications/tools/list_changed``, which 2026-era servers send on a ``subscriptions/listen``
stream the connection keeps open). A call whose result arrives after such a notice returns once
the new list is in, so the next model call sees it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Generic, TypeVar

import anyio
import mcp.types as mcp_types
import pydantic
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

from agentfsm.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    MCPConnectionError,
    MCPConnectionLostError,
    MCPServerError,
    MCPTimeoutError,
    MCPToolNotFoundError,
    ToolProgressError,
)
from agentfsm.mcp.connection_states import ConnectionState, next_state
from agentfsm.mcp.server_info import MCPServerInfo, Streams, server_info_from_dict
from agentfsm.serialization import deserialize_callable, serialize_callable
from agentfsm.tools.progress import ProgressReporter

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Told about each progress notification of a call: tool name, progress, total, message.
ProgressCallback = Callable[[str, float, float | None, str | None], None]

#: Told about the new tool list after the server changed it (called on the connection's thread).
ToolsChanged = Callable[[list[mcp_types.Tool]], None]

#: How long closing waits for the server process to end before it is killed (the SDK's own escalation).
_CLOSE_WAIT = 10.0

#: What the SDK makes of a streamable HTTP server's 404 for a session it no longer has (it restarted):
#: the server's own message, or the SDK's when the body is not JSON-RPC. The request was refused unread.
_SESSION_GONE = frozenset({"Session not found", "Session terminated"})

#: The longest pause before the tool-change stream is opened again.
_MAX_LISTEN_PAUSE = 30.0


class MCPConnection:
    """One session with an MCP server, shared by the tools that server offers.

    Args:
        server_info: Where the server is.
        connection_timeout: Seconds to start the process or reach the URL and open the session.
        list_timeout: Seconds to fetch the tool list.
        invocation_timeout: Seconds one tool call may take; past it the call is cancelled on the server.
        max_reconnects: Further attempts after a failed connection (each after a longer pause).
        reconnect_backoff: Seconds before the first retry; it doubles with each retry.
        progress_callback: Told about the progress notifications of calls, on the connection's
            thread: a slow callback holds up that server's messages, and it must not close the connection.
    """

    def __init__(
        self,
        server_info: MCPServerInfo,
        *,
        connection_timeout: float = 30.0,
        list_timeout: float = 30.0,
        invocation_timeout: float = 300.0,
        max_reconnects: int = 2,
        reconnect_backoff: float = 0.25,
        progress_callback: ProgressCallback | None = None,
    ) -> None:
        if not isinstance(server_info, MCPServerInfo):
            raise ConfigurationTypeError(
                "server_info must be a StdioServerInfo, a StreamableHttpServerInfo or an SSEServerInfo, got "
                f"{type(server_info).__name__}."
            )
        for name, value in (
            ("connection_timeout", connection_timeout),
            ("list_timeout", list_timeout),
            ("invocation_timeout", invocation_timeout),
            ("reconnect_backoff", reconnect_backoff),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}.")
        if isinstance(max_reconnects, bool) or not isinstance(max_reconnects, int) or max_reconnects < 0:
            raise ConfigurationError(f"max_reconnects must be an int >= 0, got {max_reconnects!r}.")
        if progress_callback is not None and not callable(progress_callback):
            raise ConfigurationTypeError(f"progress_callback must be callable, got {progress_callback!r}.")
        self.server_info = server_info
        self.connection_timeout = connection_timeout
        self.list_timeout = list_timeout
        self.invocation_timeout = invocation_timeout
        self.max_reconnects = max_reconnects
        self.reconnect_backoff = reconnect_backoff
        self.progress_callback = progress_callback
        self._state = ConnectionState.DISCONNECTED
        #: The tools the server offers, as last listed.
        self.tools: list[mcp_types.Tool] = []
        self._listeners: list[ToolsChanged] = []
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Loop-side state (touched only on the loop's thread).
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._relist_again = False
        self._use_lock: asyncio.Lock | None = None
        self._calls: set[asyncio.Task[Any]] = set()
        #: Bumped for every session: a transport that ends reports its own session, so a late
        #: report of an old session never marks a newer one lost.
        self._session_id = 0
        #: When the listing under way must be done by (``time.monotonic()``), ``None`` between listings.
        self.listing_deadline: float | None = None

    def settings(self) -> dict[str, Any]:
        """The options besides the server, as keywords of ``MCPConnection``, ``MCPTool`` and ``MCPToolset``."""
        return {
            "connection_timeout": self.connection_timeout,
            "list_timeout": self.list_timeout,
            "invocation_timeout": self.invocation_timeout,
            "max_reconnects": self.max_reconnects,
            "reconnect_backoff": self.reconnect_backoff,
            "progress_callback": self.progress_callback,
        }

    def to_dict(self) -> dict[str, Any]:
        """The configuration: the server (secrets as their variables' names), timeouts and retries."""
        return {
            "server_info": self.server_info.to_dict(),
            **self.settings(),
            "progress_callback": None if self.progress_callback is None else serialize_callable(self.progress_callback),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> MCPConnection:
        """Invert ``to_dict``; classes and the progress callback resolve through the allow-list."""
        callback = data.get("progress_callback")
        return cls(
            server_info_from_dict(data["server_info"], allowed_modules),
            connection_timeout=data["connection_timeout"],
            list_timeout=data["list_timeout"],
            invocation_timeout=data["invocation_timeout"],
            max_reconnects=data["max_reconnects"],
            reconnect_backoff=data["reconnect_backoff"],
            progress_callback=None if callback is None else deserialize_callable(callback, allowed_modules),
        )

    @property
    def state(self) -> ConnectionState:
        """Where the connection stands."""
        return self._state

    def on_tools_changed(self, listener: ToolsChanged) -> None:
        """Call ``listener`` with the new list each time the tools are listed again."""
        self._listeners.append(listener)

    def _said(self, error: BaseException) -> str:
        """``error`` as ``Type: message`` (an exception group's first leaf), the server's credentials shown as ``***``."""
        return self.server_info.redact(_describe(error))

    def _move(self, trigger: str) -> None:
        self._state = next_state(self._state, trigger)
        logger.debug("MCP connection to %s: %s -> %s", self.server_info.describe(), trigger, self._state.value)

    # -- the loop thread ----------------------------------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agentfsm-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                _open_connections.add(self)
            return self._loop

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())

    def _wait(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the connection's loop and wait for it; an interrupt cancels it."""
        loop = self._running_loop()
        handoff = _Handoff(coroutine)
        loop.call_soon_threadsafe(handoff.start)
        try:
            handoff.finished.acquire()
        except BaseException:
            loop.call_soon_threadsafe(handoff.cancel)  # runs after ``start``: the task exists by then
            raise
        if handoff.cancelled:
            raise MCPConnectionLostError(
                f"The connection to MCP server {self.server_info.describe()} was closed while the call was running."
            )
        return handoff.result()

    async def _await(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the connection's loop from another loop; cancelling the caller cancels it."""
        try:
            return await asyncio.wrap_future(self._submit(coroutine))
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if caller is not None and caller.cancelling():  # the caller was cancelled: so was the call
                raise
            raise MCPConnectionLostError(
                f"The connection to MCP server {self.server_info.describe()} was closed while the call was running."
            ) from None

    # -- public API ---------------------------------------------------------------------------------

    def open(self) -> None:
        """Connect (if not connected) and list the tools."""
        self._wait(self._ready())

    async def open_async(self) -> None:
        """Like ``open``, awaited."""
        await self._await(self._ready())

    def call(
        self, name: str, arguments: dict[str, Any], report_progress: ProgressReporter | None = None
    ) -> mcp_types.CallToolResult:
        """Call the tool ``name``; reconnects first if the session dropped since the last call.

        ``report_progress`` is told about the call's progress notices (after ``progress_callback``),
        on the connection's thread: a run's reporter makes them ``tool_progress`` events.
        """
        return self._wait(self._call(name, arguments, report_progress))

    async def call_async(
        self, name: str, arguments: dict[str, Any], report_progress: ProgressReporter | None = None
    ) -> mcp_types.CallToolResult:
        """Like ``call``, awaited: cancelling the caller cancels the call on the server."""
        return await self._await(self._call(name, arguments, report_progress))

    def close(self) -> None:
        """End the session (and the server process) and stop the connection's thread; idempotent.

        Not from the connection's own thread (a progress callback, a tools-changed listener): that
        thread cannot wait for itself to stop, so ``MCPConnectionError`` says so.
        """
        if self._thread is not None and threading.current_thread() is self._thread:
            raise MCPConnectionError(
                f"The connection to MCP server {self.server_info.describe()} cannot be closed from its own thread "
                "(a progress callback or a tools-changed listener): close it from the code that runs the agent."
            )
        # The lock is held until the thread has stopped: a call from another thread meanwhile waits,
        # then finds the connection closed and starts afresh, instead of using the ending loop.
        with self._start_lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return
            try:
                asyncio.run_coroutine_threadsafe(self._shut(), loop).result()
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
                loop.close()
                self._loop = self._thread = None
                _open_connections.discard(self)

    async def close_async(self) -> None:
        """Like ``close``, without blocking the caller's event loop."""
        await asyncio.to_thread(self.close)

    # -- on the loop --------------------------------------------------------------------------------

    async def _ready(self) -> Client:
        """The open client: connect first when not ready (one coroutine at a time)."""
        if self._use_lock is None:
            self._use_lock = asyncio.Lock()
        async with self._use_lock:
            if self._state is ConnectionState.READY and self._client is not None:
                return self._client
            if self._state is ConnectionState.LOST:
                await self._end_session()  # what is left of the dropped session
            self._move("connect")
            return await self._connect_with_retries()

    async def _connect_with_retries(self) -> Client:
        error: Exception | None = None
        try:
            for attempt in range(self.max_reconnects + 1):
                if attempt:
                    await asyncio.sleep(self.reconnect_backoff * 2 ** (attempt - 1))
                try:
                    client = await self._connect_once()
                except (MCPConnectionError, MCPTimeoutError) as exc:
                    error = exc
                    logger.debug("Connecting to MCP server %s failed: %s", self.server_info.describe(), self._said(exc))
                    continue
                self._move("connected")
                return client
        except BaseException:  # any other failure (a listener refusing the list, a cancel): not retried
            self._move("connect_failed")
            raise
        self._move("connect_failed")
        assert error is not None
        raise error

    async def _connect_once(self) -> Client:
        self._session_id += 1
        session_id = self._session_id
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        holder = asyncio.create_task(self._hold(session_id, ready, stop))
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.connection_timeout)
        except TimeoutError:
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
            raise MCPTimeoutError(
                f"Connecting to MCP server {self.server_info.describe()} took longer than "
                f"{self.connection_timeout} s (connection_timeout).",
                operation="connect",
            ) from None
        except asyncio.CancelledError:  # the caller gave up (an interrupt): no session may stay behind
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
            raise
        except Exception as exc:
            await asyncio.gather(holder, return_exceptions=True)
            raise MCPConnectionError(
                f"Could not connect to MCP server {self.server_info.describe()}: {self._said(exc)}. Check that the "
                "command or URL is right and that the server starts on its own."
            ) from (None if self.server_info.holds_credentials() else exc)  # a cause may name the credentials
        self._client, self._stop, self._holder = client, stop, holder
        try:
            await self._list(client)
        except BaseException:
            await self._end_session()
            raise
        return client

    async def _hold(self, session_id: int, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Own one SDK client from its opening to its closing, in this one task (anyio's rule)."""
        client = Client(
            _Watched(self.server_info, lambda: self._transport_ended(session_id)),
            message_handler=self._on_message,
        )
        try:
            async with client, anyio.create_task_group() as group:
                group.start_soon(self._listen, client)
                ready.set_result(client)
                await stop.wait()
                group.cancel_scope.cancel()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                logger.debug("MCP session with %s ended: %s", self.server_info.describe(), self._said(exc))
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        finally:
            if not stop.is_set():  # the session ended on its own (its transport failed): reconnect next time
                self._transport_ended(session_id)

    async def _listen(self, client: Client) -> None:
        """Keep a ``subscriptions/listen`` stream open so that 2026-era servers announce tool list changes."""
        # The notices themselves reach ``_on_message`` (older servers send them without a stream).
        # An older protocol has no such stream; a stream that breaks (the HTTP server restarted) is
        # opened again, after a pause that grows, for as long as the session lasts.
        pause = 0.5
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    pause = 0.5
                    async for _event in subscription:
                        pass
            except ListenNotSupportedError:
                return
            except Exception as exc:
                logger.debug("The tool-change stream of %s ended: %s", self.server_info.describe(), self._said(exc))
            await asyncio.sleep(pause)
            pause = min(pause * 2, _MAX_LISTEN_PAUSE)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification) and self._client is not None:
            # One relist at a time, so that lists arrive in order: a notice during a relist asks the
            # running one to list once more when it is done.
            self._relist_again = True
            if self._refresh is None or self._refresh.done():
                self._refresh = asyncio.create_task(self._relist(self._client))

    async def _relist(self, client: Client) -> None:
        while self._relist_again:
            self._relist_again = False
            try:
                await self._list(client)
            except Exception as exc:  # the old list stays; a call to a tool that went away says so
                logger.warning(
                    "Could not list the tools of MCP server %s again: %s", self.server_info.describe(), self._said(exc)
                )

    async def _list(self, client: Client) -> None:
        """Fetch the tool list and hand it to the listeners, all within ``list_timeout`` (checking their schemas too)."""
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        self.listing_deadline = time.monotonic() + self.list_timeout
        try:
            async with asyncio.timeout(self.list_timeout):
                while True:
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            for listener in self._listeners:
                listener(tools)
        except TimeoutError:
            raise self.listing_timed_out() from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise MCPConnectionError(
                    f"MCP server {self.server_info.describe()} closed the connection while listing its tools."
                ) from None
            raise MCPServerError(
                f"MCP server {self.server_info.describe()} refused to list its tools: {_short(str(exc.message))}",
                code=exc.code,
            ) from None
        except pydantic.ValidationError as exc:
            raise MCPServerError(
                f"MCP server {self.server_info.describe()} listed its tools in a form that is not MCP's: "
                f"{_invalid(exc)}"
            ) from None
        finally:
            self.listing_deadline = None
        self.tools = tools

    def listing_timed_out(self) -> MCPTimeoutError:
        """The error of a listing that took longer than ``list_timeout``."""
        return MCPTimeoutError(
            f"Listing the tools of MCP server {self.server_info.describe()} took longer than "
            f"{self.list_timeout} s (list_timeout), checking their schemas included.",
            operation="list",
        )

    def check_listing_time(self) -> None:
        """``MCPTimeoutError`` when the listing under way is past its ``list_timeout`` (a listener checks between tools)."""
        if self.listing_deadline is not None and time.monotonic() > self.listing_deadline:
            raise self.listing_timed_out()

    def _transport_ended(self, session_id: int) -> None:
        """The server's stream of a session ended (its process died, or the session was closed)."""
        if session_id == self._session_id and self._state is ConnectionState.READY:
            self._move("lost")

    async def _call(
        self, name: str, arguments: dict[str, Any], report_progress: ProgressReporter | None
    ) -> mcp_types.CallToolResult:
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        try:
            for attempt in range(2):
                client = await self._ready()
                self._check_offered(name)
                try:
                    result = await self._send(client, self._session_id, name, arguments, report_progress)
                    break
                except _SessionGone as gone:
                    # The server refused the call unread: it goes to a new session, once.
                    if attempt:
                        raise MCPConnectionError(
                            f"MCP server {self.server_info.describe()} forgot a new session at once; the call to "
                            f"{name!r} did not run."
                        ) from gone
            if self._refresh is not None:  # the call changed the tool list: the next step sees the new one
                await asyncio.gather(asyncio.shield(self._refresh), return_exceptions=True)
            return result
        finally:
            self._calls.discard(task)

    def _check_offered(self, name: str) -> None:
        available = [t.name for t in self.tools]
        if name not in available:
            raise MCPToolNotFoundError(
                f"MCP server {self.server_info.describe()} does not offer a tool {name!r} (any more); it offers "
                f"{sorted(available)}.",
                tool_name=name,
                available_tools=sorted(available),
            )

    async def _send(
        self,
        client: Client,
        session_id: int,
        name: str,
        arguments: dict[str, Any],
        report_progress: ProgressReporter | None,
    ) -> mcp_types.CallToolResult:
        progress = self._progress_for(name, report_progress)
        try:
            async with asyncio.timeout(self.invocation_timeout):
                return await client.call_tool(name, arguments, progress_callback=progress)
        except TimeoutError:
            raise MCPTimeoutError(
                f"MCP tool {name!r} took longer than {self.invocation_timeout} s (invocation_timeout); the call was "
                "cancelled on the server.",
                operation="call",
            ) from None
        except pydantic.ValidationError as exc:
            raise MCPServerError(
                f"MCP server {self.server_info.describe()} answered the call to {name!r} with a result that is not "
                f"MCP's: {_invalid(exc)}"
            ) from None
        except MCPError as exc:
            if exc.code == INVALID_REQUEST and exc.message in _SESSION_GONE:
                self._transport_ended(session_id)
                raise _SessionGone(exc.message) from exc
            if exc.code != CONNECTION_CLOSED:
                raise MCPServerError(
                    f"MCP server refused the call to {name!r}: {self.server_info.redact(str(exc))}", code=exc.code
                ) from None
            self._transport_ended(session_id)
            raise MCPConnectionLostError(
                f"The connection to MCP server {self.server_info.describe()} dropped during the call to {name!r}: "
                "the call may or may not have run, and was not sent again. The next call reconnects."
            ) from exc

    def _progress_for(self, name: str, report_progress: ProgressReporter | None) -> ProgressFnT | None:
        """What the SDK tells about a call's progress notices: the connection's callback, then the call's reporter."""
        callback = self.progress_callback
        if callback is None and report_progress is None:
            return None

        async def report(progress: float, total: float | None, message: str | None) -> None:
            if callback is not None:
                callback(name, progress, total, message)
            if report_progress is not None:
                try:
                    report_progress(progress, total, message)
                except ToolProgressError as exc:  # a notice the event cannot carry (a total that is no number)
                    logger.debug("Dropped a progress notice of MCP tool %r: %s", name, exc)

        return report

    async def _end_session(self) -> None:
        """Close the current session (its process ends); the state is the caller's to move."""
        self._session_id += 1  # the ending transport is an old session's: not a loss
        stop, holder = self._stop, self._holder
        self._client = self._stop = self._holder = None
        if stop is not None:
            stop.set()
        if holder is not None:
            try:
                async with asyncio.timeout(_CLOSE_WAIT):
                    await asyncio.gather(holder, return_exceptions=True)
            except TimeoutError:
                holder.cancel()
                await asyncio.gather(holder, return_exceptions=True)

    async def _shut(self) -> None:
        for task in list(self._calls):
            task.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)
        if self._refresh is not None:
            self._refresh.cancel()
            await asyncio.gather(self._refresh, return_exceptions=True)
            self._refresh = None
        await self._end_session()
        if self._state is not ConnectionState.CLOSED:
            self._move("close")
        self._use_lock = None


class _SessionGone(Exception):
    """The server no longer knows the session (it restarted) and refused a request without running it."""


class _Handoff(Generic[T]):
    """A coroutine run as a task on the connection's loop, waited for by a thread outside it.

    Why not ``asyncio.run_coroutine_threadsafe``: its ``concurrent.futures.Future`` waits on a
    ``Condition`` and chains callbacks both ways; here one callback starts the task and the task's
    end releases one lock. A sync tool call crosses threads twice, so this is most of what agentfsm
    adds to the SDK's own call.
    """

    __slots__ = ("_coroutine", "_error", "_task", "_value", "cancelled", "finished")

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine
        self._task: asyncio.Task[T] | None = None
        #: Released (on the loop's thread) once the task has ended, its outcome copied here.
        self.finished = threading.Lock()
        self.finished.acquire()
        self.cancelled = False
        self._error: BaseException | None = None
        self._value: tuple[T] | None = None

    def start(self) -> None:
        """Start the task (on the loop's thread)."""
        self._task = asyncio.get_running_loop().create_task(self._coroutine)
        self._task.add_done_callback(self._ended)

    def cancel(self) -> None:
        """Cancel the task (on the loop's thread): the waiting thread was interrupted."""
        if self._task is not None:
            self._task.cancel()

    def result(self) -> T:
        """What the task returned, or its exception raised (once ``finished``, and not ``cancelled``)."""
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value[0]

    def _ended(self, task: asyncio.Task[T]) -> None:
        if task.cancelled():
            self.cancelled = True
        elif (error := task.exception()) is not None:
            self._error = error
        else:
            self._value = (task.result(),)
        self.finished.release()


class _Watched:
    """A transport that tells the connection when the server's stream ends (the process died)."""

    def __init__(self, server_info: MCPServerInfo, ended: Callable[[], None]) -> None:
        self._server_info = server_info
        self._ended = ended
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Streams:
        read, write = await self._stack.enter_async_context(self._server_info.transport())
        return _WatchedReadStream(read, self._ended), write

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


class _WatchedReadStream:
    """The transport's read stream, telling the connection when it ends.

    It hands each receive through to the transport's stream (the session reads it as its own): a
    task that forwarded the messages instead would cost a task switch for every message.
    """

    def __init__(self, stream: Any, ended: Callable[[], None]) -> None:
        self._stream = stream
        self._ended = ended

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message, where the transport keeps one (the SDK reads it)."""
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except BaseException:  # the end of the stream, or of the session's task that reads it
            self._ended()
            raise

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


def _invalid(error: pydantic.ValidationError) -> str:
    """What is wrong with a message the server sent, in one short line: where and why, never the values it holds."""
    problems = error.errors(include_url=False, include_input=False)
    first = problems[0] if problems else {"loc": (), "msg": "invalid"}
    where = ".".join(str(p) for p in first["loc"]) or "the message"
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"{_short(where)}: {_short(str(first['msg']))}{more}."


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _describe(error: BaseException) -> str:
    """The first leaf of an exception group (anyio wraps transport errors), as ``Type: message``."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


# Connections still open when the interpreter exits are closed, so that no server process outlives it.
_open_connections: weakref.WeakSet[MCPConnection] = weakref.WeakSet()


@atexit.register
def _close_open_connections() -> None:
    for connection in list(_open_connections):
        with contextlib.suppress(Exception):
            connection.close()
