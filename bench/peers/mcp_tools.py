"""The cost of one MCP tool call: agentfsm's ``MCPTool`` against mcp-haystack's and pydantic-ai's ``MCPToolset``.

Run in the peers' virtualenv by ``bench/run.py`` (``python mcp_tools.py SAMPLES``); prints JSON. Every
row calls ``add`` on the same kind of local stdio server (the ``mcp`` SDK's own, one process per
row); a plain agentfsm tool gives the floor, and the ``mcp`` SDK's own client what MCP itself costs
(JSON-RPC over the pipe, the server's dispatch): what each library adds is its row over that one.
The SDK's client speaks the protocol revision it negotiates (2026-07-28, as agentfsm and
pydantic-ai do); mcp-haystack opens a ``ClientSession`` with the ``initialize`` handshake
(2025-11-25), whose calls cost the server and the SDK less, so it is compared with the SDK's
session after that handshake (``compared_with``). agentfsm's tools go through ``ToolInvoker.invoke``
as a run's calls do; mcp-haystack's through ``MCPTool.invoke`` as its Agent's do; pydantic-ai's
through ``MCPToolset.direct_call_tool`` inside its own event loop (its agents are async). The rows
take turns, sample by sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

CALLS = 50  # per sample

SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench", log_level="WARNING")

@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

server.run()
'''


def repeated(call: Callable[[], object]) -> Callable[[], None]:
    """A sample: ``CALLS`` calls of ``call``."""

    def sample() -> None:
        for _ in range(CALLS):
            call()

    return sample


def agentfsm_rows(server: Path) -> tuple[dict[str, Callable[[], None]], Callable[[], None]]:
    """Samples of a plain tool and of an MCP tool, each called through the invoker; and how to close them."""
    from agentfsm import ToolCall
    from agentfsm.mcp import MCPTool, StdioServerInfo
    from agentfsm.state import State
    from agentfsm.tools import ToolInvoker, tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    mcp_add = MCPTool(name="add", server_info=StdioServerInfo(command=sys.executable, args=[str(server)]))
    mcp_add.warm_up()

    def through_invoker(chosen: Any) -> Callable[[], object]:
        invoker = ToolInvoker([chosen])
        [prepared] = invoker.prepare([ToolCall("add", {"a": 1, "b": 2}, id="c")], State({}))
        return lambda: invoker.invoke(prepared)

    rows = {
        "agentfsm, a plain tool (the floor)": repeated(through_invoker(add)),
        "agentfsm MCPTool": repeated(through_invoker(mcp_add)),
    }
    return rows, mcp_add.close


def haystack_row(server: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    """Samples of mcp-haystack's ``MCPTool``, called as its Agent calls a tool."""
    from haystack_integrations.tools.mcp import MCPTool, StdioServerInfo

    tool = MCPTool(name="add", server_info=StdioServerInfo(command=sys.executable, args=[str(server)]))
    return repeated(lambda: tool.invoke(a=1, b=2)), tool.close


def in_own_loop(client: Any, call: Callable[[Any], Any]) -> tuple[Callable[[], None], Callable[[], None]]:
    """Samples of ``await call(client)`` in an event loop of its own (a thread).

    One task holds ``client`` open for its whole life (anyio's scopes must be left in the task that
    entered them) and runs a sample each time it is asked: one hop per sample, as an async agent's
    calls are made from inside its loop.
    """
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    asks: asyncio.Queue[asyncio.Future[None] | None] = asyncio.Queue()

    async def serve(opened: asyncio.Future[None]) -> None:
        async with client as entered:
            opened.set_result(None)
            while (done := await asks.get()) is not None:
                for _ in range(CALLS):
                    await call(entered)
                done.set_result(None)

    async def start() -> asyncio.Task[None]:
        opened = loop.create_future()
        task = loop.create_task(serve(opened))
        await opened
        return task

    task = asyncio.run_coroutine_threadsafe(start(), loop).result()

    async def one_sample() -> None:
        done = loop.create_future()
        await asks.put(done)
        await done

    async def stop() -> None:
        await asks.put(None)
        await task

    def sample() -> None:
        asyncio.run_coroutine_threadsafe(one_sample(), loop).result()

    def close() -> None:
        asyncio.run_coroutine_threadsafe(stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)

    return sample, close


def pydantic_ai_row(server: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    """Samples of pydantic-ai's ``MCPToolset`` (its agents are async: the calls run in its event loop)."""
    from pydantic_ai.mcp import MCPToolset

    return in_own_loop(MCPToolset(server), lambda toolset: toolset.direct_call_tool("add", {"a": 1, "b": 2}))


def sdk_row(server: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    """Samples of the ``mcp`` SDK's own client: what MCP itself costs, with no library around it."""
    from mcp import Client, StdioServerParameters

    client = Client(StdioServerParameters(command=sys.executable, args=[str(server)]))
    return in_own_loop(client, lambda c: c.call_tool("add", {"a": 1, "b": 2}))


def sdk_handshake_row(server: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    """Samples of the ``mcp`` SDK's ``ClientSession`` after the ``initialize`` handshake, as mcp-haystack opens it."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    @contextlib.asynccontextmanager
    async def session() -> AsyncIterator[ClientSession]:
        parameters = StdioServerParameters(command=sys.executable, args=[str(server)])
        async with stdio_client(parameters) as (read, write), ClientSession(read, write) as opened:
            await opened.initialize()
            yield opened

    return in_own_loop(session(), lambda s: s.call_tool("add", {"a": 1, "b": 2}))


#: The SDK's rows: its client (the protocol it negotiates) and its session after the handshake.
SDK_CLIENT = "the mcp SDK's client alone"
SDK_HANDSHAKE = "the mcp SDK's session after the initialize handshake"


def main(samples: int) -> dict[str, Any]:
    """Per-call medians and minimums of every row, taking turns."""
    with tempfile.TemporaryDirectory() as tmp:
        server = Path(tmp) / "server.py"
        server.write_text(SERVER, encoding="utf-8")
        rows, closers = agentfsm_rows(server)
        closers = [closers]
        others = (
            (SDK_CLIENT, sdk_row),
            (SDK_HANDSHAKE, sdk_handshake_row),
            ("mcp-haystack MCPTool", haystack_row),
            ("pydantic-ai MCPToolset", pydantic_ai_row),
        )
        for name, make in others:
            rows[name], close = make(server)
            closers.append(close)
        for sample in rows.values():
            sample()  # connected, tools listed, warm
        timings: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(samples):
            for name, sample in rows.items():
                start = time.perf_counter()
                sample()
                timings[name].append((time.perf_counter() - start) / CALLS * 1e6)
        for close in closers:
            close()
    return {
        "calls_per_sample": CALLS,
        "compared_with": {
            "agentfsm MCPTool": SDK_CLIENT,
            "mcp-haystack MCPTool": SDK_HANDSHAKE,
            "pydantic-ai MCPToolset": SDK_CLIENT,
        },
        "versions": {name: version(name) for name in ("mcp", "mcp-haystack", "pydantic-ai-slim")},
        "rows": {
            name: {"median_us": round(statistics.median(t), 1), "min_us": round(min(t), 1)}
            for name, t in timings.items()
        },
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)))
