"""A conversation both ways: AG-UI messages as the agent's ``ChatMessage``s, and back.

A message from the client keeps its AG-UI id in its ``meta`` (``AG_UI_ID``), so that the
conversation the endpoint sends back (``MESSAGES_SNAPSHOT``) names it as the client does; a
message the run added is named by the run and its place (``<run id>-<index>``), a tool's result
by its call (``<run id>-result-<call id>``), as the streamed events named them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    DeveloperMessage,
    FunctionCall,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import ToolCall as AGUIToolCall

from agentfsm.errors import ProtocolRequestError
from agentfsm.messages import ChatMessage, ChatRole, TextContent, ToolCall

#: The ``meta`` key of a message that came from the client: its AG-UI id.
AG_UI_ID = "ag_ui_id"


def _text(content: str | list[Any], where: str) -> str:
    """A message's text: its string, or its text parts joined; other parts are refused."""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if not isinstance(part, TextPart):
            raise ProtocolRequestError(
                f"{where} has a {getattr(part, 'type', type(part).__name__)!r} part: this endpoint reads text only. "
                "Nothing ran."
            )
        texts.append(part.text)
    return "".join(texts)


def to_chat_messages(messages: Sequence[Message]) -> list[ChatMessage]:
    """The client's conversation as the agent's; activity and reasoning messages are the client's own and left out.

    Raises:
        ProtocolRequestError: a message the agent cannot read: a part that is not text, a tool
            call whose arguments are not a JSON object, a tool result that answers no call before it.
    """
    chat: list[ChatMessage] = []
    calls: dict[str, ToolCall] = {}
    for message in messages:
        meta = {AG_UI_ID: message.id}
        where = f"Message {message.id!r}"
        if isinstance(message, UserMessage):
            chat.append(ChatMessage.from_user(_text(message.content, where), meta=meta))
        elif isinstance(message, SystemMessage | DeveloperMessage):
            chat.append(ChatMessage.from_system(message.content, meta=meta))
        elif isinstance(message, AssistantMessage):
            tool_calls = []
            for call in message.tool_calls or []:
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError:
                    arguments = None
                if not isinstance(arguments, dict):
                    raise ProtocolRequestError(
                        f"{where}: the arguments of tool call {call.id!r} are not a JSON object. Nothing ran."
                    )
                calls[call.id] = ToolCall(call.function.name, arguments, call.id)
                tool_calls.append(calls[call.id])
            chat.append(ChatMessage.from_assistant(message.content or None, meta=meta, tool_calls=tool_calls))
        elif isinstance(message, ToolMessage):
            origin = calls.get(message.tool_call_id)
            if origin is None:
                raise ProtocolRequestError(
                    f"{where} answers tool call {message.tool_call_id!r}, which no assistant message before it "
                    "made. Nothing ran."
                )
            text = _text(message.content, where)
            chat.append(ChatMessage.from_tool(text, origin, error=message.error is not None, meta=meta))
    return chat


def result_text(message: ChatMessage) -> str:
    """A tool message's result as text (parts that are not text are left out)."""
    result = message.tool_call_result
    if result is None:
        return ""
    if isinstance(result.result, str):
        return result.result
    return "".join(p.text for p in result.result if isinstance(p, TextContent))


def call_id(call: ToolCall, position: int) -> str:
    """The id of a call as events and snapshots name it: the model's, else its key (``#<position>``)."""
    return call.id if call.id is not None else f"#{position}"


def message_id(run_id: str, index: int) -> str:
    """The id of the message at ``index`` of a run's conversation that did not come from the client."""
    return f"{run_id}-{index}"


def result_id(run_id: str, call: str) -> str:
    """The id of the tool message that holds the result of the call ``call`` (its id) of a run."""
    return f"{run_id}-result-{call}"


def to_ag_ui_messages(run_id: str, conversation: Sequence[ChatMessage]) -> list[Message]:
    """The run's conversation as AG-UI messages, with the ids the client and the streamed events know them by."""
    out: list[Message] = []
    for index, message in enumerate(conversation):
        given = message.meta.get(AG_UI_ID)
        ident = given if isinstance(given, str) else message_id(run_id, index)
        if message.is_from(ChatRole.SYSTEM):
            out.append(SystemMessage(id=ident, content=message.text or ""))
        elif message.is_from(ChatRole.USER):
            out.append(UserMessage(id=ident, content=message.text or ""))
        elif message.is_from(ChatRole.ASSISTANT):
            tool_calls = [
                AGUIToolCall(
                    id=call_id(call, i),
                    function=FunctionCall(name=call.tool_name, arguments=json.dumps(call.arguments)),
                )
                for i, call in enumerate(message.tool_calls)
            ]
            out.append(AssistantMessage(id=ident, content=message.text, tool_calls=tool_calls or None))
        elif message.is_from(ChatRole.TOOL) and message.tool_call_result is not None:
            origin = message.tool_call_result.origin
            answered = origin.id or "#0"
            ident = given if isinstance(given, str) else result_id(run_id, answered)
            error = result_text(message) if message.tool_call_result.error else None
            out.append(ToolMessage(id=ident, content=result_text(message), tool_call_id=answered, error=error))
    return out
