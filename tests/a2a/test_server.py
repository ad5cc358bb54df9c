"""The A2A server, driven by a2a-sdk's own client: the card, SendMessage and streaming, task states from the run."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, create_client
from a2a.helpers import get_text_parts, new_data_part, new_text_part
from a2a.types import CancelTaskRequest, ListTasksRequest, Message, Part, Role, SendMessageRequest, Task, TaskState
from google.protobuf import json_format

from agentfsm import Agent
from agentfsm.a2a import ThreadRuns, create_app
from agentfsm.a2a.parts import questions_in
from agentfsm.errors import ConfigurationError
from agentfsm.generators import ScriptedChatGenerator
from tests.a2a.conftest import PAID, model_calls
from tests.servers import free_port, serving


@asynccontextmanager
async def a2a_client(url: str, *, streaming: bool = False, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        yield await create_client(card, client_config=ClientConfig(streaming=streaming, httpx_client=http))


def message(*parts: Part, task_id: str = "", context_id: str = "") -> SendMessageRequest:
    sent = Message(
        role=Role.ROLE_USER, parts=list(parts), message_id=uuid.uuid4().hex, task_id=task_id, context_id=context_id
    )
    return SendMessageRequest(message=sent)


async def send(client: Client, request: SendMessageRequest) -> tuple[Task, list[Any]]:
    """The task the exchange ends with, and every response the client yielded."""
    responses = [r async for r in client.send_message(request)]
    task_ids = [r.task.id for r in responses if r.HasField("task")]
    task_ids += [r.status_update.task_id for r in responses if r.HasField("status_update")]
    from a2a.types import GetTaskRequest

    return await client.get_task(GetTaskRequest(id=task_ids[-1])), responses


def status_text(task: Task) -> str:
    return "\n".join(get_text_parts(list(task.status.message.parts)))


def metadata(task: Task) -> dict[str, Any]:
    return json_format.MessageToDict(task.metadata).get("agentfsm", {})  # type: ignore[no-any-return]


def answer(*entries: dict[str, Any]) -> Part:
    return new_data_part({"resume": list(entries)})


APPROVE = {"interruptId": "p1", "status": "resolved", "payload": {"approved": True}}


def test_the_card_describes_the_agent_from_its_tools(served: str) -> None:
    card = httpx.get(served + "/.well-known/agent-card.json", timeout=10).json()
    assert card["name"] == "payments" and card["description"] == "You pay people."
    assert [s["id"] for s in card["skills"]] == ["pay"] and card["capabilities"]["streaming"] is True
    assert (
        card["supportedInterfaces"][0]["url"] == served
        and card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"
    )


def test_a_pause_is_input_required_and_an_answer_on_the_task_completes_it(served: str, remote: Agent) -> None:
    async def exchange() -> tuple[Task, Task]:
        async with a2a_client(served) as client:
            waiting, _ = await send(client, message(new_text_part("Pay Ann 30 EUR.")))
            done, _ = await send(client, message(answer(APPROVE), task_id=waiting.id, context_id=waiting.context_id))
            return waiting, done

    waiting, done = asyncio.run(exchange())
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    [question] = questions_in(waiting.status.message)
    assert (question["id"], question["reason"], question["toolName"]) == ("p1", "tool_call", "pay")
    assert question["responseSchema"]["required"] == ["approved"]
    assert "Approve pay(" in status_text(waiting) and metadata(waiting)["runId"]
    assert done.id == waiting.id and done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(done) == "Paid Ann 30 EUR." and PAID == ["ann:30"]
    assert metadata(done)["runId"] == metadata(waiting)["runId"]  # the same run went on
    assert [a.name for a in done.artifacts][-1] == "answer"


def test_streaming_sends_the_tasks_states_and_the_replies_as_they_come(served: str) -> None:
    async def exchange() -> tuple[list[Any], list[Any]]:
        async with a2a_client(served, streaming=True) as client:
            first = [r async for r in client.send_message(message(new_text_part("Pay Ann 30 EUR.")))]
            task_id = next(r.task.id for r in first if r.HasField("task"))
            context_id = next(r.task.context_id for r in first if r.HasField("task"))
            second = [
                r async for r in client.send_message(message(answer(APPROVE), task_id=task_id, context_id=context_id))
            ]
            return first, second

    first, second = asyncio.run(exchange())
    states = [TaskState.Name(r.status_update.status.state) for r in first if r.HasField("status_update")]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_INPUT_REQUIRED"
    streamed = "".join(p.text for r in first if r.HasField("artifact_update") for p in r.artifact_update.artifact.parts)
    assert streamed == "Paying Ann."
    states = [TaskState.Name(r.status_update.status.state) for r in second if r.HasField("status_update")]
    assert states[-1] == "TASK_STATE_COMPLETED" and "TASK_STATE_WORKING" in states


def test_a_person_at_a_plain_client_answers_in_words(served: str) -> None:
    async def exchange() -> tuple[Task, Task, Task]:
        async with a2a_client(served) as client:
            waiting, _ = await send(client, message(new_text_part("Pay Ann 30 EUR.")))
            again, _ = await send(
                client, message(new_text_part("hmm"), task_id=waiting.id, context_id=waiting.context_id)
            )
            done, _ = await send(
                client, message(new_text_part("reject: not today"), task_id=waiting.id, context_id=waiting.context_id)
            )
            return waiting, again, done

    _, again, done = asyncio.run(exchange())
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and "Nothing ran." in status_text(again)
    assert questions_in(again.status.message)  # it still asks
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and PAID == []


def test_an_answer_that_does_not_fit_leaves_the_task_waiting(served: str) -> None:
    async def exchange() -> tuple[Task, Task]:
        async with a2a_client(served) as client:
            waiting, _ = await send(client, message(new_text_part("Pay Ann 30 EUR.")))
            bad = {"interruptId": "p1", "status": "resolved", "payload": {"approved": "yes"}}
            again, _ = await send(client, message(answer(bad), task_id=waiting.id, context_id=waiting.context_id))
            return waiting, again

    _, again = asyncio.run(exchange())
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and "does not fit its schema" in status_text(again)
    assert PAID == []


def test_a_waiting_task_can_be_cancelled_and_a_failed_run_is_a_failed_task(served: str, remote: Agent) -> None:
    async def exchange() -> tuple[Task, Task]:
        async with a2a_client(served) as client:
            waiting, _ = await send(client, message(new_text_part("Pay Ann 30 EUR.")))
            cancelled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
            # The scripted model has one reply left: this run pauses; the one after fails (no reply at all).
            await send(client, message(new_text_part("Once more.")))
            failed, _ = await send(client, message(new_text_part("And again.")))
            return cancelled, failed

    cancelled, failed = asyncio.run(exchange())
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED and PAID == []
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert status_text(failed) == "The run failed (ScriptExhaustedError)."


def test_a_contexts_tasks_are_listed_by_its_id(served: str) -> None:
    async def exchange() -> list[Task]:
        async with a2a_client(served) as client:
            await send(client, message(new_text_part("Pay Ann 30 EUR."), context_id="ctx-1"))
            listed = await client.list_tasks(ListTasksRequest(context_id="ctx-1"))
            return list(listed.tasks)

    [task] = asyncio.run(exchange())
    assert task.context_id == "ctx-1" and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED


def test_a_second_task_while_a_run_goes_on_in_the_context_is_rejected(remote: Agent) -> None:
    threads = ThreadRuns()
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    async def exchange() -> Task:
        async with a2a_client(url) as client:
            task, _ = await send(client, message(new_text_part("Pay Ann."), context_id="busy"))
            return task

    with serving(create_app(remote, url=url, threads=threads), port=port), threads.running("busy"):
        task = asyncio.run(exchange())
    assert task.status.state == TaskState.TASK_STATE_REJECTED and "one thread, one timeline" in status_text(task)
    assert model_calls(remote) == 0


def rpc(url: str, body: Any, **headers: str) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", "A2A-Version": "1.0", **headers}
    return httpx.post(url + "/", content=raw, headers=sent, timeout=10)


def send_rpc(parts: list[dict[str, Any]], role: str = "ROLE_USER") -> dict[str, Any]:
    sent = {"role": role, "parts": parts, "messageId": "m1"}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": sent}}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        ({"jsonrpc": "2.0", "id": 1}, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}, -32601),
        ({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": "x"}}}, -32602),
        (send_rpc([]), -32602),
        (send_rpc([{"url": "http://127.0.0.1/x.pdf"}]), -32602),
        (send_rpc([{"text": "hi"}], role="ROLE_AGENT"), -32602),
    ],
    ids=["not json", "no method", "unknown method", "bad params", "no parts", "file part", "not the user"],
)
def test_a_malformed_request_is_a_json_rpc_error_and_nothing_runs(
    served: str, remote: Agent, body: Any, code: int
) -> None:
    answered = rpc(served, body)
    assert answered.json()["error"]["code"] == code, answered.text
    assert model_calls(remote) == 0


def test_the_server_is_loopback_token_guarded_and_bounded(remote: Agent) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    good = send_rpc([{"text": "Pay Ann."}])
    with serving(create_app(remote, url=url, token="s3cret", max_body_bytes=4096), port=port):
        card = httpx.get(url + "/.well-known/agent-card.json", timeout=10).json()  # the card is open
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
        assert rpc(url, good).status_code == 401
        assert rpc(url, good, Authorization="Bearer wrong").status_code == 401
        assert rpc(url, good, Authorization="Bearer s3cret", Host="evil.example").status_code == 400
        big = send_rpc([{"text": "x" * 5000}])
        assert rpc(url, big, Authorization="Bearer s3cret").status_code == 413
        assert rpc(url, good, Authorization="Bearer s3cret", Origin="http://evil.example").status_code == 403
        assert model_calls(remote) == 0
        answered = rpc(url, good, Authorization="Bearer s3cret")
        assert answered.json()["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_a_server_needs_a_snapshot_store() -> None:
    with pytest.raises(ConfigurationError, match="snapshot store"):
        create_app(Agent(chat_generator=ScriptedChatGenerator([])))


def test_an_answer_to_a_run_that_went_on_elsewhere_runs_nothing_twice(served: str, remote: Agent) -> None:
    from agentfsm.hitl import ToolExecutionDecision

    async def first() -> Task:
        async with a2a_client(served) as client:
            waiting, _ = await send(client, message(new_text_part("Pay Ann 30 EUR.")))
            return waiting

    waiting = asyncio.run(first())
    store = remote.snapshot_store
    assert store is not None
    paused = store.latest(metadata(waiting)["runId"])
    remote.run(snapshot=paused, decisions=[ToolExecutionDecision("pay", True, "p1")])  # the review page, say
    assert PAID == ["ann:30"]

    async def answer_late() -> Task:
        async with a2a_client(served) as client:
            late, _ = await send(client, message(answer(APPROVE), task_id=waiting.id, context_id=waiting.context_id))
            return late

    late = asyncio.run(answer_late())
    assert late.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # refused: the store's claim held
    assert "is done; nothing ran" in status_text(late) and PAID == ["ann:30"]


def test_a_context_is_a_thread_in_the_store_that_a_restarted_server_goes_on_with(
    remote: Agent, store: Any, tmp_path: Any
) -> None:
    from agentfsm.stores import SQLiteSnapshotStore
    from tests.a2a.conftest import payments_agent

    async def task(url: str, text: str, context_id: str = "", then: dict[str, Any] | None = None) -> Task:
        async with a2a_client(url) as client:
            done, _ = await send(client, message(new_text_part(text), context_id=context_id))
            if then is not None:
                done, _ = await send(client, message(answer(then), task_id=done.id, context_id=done.context_id))
            return done

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(create_app(remote, name="payments", url=url), port=port):
        first = asyncio.run(task(url, "Pay Ann 30 EUR.", then=APPROVE))
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    again = payments_agent(SQLiteSnapshotStore(tmp_path / "remote.db"), tmp_path, ["You paid Ann 30 EUR."])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(create_app(again, name="payments", url=url), port=port):
        second = asyncio.run(task(url, "What did I pay?", context_id=first.context_id))
    assert second.status.state == TaskState.TASK_STATE_COMPLETED and status_text(second) == "You paid Ann 30 EUR."
    [seen] = again.chat_generator.calls  # type: ignore[attr-defined]
    texts = [m.text for m in seen["messages"]]
    assert texts[:2] == ["You pay people.", "Pay Ann 30 EUR."] and texts[-2:] == ["Paid Ann 30 EUR.", "What did I pay?"]
    turns = store.thread_turns(first.context_id)
    assert len(turns) == 2 and turns[1].run_id == metadata(second)["runId"]
