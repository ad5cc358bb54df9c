"""A paused run's questions, and answers read as decisions: every open one at once, each fitting its schema."""

from __future__ import annotations

import tempfile

import pytest

from agentfsm import Agent, AgentSnapshot, ChatMessage, ToolCall, tool
from agentfsm._serving.questions import (
    BREAKPOINT,
    BREAKPOINT_ID,
    CANCELLED_FEEDBACK,
    INPUT,
    OUTCOME_UNKNOWN,
    TOOL_CALL,
    Reply,
    decide,
    questions_of,
)
from agentfsm.errors import BreakpointException, InputBreakpointException, ProtocolRequestError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy
from agentfsm.interrupts import AskUser, InputAnswer
from agentfsm.pauses import Cancelled, OutcomeUnknown


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment."""
    return f"paid {amount} to {to}"


TOOLS = {"pay": pay}


def paused() -> AgentSnapshot:
    calls = [ToolCall("pay", {"to": "ann", "amount": 30}, "p1"), ToolCall("pay", {"to": "bob", "amount": 40}, "p2")]
    model = ScriptedChatGenerator([ChatMessage.from_assistant(tool_calls=calls), "Done."])
    strategies = {"pay": BreakpointConfirmationStrategy(tempfile.mkdtemp())}
    agent = Agent(chat_generator=model, tools=[pay], confirmation_strategies=strategies)
    with pytest.raises(BreakpointException) as raised:
        agent.run([ChatMessage.from_user("Pay both.")])
    return raised.value.snapshot


def test_a_call_waiting_for_approval_asks_with_its_tools_arguments_as_the_edit_schema() -> None:
    first, second = questions_of(paused(), TOOLS)
    assert (first.id, first.reason, first.tool_call_id, first.tool_name) == ("p1", TOOL_CALL, "p1", "pay")
    assert first.arguments == {"to": "ann", "amount": 30} and second.id == "p2"
    assert first.message == 'Approve pay(to="ann", amount=30) (Send a payment.)?'
    assert first.response_schema["properties"]["editedArgs"]["properties"] == pay.parameters["properties"]
    assert first.to_dict()["responseSchema"] == first.response_schema


def test_a_call_in_doubt_and_a_breakpoint_ask_too_and_a_cancellation_asks_nothing() -> None:
    snapshot = paused()
    doubt = snapshot.model_copy(update={"break_point": OutcomeUnknown(["p1"], ["pay"]).to_dict()})
    [question] = questions_of(doubt, TOOLS)
    assert question.reason == OUTCOME_UNKNOWN and "editedArgs" not in question.response_schema["properties"]
    stopped = snapshot.model_copy(update={"break_point": {"type": "Breakpoint", "phase": "CONFIRM"}})
    [question] = questions_of(stopped, TOOLS)
    assert (question.id, question.reason) == (BREAKPOINT_ID, BREAKPOINT)
    assert questions_of(snapshot.model_copy(update={"break_point": Cancelled().to_dict()}), TOOLS) == []


def test_answers_become_decisions_bound_to_their_calls() -> None:
    questions = questions_of(paused(), TOOLS)
    edited = {"approved": True, "editedArgs": {"to": "bob", "amount": 10}}
    resumption = decide(
        questions, [Reply("p1", "resolved", {"approved": True}), Reply("p2", "resolved", edited)], TOOLS
    )
    approved, modified = resumption.decisions
    assert (approved.tool_call_id, approved.execute, approved.final_tool_params) == (
        "p1",
        True,
        {"to": "ann", "amount": 30},
    )
    assert (modified.tool_call_id, modified.final_tool_params) == ("p2", {"to": "bob", "amount": 10})
    rejected = decide(
        questions, [Reply("p1", "resolved", {"approved": False, "feedback": "no"}), Reply("p2", "cancelled")], TOOLS
    )
    assert [(d.execute, d.feedback) for d in rejected.decisions] == [(False, "no"), (False, CANCELLED_FEEDBACK)]


@pytest.mark.parametrize(
    ("replies", "says"),
    [
        ([Reply("p1", "resolved", {"approved": True})], "['p2'] are not answered"),
        (
            [Reply("p1", "resolved", {"approved": True}), Reply("p1", "cancelled"), Reply("p2", "cancelled")],
            "answered twice",
        ),
        ([Reply("p3", "cancelled")], "no open interrupt 'p3'"),
        (
            [Reply("p1", "resolved", {"approved": True, "extra": 1}), Reply("p2", "cancelled")],
            "does not fit its schema",
        ),
        ([Reply("p1", "resolved", None), Reply("p2", "cancelled")], "does not fit its schema"),
        (
            [Reply("p1", "resolved", {"approved": True, "editedArgs": {"to": "ann"}}), Reply("p2", "cancelled")],
            "does not fit",
        ),
    ],
    ids=["partial", "twice", "unknown", "extra field", "no payload", "edit misses an argument"],
)
def test_answers_that_do_not_fit_are_refused_whole(replies: list[Reply], says: str) -> None:
    with pytest.raises(ProtocolRequestError, match="Nothing ran") as raised:
        decide(questions_of(paused(), TOOLS), replies, TOOLS)
    assert says in str(raised.value)


def test_a_breakpoint_is_resolved_to_go_on_or_cancelled_to_leave_it() -> None:
    stopped = paused().model_copy(update={"break_point": {"type": "Breakpoint", "phase": "CONFIRM"}})
    questions = questions_of(stopped, TOOLS)
    assert decide(questions, [Reply(BREAKPOINT_ID, "resolved", {})], TOOLS).go_on
    assert not decide(questions, [Reply(BREAKPOINT_ID, "cancelled")], TOOLS).go_on


@tool
def which(ask_user: AskUser) -> str:
    """Asks which account pays."""
    return str(ask_user("Which account?", {"enum": ["checking", "savings"]}))


def test_a_question_a_tool_asked_is_asked_with_its_own_schema_and_answered_as_an_input_answer() -> None:
    model = ScriptedChatGenerator([ChatMessage.from_assistant(tool_calls=[ToolCall("which", {}, "w1")]), "Done."])
    agent = Agent(chat_generator=model, tools=[which])
    with pytest.raises(InputBreakpointException) as raised:
        agent.run([ChatMessage.from_user("Pay.")])
    [question] = questions_of(raised.value.snapshot, {"which": which})
    assert (question.id, question.reason, question.message) == ("w1.0", INPUT, "Which account?")
    assert question.response_schema == {"enum": ["checking", "savings"]} and question.tool_call_id == "w1"
    with pytest.raises(ProtocolRequestError, match="does not fit its schema"):
        decide([question], [Reply("w1.0", "resolved", "gold")], {"which": which})
    resumption = decide([question], [Reply("w1.0", "resolved", "savings")], {"which": which})
    assert resumption.decisions == [InputAnswer("w1.0", "savings")] and resumption.go_on
    assert not decide([question], [Reply("w1.0", "cancelled")], {"which": which}).go_on
    result = agent.run(snapshot=raised.value.snapshot, decisions=resumption.decisions)
    assert result["messages"][-2].tool_call_result.result == "savings"
