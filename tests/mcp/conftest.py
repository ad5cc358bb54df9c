"""Real MCP servers for the MCP tests: the test server over stdio, and over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp.types as mcp_types
import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from agentfsm.mcp import ConnectionState, MCPConnection, SSEServerInfo, StdioServerInfo, StreamableHttpServerInfo
from tests.mcp.server import build_server

SERVER = Path(__file__).with_name("server.py")


def stdio_info() -> StdioServerInfo:
    """The test server, started as a child process of this one."""
    return StdioServerInfo(command=sys.executable, args=[str(SERVER)])


def children() -> list[int]:
    """The live (not zombie) child processes of this process, read from /proc."""
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            found.append(int(entry))
    return found


def wait_for_no_children(before: list[int], seconds: float = 60.0) -> list[int]:
    """The children started since ``before`` still alive after waiting up to ``seconds`` for them to end."""
    deadline = time.monotonic() + seconds
    while True:
        left = [pid for pid in children() if pid not in before]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def wait_for_text(path: Path, text: str, seconds: float = 60.0) -> str:
    """The file's text once it is ``text``, or after ``seconds`` (a server acts on a cancel notice in its own time)."""
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text() == text) and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.read_text() if path.exists() else ""


def cancelled_on_the_server(marker: Path) -> bool:
    """Whether the ``slow`` call whose marker this is ended cancelled on the server, and not finished.

    The marker says ``cancelled`` once the server acts on the cancel notice; or it was never
    written: a call that timed out before the server read it (a loaded machine's doing) is
    cancelled unread, and its tool never starts. Either way the server did not run it to its end.
    """
    return wait_for_text(marker, "cancelled") == "cancelled" or not marker.exists()


def wait_for_state(connection: MCPConnection, state: ConnectionState, seconds: float = 60.0) -> ConnectionState:
    """The connection's state once it is ``state``, or after ``seconds``.

    A server process that died is noticed when its end of the pipe is read: a call made in the
    moment between fails as in flight (it is never sent twice), so tests wait for the notice.
    """
    deadline = time.monotonic() + seconds
    while connection.state is not state and time.monotonic() < deadline:
        time.sleep(0.01)
    return connection.state


def speak_only_the_handshake(server: MCPServer) -> None:
    """Make ``server`` offer no 2026-era protocol revision, as a server built on SDK 1.x does.

    Clients then fall back to the ``initialize`` handshake and a stateful session that the server
    names in ``mcp-session-id`` and forgets when it restarts (answering 404 for it). The SDK replaces
    a server's ``server/discover`` handler on its low-level server, which is where this does it.
    """
    lowlevel = server._lowlevel_server

    async def discover(context: Any, params: mcp_types.RequestParams) -> mcp_types.DiscoverResult:
        return mcp_types.DiscoverResult(
            supported_versions=[LATEST_HANDSHAKE_VERSION],
            capabilities=lowlevel.get_capabilities(protocol_version=LATEST_HANDSHAKE_VERSION),
        )

    lowlevel.add_request_handler("server/discover", mcp_types.RequestParams, discover)


class HttpServer:
    """The test server over HTTP on 127.0.0.1, on a port the OS chose; it can restart there.

    ``transport`` is ``"streamable-http"`` or the older ``"sse"``; ``handshake_only`` serves
    streamable HTTP as SDK 1.x servers do (see ``speak_only_the_handshake``).
    """

    def __init__(self, transport: str = "streamable-http", *, handshake_only: bool = False) -> None:
        self.transport = transport
        self.handshake_only = handshake_only
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        path = "/mcp" if transport == "streamable-http" else "/sse"
        self.url = f"http://127.0.0.1:{self.port}{path}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        server_app = build_server()
        if self.handshake_only:
            speak_only_the_handshake(server_app)
        app = server_app.streamable_http_app() if self.transport == "streamable-http" else server_app.sse_app()
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test MCP server did not start (within a minute)")
            time.sleep(0.01)
        self._server, self._thread, self._socket = server, thread, sock

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join()
            self._socket.close()
            self._server = self._thread = None

    def restart(self) -> None:
        """A new server process's worth of state: every session and counter starts afresh."""
        self.stop()
        self.start()

    def info(self) -> StreamableHttpServerInfo | SSEServerInfo:
        return (
            StreamableHttpServerInfo(url=self.url) if self.transport == "streamable-http" else SSEServerInfo(self.url)
        )


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def handshake_http_server() -> Iterator[HttpServer]:
    server = HttpServer(handshake_only=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sse_server() -> Iterator[HttpServer]:
    server = HttpServer("sse")
    server.start()
    yield server
    server.stop()
