"""AnthropicChatGenerator against a real HTTP server on 127.0.0.1 that replays scripted Messages API answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, StreamingChunk, ToolCall
from agentfsm.errors import AuthenticationError, ServerError
from agentfsm.generators import AnthropicChatGenerator
from agentfsm.secrets import Secret
from tests.generators.conftest import ScriptedServer
from tests.helpers import SIDE_EFFECTS, add, call, calls

KEY = "sk-ant-test-never-shown"


def generator(server: ScriptedServer, **kwargs: Any) -> AnthropicChatGenerator:
    options: dict[str, Any] = {"max_retries": 2, "backoff_base": 0.001, "timeout": 5.0, **kwargs}
    return AnthropicChatGenerator("claude-test", Secret.from_token(KEY), server.url, **options)


def message(*blocks: dict[str, Any], stop: str = "end_turn") -> bytes:
    return json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": list(blocks),
            "stop_reason": stop,
            "usage": {"input_tokens": 7, "output_tokens": 4},
        }
    ).encode()


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def test_the_request_maps_system_turns_tools_and_results(server: ScriptedServer) -> None:
    server.reply(body=message({"type": "text", "text": "Done."}))
    conversation = [
        ChatMessage.from_system("Be brief."),
        ChatMessage.from_user("Add 1 and 2, and 3 and 4."),
        calls(call("add", "t1", a=1, b=2), call("add", "t2", a=3, b=4), text="Adding."),
        ChatMessage.from_tool("3", call("add", "t1", a=1, b=2)),
        ChatMessage.from_tool("oops", call("add", "t2", a=3, b=4), error=True),
    ]
    [reply] = generator(server, generation_kwargs={"max_tokens": 50}).run(conversation, tools=[add])["replies"]
    assert reply.text == "Done." and reply.meta["usage"] == {"input_tokens": 7, "output_tokens": 4}
    [request] = server.requests
    assert request["path"] == "/v1/messages"
    assert request["headers"]["x-api-key"] == KEY and request["headers"]["anthropic-version"] == "2023-06-01"
    sent = request["json"]
    assert sent["system"] == "Be brief." and sent["max_tokens"] == 50
    assert sent["tools"] == [{"name": "add", "description": "Add two integers.", "input_schema": add.parameters}]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Add 1 and 2, and 3 and 4."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Adding."},
                {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}},
                {"type": "tool_use", "id": "t2", "name": "add", "input": {"a": 3, "b": 4}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "3", "is_error": False},
                {"type": "tool_result", "tool_use_id": "t2", "content": "oops", "is_error": True},
            ],
        },
    ]


def streamed() -> bytes:
    return sse(
        {
            "type": "message_start",
            "message": {"model": "claude-test", "usage": {"input_tokens": 7, "output_tokens": 1}},
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "add."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t1", "name": "add", "input": {}},
        },
        {"type": "ping"},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a": 1,'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ' "b": 2}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    )


def test_a_streamed_reply_equals_the_whole_one(server: ScriptedServer) -> None:
    body = streamed()
    server.reply(
        headers={"Content-Type": "text/event-stream"}, pieces=[body[:50], body[50:51], body[51:400], body[400:]]
    )
    chunks: list[StreamingChunk] = []
    [reply] = generator(server).run([ChatMessage.from_user("1 + 2")], streaming_callback=chunks.append)["replies"]
    assert "".join(c.content for c in chunks) == "Let me add."
    assert [c.meta["tool_call_delta"]["partial_json"] for c in chunks if "tool_call_delta" in c.meta] == [
        '{"a": 1,',
        ' "b": 2}',
    ]
    assert chunks[-1].finish_reason == "tool_use"
    server.reply(
        body=message(
            {"type": "text", "text": "Let me add."},
            {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}},
            stop="tool_use",
        )
    )
    [whole] = generator(server).run([ChatMessage.from_user("1 + 2")])["replies"]
    assert reply == whole and reply.tool_calls == [ToolCall("add", {"a": 1, "b": 2}, "t1")]


def test_a_stream_with_values_of_the_wrong_types_keeps_only_what_fits(server: ScriptedServer) -> None:
    """As without streaming: a stop reason that is not a string, an index that is not an int are dropped."""
    server.reply(
        pieces=[
            sse(
                {"type": "message_start", "message": {"model": ["m"], "usage": "lots"}},
                {"type": "content_block_start", "index": "0", "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": [0], "delta": {"type": "text_delta", "text": "Hi"}},
                {"type": "message_delta", "delta": {"stop_reason": {"why": "done"}}, "usage": ["x"]},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
                {"type": "message_stop"},
            )
        ]
    )
    chunks: list[StreamingChunk] = []
    [reply] = generator(server).run([ChatMessage.from_user("hi")], streaming_callback=chunks.append)["replies"]
    assert reply.text == "Hi" and reply.meta["finish_reason"] == "end_turn" and reply.meta["model"] is None
    assert [c.index for c in chunks if c.content] == [0] and chunks[-1].finish_reason == "end_turn"
    assert json.dumps(reply.to_dict())


def test_headers_of_the_users_own_go_along_with_the_key(server: ScriptedServer) -> None:
    server.reply(body=message({"type": "text", "text": "ok"}))
    model = generator(server, http_client_kwargs={"headers": {"x-trace": "1", "x-api-key": "not this one"}})
    assert model.run([ChatMessage.from_user("hi")])["replies"][0].text == "ok"
    sent = {name.lower(): value for name, value in server.requests[0]["headers"].items()}
    assert sent["x-trace"] == "1" and sent["x-api-key"] == KEY and sent["anthropic-version"]


def test_streamed_replies_share_one_connection(server: ScriptedServer) -> None:
    """The stream is read to its end after ``message_stop``, so the connection goes back to the pool."""
    server.reply(pieces=[streamed()], keep_alive=True)
    server.reply(pieces=[streamed()], keep_alive=True)
    model = generator(server)
    for _ in range(2):
        model.run([ChatMessage.from_user("1 + 2")], streaming_callback=lambda c: None)
    model.close()
    assert server.requests[0]["client"] == server.requests[1]["client"]


def test_errors_are_typed_and_overloads_are_retried(server: ScriptedServer) -> None:
    overloaded = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    server.reply(status=529, body=overloaded)
    server.reply(body=message({"type": "text", "text": "ok"}))
    assert generator(server).run([ChatMessage.from_user("x")])["replies"][0].text == "ok"
    for _ in range(2):
        server.reply(status=529, body=overloaded)
    with pytest.raises(ServerError, match="answered 529: Overloaded"):
        generator(server, max_retries=1).run([ChatMessage.from_user("x")])
    server.reply(
        status=401, body=b'{"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}'
    )
    with pytest.raises(AuthenticationError, match="invalid x-api-key") as raised:
        generator(server).run([ChatMessage.from_user("x")])
    assert KEY not in str(raised.value) and KEY not in raised.value.body


def test_an_agent_runs_tools_against_the_server_sync_and_async(server: ScriptedServer) -> None:
    for _ in range(2):
        server.reply(
            body=message({"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 2, "b": 3}}, stop="tool_use")
        )
        server.reply(body=message({"type": "text", "text": "5"}))
    SIDE_EFFECTS.clear()
    with Agent(chat_generator=generator(server), tools=[add]) as agent:
        assert agent.run([ChatMessage.from_user("2 + 3?")])["last_message"].text == "5"

    async def main() -> str | None:
        async with Agent(chat_generator=generator(server), tools=[add]) as agent:
            return (await agent.run_async([ChatMessage.from_user("2 + 3?")]))["last_message"].text

    assert asyncio.run(main()) == "5" and SIDE_EFFECTS == ["add(2,3)", "add(2,3)"]
    assert server.requests[1]["json"]["messages"][-1]["content"][0]["tool_use_id"] == "t1"


def test_images_in_user_messages_become_image_blocks(server: ScriptedServer) -> None:
    from agentfsm import ImageContent

    server.reply(body=message({"type": "text", "text": "A cat."}))
    picture = ChatMessage.from_user("What is this?", content_parts=[ImageContent("aGVsbG8=", "image/png")])
    generator(server).run([picture])
    assert server.requests[0]["json"]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="}},
            ],
        }
    ]
