"""OpenAIChatGenerator against a real HTTP server on 127.0.0.1 that replays scripted answers and faults."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, StreamingChunk, ToolCall
from agentfsm.errors import (
    AuthenticationError,
    BadRequestError,
    ModelConnectionError,
    ModelResponseError,
    ModelTimeoutError,
    RateLimitError,
    SerializationError,
    ServerError,
)
from agentfsm.generators import OpenAIChatGenerator
from agentfsm.messages import RAW_ARGUMENTS_KEY
from agentfsm.secrets import Secret
from tests.generators.conftest import ScriptedServer
from tests.helpers import SIDE_EFFECTS, add

KEY = "sk-test-do-not-show-0123456789"


def completion(message: dict[str, Any], finish: str = "stop", usage: dict[str, int] | None = None) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": usage or {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
    ).encode()


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def generator(server: ScriptedServer, **kwargs: Any) -> OpenAIChatGenerator:
    options: dict[str, Any] = {"max_retries": 2, "backoff_base": 0.001, "timeout": 5.0, **kwargs}
    return OpenAIChatGenerator("test-model", Secret.from_token(KEY), server.url, **options)


def events(*payloads: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads) + b"data: [DONE]\n\n"


def delta(
    content: str | None = None, calls: list[dict[str, Any]] | None = None, finish: str | None = None
) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if content is not None:
        d["content"] = content
    if calls is not None:
        d["tool_calls"] = calls
    return {"model": "test-model", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


# -- requests and replies ----------------------------------------------------------------------------


def test_a_reply_with_the_request_as_the_api_describes_it(server: ScriptedServer) -> None:
    server.reply(body=completion({"content": "Hello."}))
    model = generator(server, generation_kwargs={"temperature": 0})
    [reply] = model.run([ChatMessage.from_system("Be brief."), ChatMessage.from_user("Hi")], tools=[add])["replies"]
    assert reply.text == "Hello."
    assert reply.meta == {
        "model": "test-model",
        "index": 0,
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    sent = request["json"]
    assert sent["model"] == "test-model" and sent["temperature"] == 0
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert sent["tools"][0] == {
        "type": "function",
        "function": {"name": "add", "description": "Add two integers.", "parameters": add.parameters},
    }
    model.close()


def test_an_agent_runs_parallel_tool_calls_and_corrects_bad_arguments(server: ScriptedServer) -> None:
    SIDE_EFFECTS.clear()
    server.reply(
        body=completion(
            {
                "content": None,
                "tool_calls": [tool_call("c1", "add", '{"a": 1, "b": 2}'), tool_call("c2", "add", "{oops")],
            },
            finish="tool_calls",
        )
    )
    server.reply(body=completion({"content": "1 + 2 = 3."}))
    with Agent(chat_generator=generator(server), tools=[add]) as agent:
        result = agent.run([ChatMessage.from_user("Add 1 and 2.")])
    assert SIDE_EFFECTS == ["add(1,2)"] and result["last_message"].text == "1 + 2 = 3."
    assert result["messages"][1].tool_calls[1].arguments == {RAW_ARGUMENTS_KEY: "{oops"}
    bad = result["messages"][3].tool_call_result
    assert bad is not None and bad.error and "not a valid JSON object" in str(bad.result)
    second = server.requests[1]["json"]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool"]
    assert second[2] == {"role": "tool", "content": "3", "tool_call_id": "c1"}
    assert result["token_usage"] == {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}


# -- streaming --------------------------------------------------------------------------------------


def streamed_answer() -> bytes:
    return events(
        delta("The sum"),
        delta(" is"),
        delta(calls=[{"index": 0, "id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": '}}]),
        delta(calls=[{"index": 0, "function": {"arguments": "1, "}}]),
        delta(
            calls=[{"index": 1, "id": "c2", "type": "function", "function": {"name": "add", "arguments": '{"a": 3,'}}]
        ),
        delta(
            calls=[
                {"index": 0, "function": {"arguments": '"b": 2}'}},
                {"index": 1, "function": {"arguments": ' "b": 4}'}},
            ]
        ),
        delta(finish="tool_calls"),
        {
            "model": "test-model",
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        },
    )


def awkward_pieces(body: bytes) -> list[bytes]:
    """The stream cut at odd places: inside events, inside JSON, several events at once."""
    cuts = [3, 17, 18, 60, 61, 200, 201, 333, len(body)]
    pieces, start = [], 0
    for cut in sorted({c for c in cuts if c <= len(body)}):
        pieces.append(body[start:cut])
        start = cut
    return [p for p in pieces if p]


def test_a_streamed_reply_arrives_chunk_by_chunk_and_equals_the_whole_one(server: ScriptedServer) -> None:
    server.reply(headers={"Content-Type": "text/event-stream"}, pieces=awkward_pieces(streamed_answer()), gap=0.01)
    chunks: list[StreamingChunk] = []
    [streamed] = generator(server).run([ChatMessage.from_user("sums")], streaming_callback=chunks.append)["replies"]
    assert server.requests[0]["json"]["stream"] is True
    assert "".join(c.content for c in chunks) == "The sum is"
    assert sum(1 for c in chunks if "tool_call_delta" in c.meta) == 5
    assert chunks[-1].finish_reason == "tool_calls"
    server.reply(
        body=completion(
            {
                "content": "The sum is",
                "tool_calls": [tool_call("c1", "add", '{"a": 1, "b": 2}'), tool_call("c2", "add", '{"a": 3, "b": 4}')],
            },
            finish="tool_calls",
        )
    )
    [whole] = generator(server).run([ChatMessage.from_user("sums")])["replies"]
    assert streamed == whole
    assert streamed.tool_calls == [ToolCall("add", {"a": 1, "b": 2}, "c1"), ToolCall("add", {"a": 3, "b": 4}, "c2")]


def test_chunks_reach_the_callback_while_the_server_is_still_sending(server: ScriptedServer) -> None:
    first, rest = events(delta("early")), events(delta(" late"), delta(finish="stop"))
    seen_early = threading.Event()
    answer: dict[str, Any] = {"pieces": [first[: -len(b"data: [DONE]\n\n")], rest], "hold": seen_early}
    server.answers.append(answer)

    def callback(chunk: StreamingChunk) -> None:
        if chunk.content == "early":
            seen_early.set()

    [reply] = generator(server).run([ChatMessage.from_user("x")], streaming_callback=callback)["replies"]
    assert answer["held"], "the server sent the rest only after the callback had the first chunk"
    assert reply.text == "early late"


def test_async_streaming_with_an_async_callback(server: ScriptedServer) -> None:
    server.reply(headers={"Content-Type": "text/event-stream"}, pieces=awkward_pieces(streamed_answer()))
    seen: list[str] = []

    async def callback(chunk: StreamingChunk) -> None:
        await asyncio.sleep(0)
        seen.append(chunk.content)

    async def main() -> ChatMessage:
        model = generator(server)
        try:
            return (await model.run_async([ChatMessage.from_user("sums")], streaming_callback=callback))["replies"][0]
        finally:
            await model.close_async()

    reply = asyncio.run(main())
    assert "".join(seen) == "The sum is" and len(reply.tool_calls) == 2


def test_reasoning_is_streamed_and_kept_apart_from_the_answer(server: ScriptedServer) -> None:
    thinking = {"model": "m", "choices": [{"index": 0, "delta": {"reasoning_content": "Two and two..."}}]}
    server.reply(pieces=[events(thinking, delta("Four."), delta(finish="stop"))])
    chunks: list[StreamingChunk] = []
    [reply] = generator(server).run([ChatMessage.from_user("2 + 2?")], streaming_callback=chunks.append)["replies"]
    assert [c.reasoning.reasoning_text for c in chunks if c.reasoning] == ["Two and two..."]
    assert reply.text == "Four." and reply.reasoning is not None and reply.reasoning.reasoning_text == "Two and two..."


def test_streamed_replies_share_one_connection(server: ScriptedServer) -> None:
    """The stream is read to its end after ``[DONE]``, so the connection goes back to the pool."""
    for _ in range(4):
        server.reply(pieces=[events(delta("ok"), delta(finish="stop"))], keep_alive=True)
    model = generator(server)
    for _ in range(2):
        model.run([ChatMessage.from_user("x")], streaming_callback=lambda c: None)

    async def main() -> None:
        for _ in range(2):
            await model.run_async([ChatMessage.from_user("x")], streaming_callback=lambda c: None)
        await model.close_async()

    asyncio.run(main())
    clients = [r["client"] for r in server.requests]
    assert clients[0] == clients[1] and clients[2] == clients[3], clients


def test_cancelling_an_async_run_closes_the_stream(server: ScriptedServer) -> None:
    pieces = [events(delta(f"word {i} "))[: -len(b"data: [DONE]\n\n")] for i in range(40)]
    cancelled = threading.Event()  # the server sends the rest only once the run was cancelled
    server.reply(pieces=pieces, gap=0.05, hold=cancelled)
    first = asyncio.Event()

    async def callback(chunk: StreamingChunk) -> None:
        first.set()

    async def main() -> bool:
        model = generator(server)
        task = asyncio.create_task(
            Agent(chat_generator=model).run_async([ChatMessage.from_user("talk")], streaming_callback=callback)
        )
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled.set()
        # The client is still open: only the cancelled stream's own exit can have closed the connection.
        closed = await asyncio.to_thread(server.hung_up.wait, 60)
        await model.close_async()
        return closed

    assert asyncio.run(main()), "the server saw the connection close mid-stream, while the client was open"


def test_a_garbled_event_is_an_error_not_a_silent_loss(server: ScriptedServer) -> None:
    server.reply(pieces=[b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: {not json\n\n'])
    with pytest.raises(ModelResponseError, match="an event that is not JSON"):
        generator(server).run([ChatMessage.from_user("x")], streaming_callback=lambda c: None)


# -- faults ------------------------------------------------------------------------------------------


def test_429_is_retried_after_the_servers_retry_after(server: ScriptedServer) -> None:
    server.reply(status=429, headers={"Retry-After": "0.2"}, body=b'{"error": {"message": "slow down"}}')
    server.reply(body=completion({"content": "ok"}))
    started = time.perf_counter()
    assert generator(server).run([ChatMessage.from_user("x")])["replies"][0].text == "ok"
    assert time.perf_counter() - started >= 0.2 and len(server.requests) == 2


def test_server_errors_are_retried_then_raised_with_the_status_and_the_body(server: ScriptedServer) -> None:
    for _ in range(3):
        server.reply(status=500, body=b'{"error": {"message": "the model fell over"}}')
    with pytest.raises(ServerError, match="answered 500: the model fell over") as raised:
        generator(server, max_retries=2).run([ChatMessage.from_user("x")])
    assert raised.value.status_code == 500 and "fell over" in raised.value.body and len(server.requests) == 3


@pytest.mark.parametrize(
    ("status", "error"), [(401, AuthenticationError), (400, BadRequestError), (404, BadRequestError)]
)
def test_client_errors_are_not_retried(server: ScriptedServer, status: int, error: type[Exception]) -> None:
    server.reply(status=status, body=b'{"error": {"message": "no"}}')
    with pytest.raises(error, match=f"answered {status}: no") as raised:
        generator(server).run([ChatMessage.from_user("x")])
    assert len(server.requests) == 1 and KEY not in str(raised.value)


def test_rate_limits_that_last_raise_rate_limit_error(server: ScriptedServer) -> None:
    for _ in range(2):
        server.reply(status=429, headers={"Retry-After": "0"}, body=b"busy")
    with pytest.raises(RateLimitError):
        generator(server, max_retries=1).run([ChatMessage.from_user("x")])


def test_a_dropped_connection_is_retried(server: ScriptedServer) -> None:
    server.reply(drop=True)
    server.reply(body=completion({"content": "back"}))
    assert generator(server).run([ChatMessage.from_user("x")])["replies"][0].text == "back"


def test_a_slow_server_times_out(server: ScriptedServer) -> None:
    server.reply(delay=1.0, body=completion({"content": "late"}))
    with pytest.raises(ModelTimeoutError):
        generator(server, timeout=0.2, max_retries=0).run([ChatMessage.from_user("x")])


def test_a_server_that_is_not_there() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatGenerator(
        "m", Secret.from_token(KEY), f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_base=0.001
    )
    with pytest.raises(ModelConnectionError, match="Could not talk to the model server"):
        model.run([ChatMessage.from_user("x")])


def test_an_agent_runs_async_against_the_server(server: ScriptedServer) -> None:
    SIDE_EFFECTS.clear()
    server.reply(
        body=completion(
            {"content": None, "tool_calls": [tool_call("c1", "add", '{"a": 2, "b": 2}')]}, finish="tool_calls"
        )
    )
    server.reply(body=completion({"content": "4"}))

    async def main() -> dict[str, Any]:
        async with Agent(chat_generator=generator(server), tools=[add]) as agent:
            return await agent.run_async([ChatMessage.from_user("2 + 2?")])

    assert asyncio.run(main())["last_message"].text == "4" and SIDE_EFFECTS == ["add(2,2)"]


# -- secrets -----------------------------------------------------------------------------------------


def test_the_key_never_shows(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", KEY)
    monkeypatch.setenv("AGENTFSM_ALLOWED_ENV_VARS", "TEST_OPENAI_KEY")
    model = OpenAIChatGenerator("m", Secret.from_env_var("TEST_OPENAI_KEY"), server.url)
    data = model.to_dict()
    assert KEY not in json.dumps(data) and data["data"]["api_key"]["env_vars"] == ["TEST_OPENAI_KEY"]
    assert OpenAIChatGenerator.from_dict(data).api_key.resolve_value() == KEY
    assert KEY not in repr(Secret.from_token(KEY)) and KEY not in repr(model.api_key)
    with pytest.raises(SerializationError, match="from_token cannot be serialized"):
        Secret.from_token(KEY).to_dict()
    agent = Agent(chat_generator=model, tools=[add])
    assert KEY not in json.dumps(agent.to_dict())


def test_the_demo_runs_on_a_model_server_when_asked(server: ScriptedServer) -> None:
    server.reply(
        body=completion(
            {"content": None, "tool_calls": [tool_call("w1", "get_weather", '{"city": "Lisbon"}')]}, finish="tool_calls"
        )
    )
    server.reply(body=completion({"content": "Lisbon: 26.5 °C."}))
    done = subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", "demo", "-q", "--model", "openai:test-model", "--base-url", server.url],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2], check=False,
        env={**os.environ, "OPENAI_API_KEY": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tool result get_weather -> " in done.stdout and "assistant: Lisbon: 26.5 °C." in done.stdout
    assert server.requests[0]["json"]["model"] == "test-model" and "Authorization" not in server.requests[0]["headers"]
    bad = subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", "demo", "--model", "gemini:x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1 and "--model takes openai:MODEL or anthropic:MODEL" in bad.stderr
