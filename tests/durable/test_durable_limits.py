"""Usage limits and loop detection in durable runs: the same edges and exit reasons as in process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS

from agentfsm import Agent, Breakpoint, BreakpointException, ChatMessage, LoopDetection, Phase, UsageLimits
from agentfsm.durable import DurableAgent, launch
from agentfsm.testing import comparable_result
from tests.helpers import add, call, calls


class CountingModel:
    """Calls ``add`` three times, then answers: its reply depends on the conversation only (a workflow may replay it)."""

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        made = sum(1 for m in messages if m.tool_calls)
        if made < 3:
            return {"replies": [calls(call("add", f"c{made}", a=made, b=1))]}
        return {"replies": [ChatMessage.from_assistant("done")]}


def _agent() -> Agent:
    return Agent(chat_generator=CountingModel(), tools=[add], usage_limits=UsageLimits(requests=2))


class RepeatingModel:
    """Makes the same call with the same arguments, for ever."""

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        made = sum(1 for m in messages if m.tool_calls)
        return {"replies": [calls(call("add", f"r{made}", a=1, b=2))]}


limited = DurableAgent(_agent(), "limited")
looping = DurableAgent(
    Agent(chat_generator=RepeatingModel(), tools=[add], loop_detection=LoopDetection(repeats=3)), "looping"
)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest")
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


def test_a_durable_run_ends_at_its_limit_as_in_process(launched: str) -> None:
    result = limited.run([ChatMessage.from_user("go")], run_id="l1")
    assert result["exit_reason"] == "usage_limit:requests" and result["step_count"] == 2
    assert comparable_result(result) == comparable_result(_agent().run([ChatMessage.from_user("go")]))


def test_a_durable_run_paused_near_its_limit_keeps_its_counts(launched: str) -> None:
    with pytest.raises(BreakpointException) as paused:
        limited.run([ChatMessage.from_user("go")], run_id="l2", break_point=Breakpoint(phase=Phase.EXIT_CHECK, step=1))
    result = limited.run(snapshot=paused.value.snapshot)
    assert result["exit_reason"] == "usage_limit:requests" and result["step_count"] == 2


def test_a_durable_run_that_repeats_itself_ends_as_in_process(launched: str) -> None:
    result = looping.run([ChatMessage.from_user("go")], run_id="loop1")
    assert result["exit_reason"] == "loop_detected" and result["step_count"] == 3
    assert comparable_result(result) == comparable_result(looping.agent.run([ChatMessage.from_user("go")]))
