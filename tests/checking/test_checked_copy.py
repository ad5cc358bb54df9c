"""The checked copy of an agent: every parameter the user gave is checked as given."""

from __future__ import annotations

from typing import Any

from agentfsm import Agent
from agentfsm.checking.world import REPLACED_PARAMETERS, WorldSlot, WorldStore, agent_parameters, build_agent
from agentfsm.limits import UsageLimits
from agentfsm.loops import LoopDetection
from agentfsm.messages import StreamingChunk
from agentfsm.testing import RecordedRun, check_agent
from agentfsm.workers import CallThread
from tests.checking import agents


def _chunks(chunk: StreamingChunk) -> None:
    """A streaming callback that drops its chunks."""


def test_the_checked_copy_keeps_every_parameter_it_does_not_replace() -> None:
    agent = Agent(
        chat_generator=agents.plain.chat_generator,
        tools=[agents.add],
        system_prompt="Be brief.",
        max_agent_steps=7,
        streaming_callback=_chunks,
        tool_streaming_callback_passthrough=True,
        raise_on_tool_invocation_failure=True,
        usage_limits=UsageLimits(requests=1),
        loop_detection=LoopDetection(repeats=2),
    )
    slot = WorldSlot()
    store = WorldStore(slot)
    try:
        copy = build_agent(agent, slot, store, {}, thread=CallThread("checked-tools"))
    finally:
        store.close()
    # A parameter Agent gains is copied by name, or listed as replaced: either way, never dropped.
    assert set(agent_parameters()) > REPLACED_PARAMETERS
    for name in set(agent_parameters()) - REPLACED_PARAMETERS:
        assert getattr(copy, name) == getattr(agent, name), name


def _exit_reasons(reasons: set[str]) -> Any:
    def collect(run: RecordedRun) -> bool:
        if run.result is not None:
            reasons.add(run.result["exit_reason"])
        return True

    return collect


def test_a_usage_limit_is_explored_as_the_agent_has_it() -> None:
    agent = Agent(chat_generator=agents.plain.chat_generator, tools=[agents.add], usage_limits=UsageLimits(requests=1))

    def one_model_call(run: RecordedRun) -> bool:
        return len({m.step for m in run.model_inputs}) <= 1

    reasons: set[str] = set()
    result = check_agent(agent, max_steps=2, invariants=[one_model_call, _exit_reasons(reasons)])
    assert result.ok, result.text()
    assert "usage_limit:requests" in reasons


def test_loop_detection_is_explored_with_its_on_loop_hooks() -> None:
    agent = Agent(
        chat_generator=agents.plain.chat_generator,
        tools=[agents.add],
        loop_detection=LoopDetection(repeats=2, then="stop"),
        hooks={"on_loop": [agents.count_llm_calls]},
        state_schema={"llm_calls": {"type": int}},
    )
    reasons: set[str] = set()
    result = check_agent(agent, max_steps=2, replies=["text", "tool"], invariants=[_exit_reasons(reasons)])
    assert result.ok, result.text()
    assert any("loop" in reason for reason in reasons), reasons


def test_a_tool_call_limit_counts_a_refused_call_once_across_resumes() -> None:
    agent = Agent(
        chat_generator=agents.plain.chat_generator,
        tools=[agents.add, agents.search],
        usage_limits=UsageLimits(tool_calls=1),
    )
    result = check_agent(agent, max_steps=1, replies=["parallel", "text"])
    assert result.ok, result.text()
