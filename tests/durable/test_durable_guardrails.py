"""Durable runs with guardrails: arguments a decision changed are guarded before the call runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS

from agentfsm import Agent, ChatMessage, GuardrailResult, guardrail, tool
from agentfsm.checking.invariants import transcript_problem
from agentfsm.durable import DurableAgent, launch
from agentfsm.errors import HITLBreakpointException
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from tests.helpers import call, calls

PAID: list[int] = []


@tool
def pay(amount: int) -> str:
    """Pay ``amount``."""
    PAID.append(amount)
    return f"paid {amount}"


@guardrail("tool_call", tools=["pay"])
def at_most_100(call: Any) -> GuardrailResult:
    """No payment above 100."""
    return GuardrailResult.tripwire("above 100") if call.arguments["amount"] > 100 else GuardrailResult.passed()


guarded = DurableAgent(
    Agent(
        chat_generator=ScriptedChatGenerator([calls(call("pay", "p1", amount=10), call("pay", "p2", amount=20))]),
        tools=[pay],
        guardrails=[at_most_100],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy("")},
    ),
    "guardrails-guarded",
)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest")
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


def test_a_decision_that_changes_a_call_is_guarded_before_the_durable_run_runs_it(launched: str) -> None:
    PAID.clear()
    with pytest.raises(HITLBreakpointException) as paused:
        guarded.run([ChatMessage.from_user("pay")], run_id="g1")
    decisions = [
        ToolExecutionDecision("pay", True, "p1", final_tool_params={"amount": 500}),
        ToolExecutionDecision("pay", True, "p2"),
    ]
    result = guarded.run(snapshot=paused.value.snapshot, decisions=decisions)
    assert result.exit_reason == "guardrail:at_most_100"
    assert PAID == [], "neither call ran"
    assert transcript_problem(result["messages"]) is None, "both calls have a result"
    assert guarded.result("g1").exit_reason == "guardrail:at_most_100", "the stored record ends the same way"
