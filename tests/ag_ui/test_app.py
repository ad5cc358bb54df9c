"""The AG-UI endpoint: a run on its thread, a pause as the interrupt outcome, resume[] as decisions, errors as RUN_ERROR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentfsm import Agent, ChatMessage, ToolCall
from agentfsm.ag_ui import ThreadRuns, create_app
from agentfsm.errors import ConfigurationError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy
from agentfsm.stores import SQLiteSnapshotStore
from tests.ag_ui.conftest import PAID, pay
from tests.ag_ui.helpers import approve, kinds, post, user_input


def client(agent: Agent, **options: Any) -> TestClient:
    return TestClient(create_app(agent, **options), base_url="http://127.0.0.1")


def finished(events: Any) -> dict[str, Any]:
    assert events[-1]["type"] == "RUN_FINISHED", kinds(events)
    return events[-1]  # type: ignore[no-any-return]


def test_a_pause_ends_the_run_with_an_interrupt_and_resume_decides_it(agent: Agent, store: SQLiteSnapshotStore) -> None:
    with client(agent) as browser:
        status, events = post(browser, user_input("t1", "r1", state={}))
        assert status == 200
        end = finished(events)
        assert end["threadId"] == "t1" and end["runId"] == "r1"
        [interrupt] = end["outcome"]["interrupts"]
        assert end["outcome"]["type"] == "interrupt"
        assert (interrupt["id"], interrupt["reason"], interrupt["toolCallId"]) == ("p1", "tool_call", "p1")
        schema = interrupt["responseSchema"]
        assert schema["required"] == ["approved"] and schema["properties"]["editedArgs"]["required"] == ["to", "amount"]
        # The state the resumed run needs goes out before the interrupt, as AG-UI 1.0 asks.
        assert kinds(events)[-3:] == ["MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
        assert [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"] == ["pay"]
        assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "I will pay Ann."
        assert PAID == []
        run_id = events[0]["metadata"]["agentfsm"]["runId"]

        status, events = post(browser, approve("t1", "r2", "p1"))
        end = finished(events)
        assert end["outcome"] == {"type": "success"} and end["result"] == "Done: paid 30 EUR to Ann."
        assert events[0]["metadata"]["agentfsm"] == {"runId": run_id, "resumed": True}  # the same run goes on
        [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert (result["toolCallId"], result["content"]) == ("p1", "paid 30 EUR to ann")
        assert "TOOL_CALL_START" not in kinds(events)  # announced by the interrupted run, not again
        [delta] = [e for e in events if e["type"] == "STATE_DELTA"]
        assert {"op": "add", "path": "/tool_call_counts", "value": {"pay": 1}} in delta["delta"]
        assert PAID == ["ann:30"]
    assert store.runs()[0].status == "done" and store.runs()[0].run_id == run_id


def test_steps_follow_the_phases_and_each_is_closed(agent: Agent) -> None:
    with client(agent) as browser:
        _, events = post(browser, user_input("t1", "r1"))
    steps = [(e["type"], e["stepName"]) for e in events if e["type"].startswith("STEP_")]
    assert steps[:2] == [("STEP_STARTED", "LLM_CALL"), ("STEP_FINISHED", "LLM_CALL")]
    assert [name for kind, name in steps if kind == "STEP_STARTED"] == [
        name for kind, name in steps if kind == "STEP_FINISHED"
    ]


def test_a_rejection_is_not_run_and_its_feedback_is_the_result(agent: Agent) -> None:
    with client(agent) as browser:
        post(browser, user_input("t1", "r1"))
        answer = {"approved": False, "feedback": "Ann was paid yesterday."}
        body = {
            "threadId": "t1",
            "runId": "r2",
            "messages": [],
            "resume": [{"interruptId": "p1", "status": "resolved", "payload": answer}],
        }
        _, events = post(browser, body)
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert "Ann was paid yesterday." in result["content"] and PAID == []
    assert finished(events)["outcome"]["type"] == "success"


def test_a_cancelled_interrupt_is_not_run(agent: Agent) -> None:
    with client(agent) as browser:
        post(browser, user_input("t1", "r1"))
        body = {
            "threadId": "t1",
            "runId": "r2",
            "messages": [],
            "resume": [{"interruptId": "p1", "status": "cancelled"}],
        }
        _, events = post(browser, body)
    assert finished(events)["outcome"]["type"] == "success" and PAID == []


def test_edited_arguments_run_instead_and_are_checked_first(agent: Agent) -> None:
    with client(agent) as browser:
        post(browser, user_input("t1", "r1"))
        _, events = post(browser, approve("t1", "r2", "p1", editedArgs={"to": "ann", "amount": "lots"}))
        assert kinds(events) == ["RUN_ERROR"] and "does not fit its schema" in events[0]["message"]
        assert PAID == []
        _, events = post(browser, approve("t1", "r3", "p1", editedArgs={"to": "ann", "amount": 10}))
    assert finished(events)["outcome"]["type"] == "success" and PAID == ["ann:10"]


@pytest.mark.parametrize(
    ("second", "says"),
    [
        (user_input("t1", "r2", "Pay Bob instead."), "waits for answers to its interrupts ['p1']"),
        (
            {"threadId": "t1", "runId": "r2", "messages": [], "resume": [{"interruptId": "p9", "status": "cancelled"}]},
            "no open interrupt 'p9'",
        ),
        (approve("t1", "r2", "p1", "p1"), "answered twice"),
        (approve("t1", "r2", "p1", approved="yes"), "does not fit its schema"),
    ],
    ids=["no answers", "unknown interrupt", "twice", "bad payload"],
)
def test_an_input_that_does_not_fit_the_waiting_thread_is_a_run_error_and_runs_nothing(
    agent: Agent, second: dict[str, Any], says: str
) -> None:
    with client(agent) as browser:
        post(browser, user_input("t1", "r1"))
        status, events = post(browser, second)
        assert status == 200 and kinds(events) == ["RUN_ERROR"], events
        assert says in events[0]["message"] and events[0]["message"].endswith("Nothing ran.")
        assert events[0]["code"] == "ProtocolRequestError" and PAID == []
        # The thread still waits, and the right answer still goes through.
        _, events = post(browser, approve("t1", "r3", "p1"))
    assert finished(events)["outcome"]["type"] == "success" and PAID == ["ann:30"]


def test_every_open_interrupt_is_answered_at_once(store: SQLiteSnapshotStore, tmp_path: Path) -> None:
    calls = [ToolCall("pay", {"to": "ann", "amount": 30}, "p1"), ToolCall("pay", {"to": "bob", "amount": 40}, "p2")]
    model = ScriptedChatGenerator([ChatMessage.from_assistant(tool_calls=calls), "Both paid."])
    strategies = {"pay": BreakpointConfirmationStrategy(str(tmp_path))}
    agent = Agent(chat_generator=model, tools=[pay], confirmation_strategies=strategies, snapshot_store=store)
    PAID.clear()
    with client(agent) as browser:
        _, events = post(browser, user_input("t1", "r1"))
        assert [i["id"] for i in finished(events)["outcome"]["interrupts"]] == ["p1", "p2"]
        _, events = post(browser, approve("t1", "r2", "p1"))
        assert kinds(events) == ["RUN_ERROR"] and "['p2'] are not answered" in events[0]["message"]
        _, events = post(browser, approve("t1", "r3", "p1", "p2"))
    assert finished(events)["outcome"]["type"] == "success" and PAID == ["ann:30", "bob:40"]


def test_an_answer_sent_again_runs_nothing_twice(agent: Agent) -> None:
    with client(agent) as browser:
        post(browser, user_input("t1", "r1"))
        post(browser, approve("t1", "r2", "p1"))
        _, events = post(browser, approve("t1", "r2", "p1"))
    assert kinds(events) == ["RUN_ERROR"] and "waits for no answers" in events[0]["message"]
    assert PAID == ["ann:30"]


def test_a_finished_thread_takes_the_next_turn_as_a_new_run(store: SQLiteSnapshotStore) -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["Hello!", "Fine, thanks."]), snapshot_store=store)
    with client(agent) as browser:
        _, first = post(browser, user_input("t1", "r1", "Hi"))
        history = finished(first)
        snapshot = next(e for e in first if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
        turn = {
            "threadId": "t1",
            "runId": "r2",
            "messages": [*snapshot, {"id": "u2", "role": "user", "content": "How are you?"}],
        }
        _, second = post(browser, turn)
    assert history["result"] == "Hello!" and finished(second)["result"] == "Fine, thanks."
    assert [m["role"] for m in next(e for e in second if e["type"] == "MESSAGES_SNAPSHOT")["messages"]] == [
        "user", "assistant", "user", "assistant"
    ]  # fmt: skip
    assert model_saw(agent)[-1] == ["user", "assistant", "user"]


def model_saw(agent: Agent) -> list[list[str]]:
    generator = agent.chat_generator
    assert isinstance(generator, ScriptedChatGenerator)
    return [[m.role.value for m in c["messages"]] for c in generator.calls]


def test_a_second_run_on_a_thread_that_has_one_going_on_is_refused(agent: Agent) -> None:
    threads = ThreadRuns()
    with client(agent, threads=threads) as browser, threads.running("t1"):
        _, events = post(browser, user_input("t1", "r1"))
    assert kinds(events) == ["RUN_ERROR"] and events[0]["code"] == "ThreadBusyError"
    assert model_saw(agent) == []


def test_declared_state_keys_of_the_input_start_the_run_and_come_back_as_a_patch(store: SQLiteSnapshotStore) -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["Noted."]), snapshot_store=store, state_schema={"cart": {"type": list}}
    )
    with client(agent) as browser:
        _, events = post(browser, user_input("t1", "r1", "Hi", state={"cart": ["book"], "step_count": 99, "x": 1}))
    [delta] = [e["delta"] for e in events if e["type"] == "STATE_DELTA"]
    assert {"op": "replace", "path": "/step_count", "value": 1} in delta and {"op": "remove", "path": "/x"} in delta
    assert not any(op["path"] == "/cart" for op in delta)  # the run started from the client's cart


def test_a_failed_run_ends_its_stream_with_run_error(store: SQLiteSnapshotStore) -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator([]), snapshot_store=store)
    with client(agent) as browser:
        status, events = post(browser, user_input("t1", "r1", "Hi"))
        assert status == 200 and kinds(events)[0] == "RUN_STARTED" and kinds(events)[-1] == "RUN_ERROR"
        assert events[-1]["code"] == "ScriptExhaustedError" and "ran out of replies" not in events[-1]["message"]
    with client(agent, expose_errors=True) as browser:
        _, events = post(browser, user_input("t2", "r1", "Hi"))
        assert "ran out of replies" in events[-1]["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        {"runId": "r1", "messages": []},
        {"threadId": "t1", "runId": "r1", "messages": [{"id": "m", "role": "wizard", "content": "hi"}]},
        {"threadId": "t1", "runId": "r1", "messages": [], "resume": [{"interruptId": "p1", "status": "maybe"}]},
        [1, 2, 3],
    ],
    ids=["not json", "no thread", "unknown role", "bad resume status", "not an object"],
)
def test_a_malformed_input_is_a_422_and_nothing_runs(agent: Agent, body: Any) -> None:
    with client(agent) as browser:
        status, answer = post(browser, body)
    assert status == 422 and isinstance(answer, dict) and answer["error"].endswith("nothing ran.")
    assert model_saw(agent) == []


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        (
            [{"id": "t", "role": "tool", "content": "42", "toolCallId": "c9"}],
            "which no assistant message before it made",
        ),
        (
            [
                {
                    "id": "u",
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "url", "value": "http://x/y.png"}}],
                }
            ],
            "reads text only",
        ),
        (
            [
                {
                    "id": "a",
                    "role": "assistant",
                    "toolCalls": [{"id": "c1", "type": "function", "function": {"name": "pay", "arguments": "[1]"}}],
                }
            ],
            "not a JSON object",
        ),
        ([{"id": "x", "role": "activity", "activityType": "note", "content": {}}], "no message the agent can read"),
    ],
    ids=["orphan tool result", "image", "arguments", "nothing to read"],
)
def test_messages_the_agent_cannot_read_are_a_run_error(agent: Agent, messages: list[Any], says: str) -> None:
    with client(agent) as browser:
        _, events = post(browser, {"threadId": "t1", "runId": "r1", "messages": messages})
    assert kinds(events) == ["RUN_ERROR"] and says in events[0]["message"] and model_saw(agent) == []


def test_an_endpoint_needs_a_snapshot_store() -> None:
    with pytest.raises(ConfigurationError, match="snapshot store"):
        create_app(Agent(chat_generator=ScriptedChatGenerator([])))


def test_an_answer_to_a_run_that_went_on_elsewhere_is_a_run_error(agent: Agent, store: SQLiteSnapshotStore) -> None:
    from agentfsm.hitl import ToolExecutionDecision

    with client(agent) as browser:
        _, events = post(browser, user_input("t1", "r1"))
        paused = store.latest(events[0]["metadata"]["agentfsm"]["runId"])
        agent.run(snapshot=paused, decisions=[ToolExecutionDecision("pay", True, "p1")])  # the review page, say
        _, events = post(browser, approve("t1", "r2", "p1"))
    # The thread's store says its run went on: the answer answers nothing.
    assert kinds(events) == ["RUN_ERROR"] and events[0]["code"] == "ProtocolRequestError"
    assert "waits for no answers" in events[0]["message"]
    assert PAID == ["ann:30"]


def test_a_restarted_endpoint_knows_its_threads_from_the_store(agent: Agent, tmp_path: Path) -> None:
    with client(agent) as browser:
        _, events = post(browser, user_input("t1", "r1"))
    assert finished(events)["outcome"]["type"] == "interrupt"

    def restarted(script: list[ChatMessage | str]) -> Agent:  # a new process: a new agent on the same file
        return Agent(
            chat_generator=ScriptedChatGenerator(script),
            tools=[pay],
            confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(tmp_path))},
            snapshot_store=SQLiteSnapshotStore(tmp_path / "runs.db"),
            state_schema={"cart": {"type": list}},
        )

    with client(restarted(["Done: paid 30 EUR to Ann."])) as browser:
        _, events = post(browser, approve("t1", "r2", "p1"))
    assert finished(events)["result"] == "Done: paid 30 EUR to Ann." and PAID == ["ann:30"]
    later = restarted(["You paid Ann 30 EUR."])
    # The client sends the whole conversation; the thread's next turn takes the messages it added.
    history = [
        {"id": "r1-u", "role": "user", "content": "Pay Ann 30 EUR."},
        {"id": "a1", "role": "assistant", "content": "Done: paid 30 EUR to Ann."},
        {"id": "r3-u", "role": "user", "content": "What did I pay?"},
    ]
    with client(later) as browser:
        _, events = post(browser, {"threadId": "t1", "runId": "r3", "messages": history})
    assert finished(events)["result"] == "You paid Ann 30 EUR."
    store = later.snapshot_store
    assert isinstance(store, SQLiteSnapshotStore)
    conversation = store.latest(store.thread("t1").head_run_id).messages  # type: ignore[union-attr]
    texts = [m["content"][0].get("text") for m in conversation if m["content"] and "text" in m["content"][0]]
    assert texts == [
        "Pay Ann 30 EUR.",
        "I will pay Ann.",
        "Done: paid 30 EUR to Ann.",
        "What did I pay?",
        "You paid Ann 30 EUR.",
    ]
    assert store.thread("t1").turns == 2  # type: ignore[union-attr]
