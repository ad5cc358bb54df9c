"""The result of a run has every key the seeds read, whichever way the run went: ``tool_call_counts`` is ``{}`` with no tool."""

from __future__ import annotations

import pickle

import pytest

from agentfsm import Agent, BreakpointException, ChatMessage, Phase, ToolCall
from agentfsm.breakpoints import Breakpoint
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.result import AgentResult
from tests.helpers import add

#: The keys every result has: the seeds' (``messages``, ``last_message``), the agent's counters, agentfsm's.
KEYS = {"messages", "last_message", "step_count", "tool_call_counts", "exit_reason", "trace"}
USER = [ChatMessage.from_user("What is 1 + 2?")]


def adding(position: int = 0) -> Agent:
    calls = [ToolCall("add", {"a": 1, "b": 2}, id="c1")]
    return Agent(
        chat_generator=ScriptedChatGenerator([ChatMessage.from_assistant(tool_calls=calls), "3."], position),
        tools=[add],
    )


def paused(agent: Agent, break_point: Breakpoint) -> object:
    with pytest.raises(BreakpointException) as info:
        agent.run(USER, break_point=break_point)
    return info.value.snapshot


def test_a_run_that_calls_no_tool_counts_none() -> None:
    result = Agent(chat_generator=ScriptedChatGenerator(["3."]), tools=[add]).run(USER)
    assert set(result) >= KEYS
    assert (result["tool_call_counts"], result["step_count"], result["last_message"].text) == ({}, 1, "3.")
    assert pickle.loads(pickle.dumps(result))["tool_call_counts"] == {}


def test_a_run_of_no_model_call_has_every_key() -> None:
    result = Agent(chat_generator=ScriptedChatGenerator([]), max_agent_steps=0).run(USER)
    assert set(result) >= KEYS
    assert (result["tool_call_counts"], result["step_count"], result["exit_reason"]) == ({}, 0, "max_agent_steps")
    assert result["messages"] == USER and result["last_message"] == USER[0]


def test_a_run_whose_tools_ran_counts_them() -> None:
    result = adding().run(USER)
    assert (result["tool_call_counts"], result["step_count"]) == ({"add": 1}, 2)


@pytest.mark.parametrize(
    ("break_point", "counts"),
    [
        (Breakpoint(phase=Phase.LLM_CALL, step=0), {"add": 1}),  # before the first model call
        (Breakpoint(phase=Phase.TOOL_RUN, step=1), {"add": 1}),  # before the tool ran: it runs on resume
        (Breakpoint(phase=Phase.EXIT_CHECK, step=2), {"add": 1}),  # after it ran: the snapshot kept its count
    ],
)
def test_a_resumed_run_has_every_key(break_point: Breakpoint, counts: dict[str, int]) -> None:
    snapshot = paused(adding(), break_point)
    used = {Phase.LLM_CALL: 0, Phase.TOOL_RUN: 1, Phase.EXIT_CHECK: 2}[break_point.phase]
    result = adding(used).run(snapshot=snapshot)
    assert set(result) >= KEYS
    assert (result["tool_call_counts"], result["step_count"], result["last_message"].text) == (counts, 2, "3.")


def test_a_resumed_run_that_calls_no_tool_counts_none() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["3."]))
    snapshot = paused(agent, Breakpoint(phase=Phase.EXIT_CHECK, step=1))
    result = Agent(chat_generator=ScriptedChatGenerator(["3."], position=1)).run(snapshot=snapshot)
    assert set(result) >= KEYS and result["tool_call_counts"] == {}


def test_the_state_keeps_its_own_counts() -> None:
    assert AgentResult({"messages": [], "tool_call_counts": {"add": 2}}, "text", [])["tool_call_counts"] == {"add": 2}
