"""ScriptedChatGenerator: a model that replays a script. No network, no key, fully deterministic."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from agentfsm.errors import ConfigurationError, ScriptExhaustedError
from agentfsm.messages import ChatMessage, ChatMessageContent, ChatRole, StreamingCallback, StreamingChunk, ToolCall
from agentfsm.serialization import object_path
from agentfsm.tools.tool import Tool

_WORDS = re.compile(r"\S+\s*|\s+")


def _with_call_ids(reply: ChatMessage, position: int) -> ChatMessage:
    """Give tool calls without an id a deterministic one (``call_<reply>_<index>``)."""
    if all(tc.id is not None for tc in reply.tool_calls):
        return reply
    parts: list[ChatMessageContent] = []
    index = 0
    for part in reply._content:
        if isinstance(part, ToolCall):
            parts.append(part if part.id is not None else replace(part, id=f"call_{position}_{index}"))
            index += 1
        else:
            parts.append(part)
    return replace(reply, _content=tuple(parts))


class ScriptedChatGenerator:
    """Replays ``replies`` in order, one per call; plain strings are assistant text replies.

    With a streaming callback, text is streamed word by word, then tool calls, then a final chunk
    with ``finish_reason``. Tool calls without an id get ``call_<reply>_<index>``. Every call's
    input is recorded in ``calls`` (messages and tool names) so tests can check what the model saw.

    Examples:
        >>> gen = ScriptedChatGenerator(["Hello!"])
        >>> gen.run([ChatMessage.from_user("Hi")])["replies"][0].text
        'Hello!'
    """

    #: An agent with an output type passes its ``response_format``; the script answers as it is written.
    supports_response_format = True

    def __init__(self, replies: Sequence[ChatMessage | str], position: int = 0) -> None:
        script: list[ChatMessage] = []
        for i, reply in enumerate(replies):
            message = ChatMessage.from_assistant(reply) if isinstance(reply, str) else reply
            if not isinstance(message, ChatMessage) or not message.is_from(ChatRole.ASSISTANT):
                raise ConfigurationError(
                    f"Script entry {i} must be a string or an assistant ChatMessage, got {reply!r}."
                )
            script.append(_with_call_ids(message, i))
        if not 0 <= position <= len(script):
            raise ConfigurationError(f"position must be between 0 and {len(script)}, got {position}.")
        self.replies: list[ChatMessage] = script
        self.position = position
        self.calls: list[dict[str, Any]] = []

    @property
    def remaining(self) -> int:
        """How many replies are left."""
        return len(self.replies) - self.position

    def _next(self, messages: list[ChatMessage], tools: list[Tool] | None) -> ChatMessage:
        if self.position >= len(self.replies):
            raise ScriptExhaustedError(
                f"ScriptedChatGenerator ran out of replies: the script has {len(self.replies)} and call "
                f"{self.position + 1} asked for another. Add replies to the script or lower max_agent_steps."
            )
        self.calls.append({"messages": list(messages), "tools": [t.name for t in tools or []]})
        reply = self.replies[self.position]
        self.position += 1
        return reply

    @staticmethod
    def _chunks(reply: ChatMessage) -> list[StreamingChunk]:
        chunks = [
            StreamingChunk(content=w, index=0, start=i == 0) for i, w in enumerate(_WORDS.findall(reply.text or ""))
        ]
        if reply.tool_calls:
            chunks.append(StreamingChunk(tool_calls=reply.tool_calls, index=len(chunks), start=not chunks))
        finish = "tool_calls" if reply.tool_calls else "stop"
        chunks.append(StreamingChunk(finish_reason=finish, meta={"finish_reason": finish}))
        return chunks

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Return the next scripted reply, streaming it to ``streaming_callback`` if given."""
        reply = self._next(messages, tools)
        if streaming_callback is not None:
            for chunk in self._chunks(reply):
                pending = streaming_callback(chunk)
                if inspect.iscoroutine(pending):
                    pending.close()
                    raise ConfigurationError("An async streaming callback needs run_async; use a sync one with run.")
        return {"replies": [reply]}

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Async twin of ``run``; the callback may be sync or async."""
        reply = self._next(messages, tools)
        if streaming_callback is not None:
            for chunk in self._chunks(reply):
                pending = streaming_callback(chunk)
                if inspect.isawaitable(pending):
                    await pending
        return {"replies": [reply]}

    def to_dict(self) -> dict[str, Any]:
        """Serialize the script and the position reached in it."""
        return {
            "type": object_path(type(self)),
            "data": {"replies": [r.to_dict() for r in self.replies], "position": self.position},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> ScriptedChatGenerator:
        """Deserialize from ``to_dict`` output."""
        body = data["data"]
        return cls([ChatMessage.from_dict(r) for r in body["replies"]], position=body.get("position", 0))
