from __future__ import annotations

import copy
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import ChatMessage, ChatRole, ImageContent, ReasoningContent, TextContent, ToolCall, ToolCallResult
from agentfsm.errors import DeserializationError
from agentfsm.messages import RAW_ARGUMENTS_KEY, parse_tool_arguments


def test_constructors_and_accessors() -> None:
    call = ToolCall("search", {"q": "fsm"}, id="c1")
    reply = ChatMessage.from_assistant("looking", tool_calls=[call], meta={"model": "m"}, reasoning="think")
    assert reply.role is ChatRole.ASSISTANT
    assert reply.text == "looking"
    assert reply.texts == ["looking"]
    assert reply.tool_calls == [call]
    assert reply.tool_call == call
    assert reply.reasoning == ReasoningContent("think")
    assert reply.meta == {"model": "m"}
    assert reply.is_from("assistant") and reply.is_from(ChatRole.ASSISTANT)
    assert not reply.is_from(ChatRole.USER)

    result = ChatMessage.from_tool("42", origin=call, error=True)
    assert result.role is ChatRole.TOOL
    assert result.tool_call_result == ToolCallResult("42", call, True)
    assert result.tool_call_results == [ToolCallResult("42", call, True)]
    assert result.text is None and result.tool_call is None

    assert ChatMessage.from_user("hi").text == "hi"
    assert ChatMessage.from_system("be brief").role is ChatRole.SYSTEM
    empty = ChatMessage.from_assistant()
    assert empty.text is None and empty.tool_calls == [] and empty.tool_call_result is None


def test_messages_are_immutable() -> None:
    message = ChatMessage.from_user("hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message._role = ChatRole.SYSTEM  # type: ignore[misc]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=8,
)
tool_calls = st.builds(
    ToolCall, st.text(min_size=1), st.dictionaries(st.text(), json_values, max_size=3), st.none() | st.text()
)
messages = st.one_of(
    st.builds(ChatMessage.from_user, st.text()),
    st.builds(ChatMessage.from_system, st.text()),
    st.builds(
        ChatMessage.from_assistant,
        st.none() | st.text(),
        st.dictionaries(st.text(), json_values, max_size=2),
        st.none(),
        st.lists(tool_calls, max_size=3),
        st.none() | st.text(),
    ),
    st.builds(ChatMessage.from_tool, st.text(), tool_calls, st.booleans()),
)


@given(messages)
def test_to_dict_round_trip_is_exact(message: ChatMessage) -> None:
    assert ChatMessage.from_dict(message.to_dict()) == message


def test_from_dict_rejects_malformed_data() -> None:
    with pytest.raises(DeserializationError, match="Unknown chat role"):
        ChatMessage.from_dict({"role": "robot", "content": []})
    with pytest.raises(DeserializationError, match="Unknown message content part"):
        ChatMessage.from_dict({"role": "user", "content": [{"video": "x"}]})
    with pytest.raises(DeserializationError, match="Malformed chat message"):
        ChatMessage.from_dict({"role": "user", "content": [{"image": "not an image object"}]})
    with pytest.raises(DeserializationError, match="Malformed"):
        ChatMessage.from_dict({"role": "user"})


def test_openai_format_round_trip() -> None:
    call = ToolCall("add", {"a": 1, "b": 2}, id="call_1")
    reply = ChatMessage.from_assistant("adding", tool_calls=[call])
    wire = reply.to_openai_dict_format()
    assert wire == {
        "role": "assistant",
        "content": "adding",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}],
    }
    assert ChatMessage.from_openai_dict_format(wire) == reply
    tool_message = ChatMessage.from_tool("3", call).to_openai_dict_format()
    assert tool_message == {"role": "tool", "content": "3", "tool_call_id": "call_1"}
    assert ChatMessage.from_user("hi", name="ann").to_openai_dict_format() == {
        "role": "user",
        "name": "ann",
        "content": "hi",
    }
    assert ChatMessage.from_openai_dict_format({"role": "user", "content": [{"type": "text", "text": "a"}]}).text == "a"


def test_openai_format_needs_ids() -> None:
    with pytest.raises(ValueError, match="needs an id"):
        ChatMessage.from_assistant(tool_calls=[ToolCall("add", {})]).to_openai_dict_format()


def test_invalid_json_arguments_are_kept_not_lost() -> None:
    wire = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "x", "function": {"name": "add", "arguments": "{oops"}}],
    }
    message = ChatMessage.from_openai_dict_format(wire)
    assert message.tool_call is not None
    assert message.tool_call.arguments == {RAW_ARGUMENTS_KEY: "{oops"}
    assert parse_tool_arguments("[1, 2]") == {RAW_ARGUMENTS_KEY: "[1, 2]"}
    assert parse_tool_arguments('{"a": 1}') == {"a": 1}


def test_user_messages_carry_images_in_order() -> None:
    from agentfsm import ImageContent, TextContent

    picture = ImageContent("aGVsbG8=", "image/jpeg", "low")
    message = ChatMessage.from_user("What is this?", content_parts=[picture, TextContent("Be brief.")])
    assert message.images == [picture] and message.texts == ["What is this?", "Be brief."]
    assert ChatMessage.from_dict(message.to_dict()) == message
    assert message.to_openai_dict_format()["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,aGVsbG8=", "detail": "low"}},
        {"type": "text", "text": "Be brief."},
    ]
    with pytest.raises(ValueError, match="needs text or content_parts"):
        ChatMessage.from_user()


def built_every_way(message: ChatMessage) -> list[ChatMessage]:
    """``message`` built as the library builds messages and as users (and Haystack's tests) do."""
    role, parts, name, meta = message.role, list(message._content), message.name, dict(message.meta)
    return [
        ChatMessage(role, parts, name, meta),
        ChatMessage(role, tuple(parts), name, meta),
        ChatMessage(_role=role, _content=parts, _name=name, _meta=meta),
        ChatMessage(_role=role, _content=iter(parts), _name=name, _meta=meta),  # type: ignore[arg-type]
        dataclasses.replace(message, _content=parts),
        ChatMessage.from_dict(message.to_dict()),
        copy.deepcopy(message),
    ]


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage.from_user("Hello"),
        ChatMessage.from_user("Look", content_parts=[ImageContent("aGVsbG8=", "image/png")], name="ann"),
        ChatMessage.from_system("Be brief.", meta={"source": "config"}),
        ChatMessage.from_assistant("adding", tool_calls=[ToolCall("add", {"a": 1}, id="c1")], reasoning="sum"),
        ChatMessage.from_tool("3", ToolCall("add", {"a": 1}, id="c1"), meta={"ms": 2}),
    ],
)
def test_equal_messages_are_equal_and_hash_alike_however_they_were_built(message: ChatMessage) -> None:
    for same in built_every_way(message):
        assert same == message and message == same
        assert hash(same) == hash(message)
        assert isinstance(same._content, tuple)
    assert len({message, *built_every_way(message)}) == 1
    assert ChatMessage(message.role, [*message._content, TextContent("more")]) != message


def test_messages_from_the_openai_format_equal_those_built_directly() -> None:
    call = ToolCall("add", {"a": 1}, id="c1")
    wire = {"role": "assistant", "content": "adding", "tool_calls": [{"id": "c1", "function": {"name": "add", "arguments": '{"a": 1}'}}]}  # fmt: skip
    assert ChatMessage.from_openai_dict_format(wire) == ChatMessage(ChatRole.ASSISTANT, [TextContent("adding"), call])
    user = ChatMessage.from_openai_dict_format({"role": "user", "content": "Hello"})
    assert user == ChatMessage(_role=ChatRole.USER, _content=[TextContent(text="Hello")], _name=None, _meta={})
    assert hash(user) == hash(ChatMessage.from_user("Hello"))
