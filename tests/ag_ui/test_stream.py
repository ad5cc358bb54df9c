"""agentfsm events as AG-UI events, without a server: state patches, and a reply that does not stream."""

from __future__ import annotations

from typing import Any

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.ag_ui import EventStream
from agentfsm.ag_ui.state import json_patch
from agentfsm.generators import ScriptedChatGenerator


def test_a_patch_turns_the_old_state_into_the_new_one() -> None:
    old = {"a": 1, "nested": {"keep": [1], "drop": True}, "a/b": 0, "gone": None}
    new = {"a": 2, "nested": {"keep": [1], "add": "x"}, "a/b": 1, "t~": "y"}
    ops = json_patch(old, new)
    assert {"op": "remove", "path": "/gone"} in ops and {"op": "remove", "path": "/nested/drop"} in ops
    assert {"op": "replace", "path": "/a~1b", "value": 1} in ops and {"op": "add", "path": "/t~0", "value": "y"} in ops
    assert not any(op["path"] == "/nested/keep" for op in ops)
    assert json_patch(1, 1) == [] and json_patch(1, True) == [{"op": "replace", "path": "", "value": True}]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def translated(streaming: bool) -> list[Any]:
    script = [ChatMessage.from_assistant("Adding.", tool_calls=[ToolCall("add", {"a": 1, "b": 2}, "c1")]), "3"]
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[add])
    stream = EventStream("t", "r", base_state={}, declared=(), questions=lambda snapshot: [])
    options: dict[str, Any] = {"streaming_callback": lambda chunk: None} if streaming else {}
    return [
        out for event in agent.iter([ChatMessage.from_user("1 + 2?")], **options) for out in stream.translate(event)
    ]


def test_a_streamed_reply_is_a_text_message_and_its_call_is_announced_once() -> None:
    events = translated(streaming=True)
    kinds = [e.type.value for e in events]
    assert kinds.count("TOOL_CALL_START") == 1 and kinds.count("TOOL_CALL_RESULT") == 1
    assert kinds.index("TEXT_MESSAGE_END") < kinds.index("TOOL_CALL_START") < kinds.index("TOOL_CALL_RESULT")
    texts = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert texts == "Adding.3" and kinds[-1] == "RUN_FINISHED"


def test_a_reply_that_does_not_stream_comes_in_the_conversation_at_the_end() -> None:
    events = translated(streaming=False)
    kinds = [e.type.value for e in events]
    assert "TEXT_MESSAGE_START" not in kinds and kinds.count("TOOL_CALL_START") == 1
    [snapshot] = [e for e in events if e.type.value == "MESSAGES_SNAPSHOT"]
    assert [m.role for m in snapshot.messages] == ["user", "assistant", "tool", "assistant"]
    assert snapshot.messages[-1].content == "3"
