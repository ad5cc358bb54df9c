"""The cost of an MCP tool call: a tool on a local stdio MCP server against the same function as a plain tool.

Run ``python bench/mcp_overhead.py`` (``--calls N``). The plain tool and the MCP tool go through
``ToolInvoker.invoke``, as a run's calls do; the third figure is the ``mcp`` SDK's own client
calling the same server from inside one event loop, so that what agentfsm adds (the hop to the
connection's thread and the result's conversion) shows apart from what MCP itself costs
(JSON-RPC over the pipe and the server's dispatch). Prints the median and the minimum per call,
in microseconds, over several rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from agentfsm import ToolCall
from agentfsm.mcp import MCPTool, StdioServerInfo
from agentfsm.state import State
from agentfsm.tools import ToolInvoker, tool

SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench", log_level="WARNING")

@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

server.run()
'''


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def per_call_us(call: Callable[[], object], calls: int, rounds: int) -> tuple[float, float]:
    """The median and the minimum over ``rounds`` of the mean time of one of ``calls`` calls, in µs."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples), min(samples)


def sdk_per_call_us(server: Path, calls: int, rounds: int) -> tuple[float, float]:
    """Like ``per_call_us``, for the SDK's client called from its own event loop (no thread hop)."""
    from mcp import Client, StdioServerParameters

    async def measure() -> tuple[float, float]:
        samples = []
        async with Client(StdioServerParameters(command=sys.executable, args=[str(server)])) as client:
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(calls):
                    await client.call_tool("add", {"a": 1, "b": 2})
                samples.append((time.perf_counter() - start) / calls * 1e6)
        return statistics.median(samples), min(samples)

    return asyncio.run(measure())


def main() -> None:
    """Measure and print both figures and their difference."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    server = Path(tempfile.mkdtemp()) / "server.py"
    server.write_text(SERVER)
    remote = MCPTool("add", StdioServerInfo(command=sys.executable, args=[str(server)]), eager_connect=True)
    try:
        state = State({})
        figures = {}
        for name, t in (("plain tool", add), ("MCP tool over stdio", remote)):
            invoker = ToolInvoker([t])
            [prepared] = invoker.prepare([ToolCall("add", {"a": 1, "b": 2})], state)
            figures[name] = per_call_us(partial(invoker.invoke, prepared), options.calls, options.rounds)
    finally:
        remote.close()
    figures["the SDK's client alone"] = sdk_per_call_us(server, options.calls, options.rounds)
    for name, (median, minimum) in figures.items():
        print(f"{name:>22}: median {median:9.1f} µs/call, min {minimum:9.1f} µs/call")
    added = figures["MCP tool over stdio"][0] - figures["the SDK's client alone"][0]
    print(f"agentfsm adds to the SDK's call: {added:.1f} µs/call (median)")


if __name__ == "__main__":
    main()
