"""The session's life: timeouts, cancellation, servers that die or restart, and no leaked process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from agentfsm.mcp import (
    ConnectionState,
    MCPConnectionError,
    MCPConnectionLostError,
    MCPTimeoutError,
    MCPTool,
    MCPToolset,
    StdioServerInfo,
)
from tests.helpers import wait_until
from tests.mcp.conftest import (
    HttpServer,
    cancelled_on_the_server,
    children,
    stdio_info,
    wait_for_no_children,
    wait_for_state,
    wait_for_text,
)


def tool(toolset: MCPToolset, name: str) -> MCPTool:
    found = next(t for t in toolset if t.name == name)
    assert isinstance(found, MCPTool)
    return found


def test_a_call_past_its_timeout_is_cancelled_on_the_server(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    toolset = MCPToolset(stdio_info(), invocation_timeout=0.5)
    try:
        toolset.warm_up()
        with pytest.raises(MCPTimeoutError) as info:
            tool(toolset, "slow").invoke(seconds=30, marker=str(marker))
        assert info.value.operation == "call"
        # The server saw notifications/cancelled: its tool was cancelled, and the session still serves.
        assert tool(toolset, "add").invoke(a=1, b=2)["text"] == "3"
        assert cancelled_on_the_server(marker)
    finally:
        toolset.close()


def test_a_long_call_within_its_timeout_finishes(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    toolset = MCPToolset(stdio_info(), invocation_timeout=60)
    try:
        toolset.warm_up()
        assert tool(toolset, "slow").invoke(seconds=1.5, marker=str(marker))["text"] == "slept"
        assert marker.read_text() == "finished"
    finally:
        toolset.close()


async def test_cancelling_an_async_call_cancels_it_on_the_server(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    toolset = MCPToolset(stdio_info())
    try:
        await toolset.warm_up_async()
        call = asyncio.create_task(tool(toolset, "slow").invoke_async(seconds=30, marker=str(marker)))
        for _ in range(6000):  # cancelled once the server runs it (at most a minute)
            if marker.exists() or call.done():
                break
            await asyncio.sleep(0.01)
        assert marker.exists() and not call.done(), "the call did not start on the server"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert (await tool(toolset, "add").invoke_async(a=2, b=2))["text"] == "4"
        assert wait_for_text(marker, "cancelled") == "cancelled"
    finally:
        await toolset.close_async()


def test_a_killed_stdio_server_is_restarted_for_the_next_call() -> None:
    before = children()
    toolset = MCPToolset(stdio_info())
    try:
        toolset.warm_up()
        count = tool(toolset, "count")
        assert count.invoke()["text"] == "1"
        [server] = [pid for pid in children() if pid not in before]
        os.kill(server, signal.SIGKILL)
        assert wait_for_state(toolset.connection, ConnectionState.LOST) is ConnectionState.LOST
        assert count.invoke()["text"] == "1"  # a new server process: its count starts again
        assert toolset.connection.state is ConnectionState.READY
    finally:
        toolset.close()
    assert wait_for_no_children(before) == []


def test_a_call_in_flight_when_the_server_dies_fails_and_is_not_sent_again(tmp_path: Path) -> None:
    before = children()
    marker = tmp_path / "marker"
    toolset = MCPToolset(stdio_info())
    try:
        toolset.warm_up()
        [server] = [pid for pid in children() if pid not in before]
        # Kills the server once it runs the call (the marker says so), within a minute or not at all.
        kill_once_started = (
            f"import os, pathlib, sys, time\nfor _ in range(3000):\n    if pathlib.Path({str(marker)!r}).exists():\n"
            f"        os.kill({server}, 9)\n        sys.exit(0)\n    time.sleep(0.02)\nsys.exit('the call never started')"
        )
        killer = subprocess.Popen([sys.executable, "-c", kill_once_started])
        with pytest.raises(MCPConnectionLostError, match="not sent again"):
            tool(toolset, "slow").invoke(seconds=30, marker=str(marker))
        assert killer.wait(60) == 0
        assert marker.read_text() == "started"  # cut off with its server, and not sent to the next one
        assert tool(toolset, "count").invoke()["text"] == "1"
    finally:
        toolset.close()
    assert wait_for_no_children(before) == []


def test_a_restarted_http_server_is_reached_again(http_server: HttpServer) -> None:
    toolset = MCPToolset(http_server.info())
    try:
        toolset.warm_up()
        count = tool(toolset, "count")
        assert count.invoke()["text"] == "1"
        assert count.invoke()["text"] == "2"
        http_server.restart()
        assert count.invoke()["text"] == "1"
    finally:
        toolset.close()


# Stopping the SSE server cuts its open event stream, and the SDK's SSE code leaves that stream's
# memory streams to the garbage collector (a ResourceWarning from anyio, not from agentfsm's streams).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_restarted_sse_server_gets_a_new_session(sse_server: HttpServer) -> None:
    toolset = MCPToolset(sse_server.info())
    try:
        toolset.warm_up()
        count = tool(toolset, "count")
        assert count.invoke()["text"] == "1"
        sse_server.restart()  # the old session is gone with the server's memory, and its event stream ended
        # Seen by the client once its stream reader reads the end: a call sent before that is in flight
        # when the session drops, and fails without being sent again (the test above).
        assert wait_for_state(toolset.connection, ConnectionState.LOST) is ConnectionState.LOST
        assert count.invoke()["text"] == "1"
        assert count.invoke()["text"] == "2"
    finally:
        toolset.close()


def test_a_server_that_never_answers_times_out_and_is_not_left_running() -> None:
    before = children()
    silent = StdioServerInfo(command=sys.executable, args=["-c", "import time; time.sleep(60)"])
    toolset = MCPToolset(silent, connection_timeout=0.5, max_reconnects=0)
    with pytest.raises(MCPTimeoutError) as info:
        toolset.warm_up()
    assert info.value.operation == "connect"
    assert toolset.connection.state is ConnectionState.DISCONNECTED
    toolset.close()
    assert wait_for_no_children(before) == []


def test_no_server_process_outlives_close_errors_or_a_keyboard_interrupt(tmp_path: Path) -> None:
    """Ctrl-C while a call runs: the run stops with ``KeyboardInterrupt`` and the server process ends with it.

    The interrupt comes from outside, as a terminal's does, once the server has started the call
    (its marker says so): when it came makes no difference to what the test expects.
    """
    marker = tmp_path / "m"
    script = tmp_path / "interrupted.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parents[2])!r})
            from agentfsm import Agent, ChatMessage, ToolCall
            from agentfsm.generators import ScriptedChatGenerator
            from agentfsm.mcp import MCPToolset
            from tests.mcp.conftest import children, stdio_info, wait_for_no_children

            before = children()
            call = ChatMessage.from_assistant(tool_calls=[ToolCall("slow", {{"seconds": 60, "marker": {str(marker)!r}}})])
            agent = Agent(chat_generator=ScriptedChatGenerator([call, "done"]), tools=MCPToolset(stdio_info()))
            try:
                with agent:
                    agent.run([ChatMessage.from_user("sleep")])
                print("not interrupted")
            except KeyboardInterrupt:
                print("interrupted", wait_for_no_children(before))
            """
        )
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: marker.exists() or child.poll() is not None, "the child's call to start", seconds=120)
        assert child.poll() is None, f"the child ended before its call started: {child.communicate()}"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert "interrupted []" in out, (out, err)


def test_closing_from_a_progress_callback_is_refused_instead_of_hanging(tmp_path: Path) -> None:
    refused: list[BaseException] = []

    def close_now(*progress: object) -> None:  # runs on the connection's own thread
        try:
            toolset.close()
        except MCPConnectionError as exc:
            refused.append(exc)

    toolset = MCPToolset(stdio_info(), tool_names=["slow"], progress_callback=close_now)
    results: list[object] = []
    # In a thread of its own: were the close to wait for the connection's thread from that thread,
    # the test would report it instead of hanging.
    caller = threading.Thread(
        target=lambda: results.append(tool(toolset, "slow").invoke(seconds=0.01, marker=str(tmp_path / "m")))
    )
    try:
        toolset.warm_up()
        caller.start()
        caller.join(60)
        assert not caller.is_alive(), "close() from the connection's thread deadlocked"
        assert len(refused) == 1 and "own thread" in str(refused[0])
        assert results and results[0]["text"] == "slept"  # type: ignore[index]
    finally:
        if not caller.is_alive():
            toolset.close()
