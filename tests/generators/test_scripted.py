from __future__ import annotations

import pytest

from agentfsm import ChatMessage, ConfigurationError, StreamingChunk, ToolCall
from agentfsm.errors import ScriptExhaustedError
from agentfsm.generators import ChatGenerator, ScriptedChatGenerator

USER = [ChatMessage.from_user("hi")]


def test_replays_in_order_and_records_calls() -> None:
    gen = ScriptedChatGenerator(["one", ChatMessage.from_assistant("two")])
    assert isinstance(gen, ChatGenerator)
    assert gen.run(USER)["replies"] == [ChatMessage.from_assistant("one")]
    assert gen.remaining == 1
    assert gen.run(USER, tools=None)["replies"][0].text == "two"
    assert gen.calls == [{"messages": USER, "tools": []}, {"messages": USER, "tools": []}]
    with pytest.raises(ScriptExhaustedError, match="has 2 and call 3"):
        gen.run(USER)


def test_missing_tool_call_ids_get_deterministic_ones() -> None:
    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("a", {}), ToolCall("b", {}, id="keep"), ToolCall("c", {})])
    gen = ScriptedChatGenerator(["first", reply])
    assert [tc.id for tc in gen.replies[1].tool_calls] == ["call_1_0", "keep", "call_1_2"]


def test_rejects_non_assistant_entries_and_bad_position() -> None:
    with pytest.raises(ConfigurationError, match="Script entry 0"):
        ScriptedChatGenerator([ChatMessage.from_user("x")])
    with pytest.raises(ConfigurationError, match="position"):
        ScriptedChatGenerator(["a"], position=2)


def test_streams_words_then_tool_calls_then_finish() -> None:
    chunks: list[StreamingChunk] = []
    call = ToolCall("a", {}, id="1")
    ScriptedChatGenerator([ChatMessage.from_assistant("two words", tool_calls=[call])]).run(
        USER, streaming_callback=chunks.append
    )
    assert [c.content for c in chunks] == ["two ", "words", "", ""]
    assert chunks[0].start and not chunks[1].start
    assert chunks[2].tool_calls == [call]
    assert chunks[3].finish_reason == "tool_calls"


async def test_run_async_awaits_async_callbacks() -> None:
    seen: list[str] = []

    async def callback(chunk: StreamingChunk) -> None:
        seen.append(chunk.content)

    reply = await ScriptedChatGenerator(["a b"]).run_async(USER, streaming_callback=callback)
    assert reply["replies"][0].text == "a b"
    assert seen == ["a ", "b", ""]


def test_sync_run_refuses_async_callbacks() -> None:
    async def callback(chunk: StreamingChunk) -> None: ...

    with pytest.raises(ConfigurationError, match="needs run_async"):
        ScriptedChatGenerator(["a"]).run(USER, streaming_callback=callback)


def test_to_dict_keeps_the_position() -> None:
    gen = ScriptedChatGenerator(["a", "b"])
    gen.run(USER)
    clone = ScriptedChatGenerator.from_dict(gen.to_dict())
    assert clone.replies == gen.replies
    assert clone.run(USER)["replies"][0].text == "b"
