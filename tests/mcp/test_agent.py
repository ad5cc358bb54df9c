"""MCP tools in agent runs: the whole tool loop, sessions across runs, errors the model reads, resume elsewhere."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentfsm import Agent, BreakpointException, ChatMessage, ComponentTool, Phase, ToolCall
from agentfsm.breakpoints import Breakpoint
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.mcp import ConnectionState, MCPTool, MCPToolset
from tests.mcp.conftest import (
    HttpServer,
    cancelled_on_the_server,
    children,
    stdio_info,
    wait_for_no_children,
    wait_for_state,
    wait_for_text,
)

QUESTION = [ChatMessage.from_user("What is 2 + 3?")]


class Arithmetician:
    """A chat generator (Haystack's documented protocol) that asks ``add`` and then answers with what it returned."""

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        last = messages[-1]
        if last.tool_call_result is not None:
            result = last.tool_call_result
            parts = result.result if isinstance(result.result, list) else [result.result]
            text = " ".join(getattr(p, "text", str(p)) for p in parts)
            answer = f"The tool failed: {text}" if result.error else f"2 + 3 = {text}"
            return {"replies": [ChatMessage.from_assistant(answer)]}
        return {"replies": [ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": 2, "b": 3}, id="c1")])]}

    async def run_async(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self.run(messages, tools, **kwargs)


def test_the_model_answers_with_the_result_of_a_stdio_tool() -> None:
    before = children()
    with Agent(chat_generator=Arithmetician(), tools=MCPToolset(stdio_info(), tool_names=["add"])) as agent:
        result = agent.run(QUESTION)
    assert result["last_message"].text == "2 + 3 = 5"
    assert wait_for_no_children(before) == []  # `with agent:` ended the server process


async def test_the_model_answers_with_the_result_of_an_http_tool_in_an_async_run(http_server: HttpServer) -> None:
    async with Agent(chat_generator=Arithmetician(), tools=MCPToolset(http_server.info())) as agent:
        result = await agent.run_async(QUESTION)
    assert result["last_message"].text == "2 + 3 = 5"


def count_twice() -> ScriptedChatGenerator:
    call = ChatMessage.from_assistant(tool_calls=[ToolCall("count", {}, id="c")])
    return ScriptedChatGenerator([call, "one", call, "two"])


def counts(result: dict[str, Any]) -> list[str]:
    return [m.tool_call_result.result[0].text for m in result["messages"] if m.tool_call_result is not None]


def test_one_session_serves_every_run_until_the_agent_closes() -> None:
    agent = Agent(chat_generator=count_twice(), tools=MCPToolset(stdio_info()))
    with agent:
        assert counts(agent.run([ChatMessage.from_user("count")])) == ["1"]
        assert counts(agent.run([ChatMessage.from_user("count")])) == ["2"]  # the same server, the same session
    agent.chat_generator = count_twice()
    with agent:
        assert counts(agent.run([ChatMessage.from_user("count")])) == ["1"]  # a new session after close


@pytest.mark.parametrize("driver", ["run", "run_async"])
def test_a_timed_out_call_is_an_error_result_the_model_reads(tmp_path: Path, driver: str) -> None:
    marker = tmp_path / "m"
    call = ChatMessage.from_assistant(tool_calls=[ToolCall("slow", {"seconds": 30, "marker": str(marker)})])
    generator = ScriptedChatGenerator([call, "It took too long."])
    with Agent(chat_generator=generator, tools=MCPToolset(stdio_info(), invocation_timeout=0.5)) as agent:
        question = [ChatMessage.from_user("sleep")]
        result = agent.run(question) if driver == "run" else asyncio.run(agent.run_async(question))
        assert cancelled_on_the_server(marker)  # on the server, before the session closed
    tool_result = result["messages"][-2].tool_call_result
    assert tool_result.error
    assert "MCPTimeoutError" in tool_result.result
    assert "MCPTimeoutError" in generator.calls[1]["messages"][-1].tool_call_result.result


class KillServerBetweenCalls(ScriptedChatGenerator):
    """A script that kills the MCP server's process before its second reply, as a crash of the server would."""

    def __init__(self, replies: list[ChatMessage | str], before: list[int], toolset: MCPToolset) -> None:
        super().__init__(replies)
        self.before = before
        self.toolset = toolset

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        if self.position == 1:
            for pid in children():
                if pid not in self.before:
                    os.kill(pid, signal.SIGKILL)
            assert wait_for_state(self.toolset.connection, ConnectionState.LOST) is ConnectionState.LOST
        return super().run(messages, tools, **kwargs)


def test_a_server_killed_mid_run_is_restarted_for_the_next_call() -> None:
    before = children()
    call = ChatMessage.from_assistant(tool_calls=[ToolCall("count", {}, id="c")])
    toolset = MCPToolset(stdio_info())
    generator = KillServerBetweenCalls([call, call, "done"], before, toolset)
    with Agent(chat_generator=generator, tools=toolset) as agent:
        result = agent.run([ChatMessage.from_user("count twice")])
    assert counts(result) == ["1", "1"]  # the second call ran on a new server process
    assert result["last_message"].text == "done"


class RestartHttpServer(ScriptedChatGenerator):
    """A script that restarts the HTTP server before its second reply, and while the call of its third runs."""

    def __init__(self, replies: list[ChatMessage | str], server: HttpServer, marker: Path) -> None:
        super().__init__(replies)
        self.server = server
        self.marker = marker
        self.restarting: threading.Thread | None = None

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        if self.position == 1:
            self.server.restart()
        elif self.position == 2:
            self.restarting = threading.Thread(target=self.restart_once_started)
            self.restarting.start()
        elif self.position == 3:
            assert self.restarting is not None
            self.restarting.join()
        return super().run(messages, tools, **kwargs)

    def restart_once_started(self) -> None:
        assert wait_for_text(self.marker, "started") == "started"
        self.server.restart()


def test_a_restarted_handshake_era_http_server_gets_a_new_session_mid_run(
    handshake_http_server: HttpServer, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    count = ChatMessage.from_assistant(tool_calls=[ToolCall("count", {}, id="c")])
    slow = ChatMessage.from_assistant(tool_calls=[ToolCall("slow", {"seconds": 30, "marker": str(marker)}, id="s")])
    generator = RestartHttpServer([count, count, slow, count, "done"], handshake_http_server, marker)
    toolset = MCPToolset(handshake_http_server.info())
    with Agent(chat_generator=generator, tools=toolset) as agent:
        result = agent.run([ChatMessage.from_user("count, sleep, count")])
        protocol = toolset.connection._client.protocol_version if toolset.connection._client else None
    assert protocol == "2025-11-25"  # a session from the handshake, which the restarted server answers 404 for
    results = [m.tool_call_result for m in result["messages"] if m.tool_call_result is not None]
    # The call after each restart reached the new server (its count starts again) without an error.
    assert [r.result[0].text for r in results if not r.error] == ["1", "1", "1"]
    [lost] = [r for r in results if r.error]
    assert lost.origin.tool_name == "slow"
    assert "MCPConnectionLostError" in lost.result
    assert marker.read_text() == "cancelled"  # the old server cut it off, and the new one never got it
    assert result["last_message"].text == "done"


def test_a_run_paused_before_its_mcp_call_resumes_in_another_process(tmp_path: Path) -> None:
    call = ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": 20, "b": 22}, id="c")])
    toolset = MCPToolset(stdio_info(), tool_names=["add"], invocation_timeout=60)
    agent = Agent(chat_generator=ScriptedChatGenerator([call, "done"]), tools=toolset)
    try:
        with agent:
            agent.run([ChatMessage.from_user("add")], break_point=Breakpoint(phase=Phase.TOOL_RUN))
    except BreakpointException as paused:
        snapshot = paused.snapshot
    (tmp_path / "agent.json").write_text(json.dumps(agent.to_dict()))
    (tmp_path / "snapshot.json").write_text(json.dumps(snapshot.to_dict()))
    assert "server_info" in (tmp_path / "agent.json").read_text()
    script = tmp_path / "resume.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            sys.path.insert(0, {str(Path(__file__).parents[2])!r})
            from agentfsm import Agent, AgentSnapshot
            agent = Agent.from_dict(json.loads(open({str(tmp_path / "agent.json")!r}).read()))
            snapshot = AgentSnapshot.from_dict(json.loads(open({str(tmp_path / "snapshot.json")!r}).read()))
            with agent:
                result = agent.run(snapshot=snapshot)
            print(result["messages"][-2].tool_call_result.result[0].text, result["last_message"].text)
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["42", "done"], done.stderr


async def test_inline_tools_never_stall_the_event_loop_during_an_mcp_call(tmp_path: Path) -> None:
    marker, release = tmp_path / "marker", tmp_path / "release"
    arguments = {"seconds": 60, "marker": str(marker), "release": str(release)}
    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("slow", arguments, id="s")])
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply, "done"]),
        tools=MCPToolset(stdio_info(), tool_names=["slow"]),
        tool_invoker_kwargs={"sync_tools_in_threads": False},
    )
    seen: list[str] = []

    async def watch() -> None:  # another task on the run's loop: it runs only if the call yields the loop
        while not marker.exists():
            await asyncio.sleep(0.01)
        seen.append(marker.read_text())
        release.touch()  # the call ends only now (or after its minute, were the loop blocked)

    async with agent:
        watcher = asyncio.create_task(watch())
        result = await agent.run_async([ChatMessage.from_user("go")])
        await watcher
    assert result["last_message"].text == "done"
    assert seen == ["started"], "the loop was blocked for the whole call"


class AuditedMCPTool(MCPTool):
    """An MCP tool whose subclass overrides ``invoke`` (and not ``invoke_async``): it records each call."""

    calls: ClassVar[list[dict[str, Any]]] = []

    def invoke(self, **kwargs: Any) -> Any:
        type(self).calls.append(kwargs)
        return super().invoke(**kwargs)


async def test_an_overridden_invoke_runs_in_async_runs_as_in_sync_ones() -> None:
    AuditedMCPTool.calls = []
    agent = Agent(chat_generator=Arithmetician(), tools=[AuditedMCPTool("add", stdio_info())])
    with agent:
        agent.run(QUESTION)
        await agent.run_async(QUESTION)
    assert AuditedMCPTool.calls == [{"a": 2, "b": 3}, {"a": 2, "b": 3}]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_closing_an_agent_closes_the_mcp_sessions_of_the_agents_it_calls(driver: str) -> None:
    before = children()
    toolset = MCPToolset(stdio_info(), tool_names=["add"])
    inner = Agent(chat_generator=Arithmetician(), tools=toolset)
    ask_inner = ChatMessage.from_assistant(tool_calls=[ToolCall("helper", {"messages": []}, id="h")])
    outer = Agent(
        chat_generator=ScriptedChatGenerator([ask_inner, "done", ask_inner, "done again"]),
        tools=[ComponentTool(component=inner, name="helper", description="Ask the helper.")],
    )

    async def twice_async() -> None:
        for _ in range(2):
            async with outer:
                await outer.run_async(QUESTION)
                assert toolset.connection.state is ConnectionState.READY
            assert toolset.connection.state is ConnectionState.CLOSED

    if driver == "async":
        asyncio.run(twice_async())
    else:
        for _ in range(2):  # closed, then warmed up again at the next use
            with outer:
                outer.run(QUESTION)
                assert toolset.connection.state is ConnectionState.READY
            assert toolset.connection.state is ConnectionState.CLOSED
    assert wait_for_no_children(before) == []
