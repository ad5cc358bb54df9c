"""Tool timeouts: the run stops waiting, the model reads a timeout error, a late result is never applied."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, Phase, Tool, tool
from agentfsm.errors import ConfigurationError, ToolInvocationError, ToolTimeoutError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import SIDE_EFFECTS, add, call, calls

ROOT = Path(__file__).resolve().parents[2]
USER = [ChatMessage.from_user("go")]
#: Set by a test to let the stalled calls return (late, after their timeout).
RELEASE = threading.Event()
#: Set by ``stall`` when it returns, late.
RETURNED = threading.Event()


@tool(timeout=0.2)
def stall(label: str) -> str:
    """Wait until the test releases it."""
    RELEASE.wait(10)
    SIDE_EFFECTS.append(f"stall({label}) returned")
    RETURNED.set()
    return f"late {label}"


@tool
def slow(label: str) -> str:
    """No timeout of its own: the agent's applies."""
    RELEASE.wait(10)
    return label


@pytest.fixture(autouse=True)
def released() -> Any:
    RELEASE.clear()
    RETURNED.clear()
    SIDE_EFFECTS.clear()
    yield
    RELEASE.set()  # no thread of a test outlives it by more than its wait


def results(result: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(m.tool_call_result.result, m.tool_call_result.error) for m in result["messages"] if m.tool_call_result]


def script() -> ScriptedChatGenerator:
    return ScriptedChatGenerator([calls(call("stall", "s1", label="x"), call("add", "a1", a=1, b=2)), "done"])


def test_a_call_past_its_timeout_becomes_an_error_the_model_reads_and_its_late_result_is_dropped() -> None:
    agent = Agent(chat_generator=script(), tools=[stall, add])
    result = agent.run(USER)
    [(stalled, error), (added, _)] = results(result)
    assert error and "ToolTimeoutError" in stalled and "0.2 s" in stalled and added == "3"
    assert result["last_message"].text == "done" and result["tool_call_counts"] == {"stall": 1, "add": 1}
    RELEASE.set()
    assert RETURNED.wait(10), "the abandoned call ran to its end in its thread"
    assert results(result)[0] == (stalled, True), "its result was not applied"
    assert "late x" not in str([m.to_dict() for m in result["messages"]])


async def test_run_async_cancels_an_awaitable_tool_and_abandons_a_sync_one() -> None:
    cancelled = asyncio.Event()

    class Remote(Tool):
        """A tool that can be awaited, like an MCP tool."""

        async def invoke_async(self, **kwargs: Any) -> Any:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "never"

    remote = Remote("remote", "Waits.", {"type": "object", "properties": {}}, lambda: "sync", timeout=0.1)
    model = ScriptedChatGenerator([calls(call("remote", "r1"), call("stall", "s1", label="y")), "done"])
    result = await Agent(chat_generator=model, tools=[remote, stall]).run_async(USER)
    assert [error for _, error in results(result)] == [True, True] and cancelled.is_set()
    assert all("ToolTimeoutError" in text for text, _ in results(result))


#: Set by the test's ticker once the event loop has run it a few times.
TICKED = threading.Event()


@tool(timeout=60)
def needs_the_loop() -> str:
    """Return once the event loop ran other work meanwhile (its timeout at most)."""
    return "ticked" if TICKED.wait(30) else "the loop never ran"


async def test_a_timed_call_never_blocks_the_event_loop_even_when_tools_run_inline() -> None:
    model = ScriptedChatGenerator([calls(call("needs_the_loop", "n1")), "done"])
    agent = Agent(chat_generator=model, tools=[needs_the_loop], tool_invoker_kwargs={"sync_tools_in_threads": False})
    TICKED.clear()

    async def tick() -> None:
        for _ in range(3):
            await asyncio.sleep(0.01)
        TICKED.set()

    ticker = asyncio.create_task(tick())
    result = await agent.run_async(USER)
    await ticker
    assert results(result) == [("ticked", False)], "the loop went on while the timed call was waited for"


def test_the_agent_default_applies_to_tools_without_their_own() -> None:
    model = ScriptedChatGenerator([calls(call("slow", "w1", label="z"), call("stall", "s1", label="x")), "done"])
    agent = Agent(chat_generator=model, tools=[slow, stall], tool_timeout=0.1, tool_concurrency=2)
    assert agent.tool_timeout == 0.1 and agent._invoker.timeout_of(stall) == 0.2
    texts = [text for text, _ in results(agent.run(USER))]
    assert "0.1 s" in texts[0] and "0.2 s" in texts[1]


def test_with_raise_on_tool_invocation_failure_the_timeout_is_raised_typed() -> None:
    agent = Agent(chat_generator=script(), tools=[stall, add], raise_on_tool_invocation_failure=True)
    with pytest.raises(ToolTimeoutError) as raised:
        agent.run(USER)
    assert (raised.value.tool_name, raised.value.timeout) == ("stall", 0.2)
    assert isinstance(raised.value, ToolInvocationError) and isinstance(raised.value, TimeoutError)


RESUME_PROGRAM = """
import sys
from agentfsm import Agent
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import SIDE_EFFECTS, add
from tests.tools.test_timeouts import script, stall
store = SQLiteSnapshotStore(sys.argv[1], durable=True)
snapshot = store.load(sys.argv[2], int(sys.argv[3]))
model = ScriptedChatGenerator(script().replies, position=snapshot.step)
result = Agent(chat_generator=model, tools=[stall, add], snapshot_store=store).run(snapshot=snapshot, fork=True)
print(result["last_message"].text, SIDE_EFFECTS)
"""


def test_the_journal_records_the_abandoned_call_so_a_resume_elsewhere_never_runs_or_applies_it(
    tmp_path: Path,
) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    agent = Agent(chat_generator=script(), tools=[stall, add], snapshot_store=store)
    result = agent.run(USER)
    run_id = store.runs()[0].run_id
    # The record written when the abandoned call was given up, before the step's results were taken in.
    [seq] = [
        info.seq
        for info in store.history(run_id)
        if "s1" in store.load(run_id, info.seq).completed_tool_results
        and store.load(run_id, info.seq).phase is Phase.TOOL_RUN
    ]
    recorded = store.load(run_id, seq).completed_tool_results
    assert recorded["s1"]["error_type"] == "ToolTimeoutError" and recorded["a1"] == {"value": 3}
    RELEASE.set()
    assert RETURNED.wait(10)
    assert store.load(run_id, seq).completed_tool_results == recorded, "the late result changed no record"
    assert store.latest(run_id).messages == [m.to_dict() for m in result["messages"]]
    done = subprocess.run(
        [sys.executable, "-c", RESUME_PROGRAM, str(tmp_path / "runs.db"), run_id, str(seq)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done []", "the resumed run ran neither call again"


def test_timeouts_are_checked_serialized_and_drawn_only_when_configured() -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        Tool("t", "T.", {"type": "object"}, lambda: None, timeout=0)
    with pytest.raises(ConfigurationError, match="tool_timeout"):
        Agent(chat_generator=ScriptedChatGenerator([]), tool_timeout=-1.0)
    with pytest.raises(ConfigurationError, match="same option"):
        Agent(chat_generator=ScriptedChatGenerator([]), tool_timeout=1, tool_invoker_kwargs={"tool_timeout": 2})
    assert Tool.from_dict(stall.to_dict(), ["tests"]).timeout == 0.2 and "timeout" not in add.to_dict()["data"]
    agent = Agent(chat_generator=ScriptedChatGenerator([]), tools=[stall, add], tool_timeout=5)
    assert Agent.from_dict(agent.to_dict(), allowed_modules=["tests"]).tool_timeout == 5
    assert "timeouts - stall 0.2 s, add 5 s" in agent.draw()  # mermaid notes take no colons
    assert "timeouts" not in Agent(chat_generator=ScriptedChatGenerator([]), tools=[add]).draw()


@tool(timeout=5)
def own_timeout() -> str:
    """Raises a TimeoutError of its own, well within its timeout."""
    raise TimeoutError("the upstream service timed out")


async def test_a_timeout_error_the_tool_raises_itself_is_its_own_error_not_a_timeout() -> None:
    model = ScriptedChatGenerator([calls(call("own_timeout", "o1")), "done"] * 2)
    for result in (Agent(chat_generator=model, tools=[own_timeout]).run(USER),
                   await Agent(chat_generator=model, tools=[own_timeout]).run_async(USER)):  # fmt: skip
        [(text, error)] = results(result)
        assert error and "TimeoutError: the upstream service timed out" in text and "ToolTimeoutError" not in text
