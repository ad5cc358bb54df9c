"""One agentfsm agent delegating to another over A2A on 127.0.0.1: the remote's pause is the caller's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, ToolCall
from agentfsm.a2a import RELAY_ANSWERS, A2AAgentTool, create_app
from agentfsm.errors import BreakpointException, ConfigurationError, HITLBreakpointException
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import ToolExecutionDecision
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.tools.tool import idempotency_key
from tests.a2a.conftest import PAID, model_calls, payments_agent
from tests.servers import free_port, serving

ASK = ChatMessage.from_user("Have Ann paid 30 EUR, please.")


def caller(
    remote_url: str, store: SQLiteSnapshotStore | None = None, **tool_options: Any
) -> tuple[Agent, A2AAgentTool]:
    """An assistant that delegates payments, and answers with what the payments agent said."""
    payments = A2AAgentTool(remote_url, "payments", "Pays people.", timeout=30, **tool_options)
    script = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("payments", {"request": "Pay Ann 30 EUR."}, "d1")]),
        "The payments agent says it paid Ann.",
    ]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[payments],
        confirmation_strategies={"payments": payments.relay},
        snapshot_store=store,
    )
    return agent, payments


def tool_result(result: Any) -> str:
    [message] = [m for m in result["messages"] if m.tool_call_result is not None]
    return str(message.tool_call_result.result)


def test_the_remote_pause_pauses_the_caller_and_the_callers_approval_is_relayed(served: str, remote: Agent) -> None:
    agent, payments = caller(served)
    with pytest.raises(HITLBreakpointException) as raised:
        agent.run([ASK])
    paused = raised.value.snapshot
    assert paused.awaited_decisions() == ["d1"] and PAID == []
    [question] = asyncio.run(payments.remote_questions(paused, "d1"))
    assert (question["toolName"], question["arguments"]) == ("pay", {"to": "ann", "amount": 30})
    result = agent.run(snapshot=paused, decisions=[ToolExecutionDecision("payments", True, "d1")])
    assert PAID == ["ann:30"] and tool_result(result) == "Paid Ann 30 EUR."
    assert result["last_message"].text == "The payments agent says it paid Ann."
    assert model_calls(remote) == 2  # the remote's model was asked once before, once after the approval


def test_answers_given_on_resume_are_relayed_one_by_one(served: str) -> None:
    agent, _ = caller(served)
    with pytest.raises(HITLBreakpointException) as raised:
        agent.run([ASK])
    rejected = {"interruptId": "p1", "status": "resolved", "payload": {"approved": False, "feedback": "Not Ann."}}
    result = agent.run(snapshot=raised.value.snapshot, hook_context={RELAY_ANSWERS: {"d1": [rejected]}})
    assert PAID == [] and tool_result(result) == "Paid Ann 30 EUR."  # the remote's scripted model says so anyway
    assert result["last_message"].text == "The payments agent says it paid Ann."


def test_a_remote_that_needs_no_input_answers_at_once_also_under_run_async(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "r.db")
    remote = payments_agent(store, tmp_path, ["Ann was paid already."])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(create_app(remote, url=url), port=port):
        agent, _ = caller(url)
        result = asyncio.run(agent.run_async([ASK]))
    store.close()
    assert tool_result(result) == "Ann was paid already."


def test_a_call_that_runs_again_finds_its_remote_task_instead_of_sending_again(served: str, remote: Agent) -> None:
    _, payments = caller(served)
    key = idempotency_key("run-1", 1, "d1")
    first = asyncio.run(payments.start("Pay Ann 30 EUR.", key))
    again = asyncio.run(payments.start("Pay Ann 30 EUR.", key))  # as after a crash: the same call's key
    assert again.id == first.id and model_calls(remote) == 1
    assert payments.idempotent  # so a call in doubt after a crash runs again, and finds its task
    _, blind = caller(served, lookup=False)
    assert not blind.idempotent  # a remote it cannot look tasks up at: a call in doubt waits for a decision


def test_a_remote_task_that_fails_is_the_calls_error(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "r.db")
    remote = payments_agent(store, tmp_path, ["x"])
    remote.chat_generator = ScriptedChatGenerator([])  # no reply at all: the remote run fails
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(create_app(remote, url=url), port=port):
        agent, _ = caller(url)
        result = agent.run([ASK])
    store.close()
    [message] = [m for m in result["messages"] if m.tool_call_result is not None]
    assert message.tool_call_result.error and "ended TASK_STATE_FAILED" in str(message.tool_call_result.result)


def test_an_unreachable_remote_is_the_calls_error() -> None:
    agent, _ = caller(f"http://127.0.0.1:{free_port()}")
    result = agent.run([ASK])
    [message] = [m for m in result["messages"] if m.tool_call_result is not None]
    assert message.tool_call_result.error and "RemoteAgentError" in str(message.tool_call_result.result)


def test_the_tool_has_no_data_form() -> None:
    _, payments = caller("http://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="configured in code"):
        payments.to_dict()
    assert not isinstance(payments, BreakpointException)


def test_the_callers_ag_ui_front_end_answers_the_remotes_pause(served: str, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from agentfsm.ag_ui import create_app as ag_ui_app
    from tests.ag_ui.helpers import approve, post, user_input

    store = SQLiteSnapshotStore(tmp_path / "caller.db")
    agent, _ = caller(served, store)
    with TestClient(ag_ui_app(agent), base_url="http://127.0.0.1") as browser:
        _, events = post(browser, user_input("t1", "r1", "Have Ann paid 30 EUR, please."))
        [interrupt] = events[-1]["outcome"]["interrupts"]
        assert (interrupt["toolCallId"], interrupt["metadata"]["agentfsm"]["toolName"]) == ("d1", "payments")
        assert PAID == []
        _, events = post(browser, approve("t1", "r2", "d1"))
    store.close()
    assert PAID == ["ann:30"] and events[-1]["result"] == "The payments agent says it paid Ann."
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == "Paid Ann 30 EUR."
