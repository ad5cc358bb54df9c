"""AnthropicChatGenerator: Anthropic's Messages API.

The HTTP side (clients, retries, typed errors, server-sent events) is ``agentfsm.generators._http``;
this module maps messages, tools and replies to and from the API: system messages become the
``system`` prompt, tool calls ``tool_use`` blocks, tool results ``tool_result`` blocks of a user
turn, and consecutive turns of one role are merged (the API wants them to alternate).
"""

from __future__ import annotations

from typing import Any

from agentfsm.generators._http import HTTPChatGenerator, StreamAssembly
from agentfsm.messages import (
    ChatMessage,
    ChatRole,
    ReasoningContent,
    StreamingChunk,
    TextContent,
    ToolCall,
    parse_tool_arguments,
)
from agentfsm.tools.tool import Tool

DEFAULT_BASE_URL = "https://api.anthropic.com/v1"
API_VERSION = "2023-06-01"


def to_anthropic(messages: list[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """The system prompt and the alternating user / assistant turns of a conversation."""
    system = [m.text or "" for m in messages if m.role is ChatRole.SYSTEM]
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role is ChatRole.SYSTEM:
            continue
        blocks: list[dict[str, Any]] = []
        if m.role is ChatRole.TOOL:
            for r in m.tool_call_results:
                content = (
                    r.result
                    if isinstance(r.result, str)
                    else [{"type": "text", "text": p.text} for p in r.result if isinstance(p, TextContent)]
                )
                blocks.append(
                    {"type": "tool_result", "tool_use_id": r.origin.id, "content": content, "is_error": r.error}
                )
        else:
            for part in m.texts_and_images():
                if isinstance(part, TextContent):
                    if part.text:
                        blocks.append({"type": "text", "text": part.text})
                else:
                    source = {"type": "base64", "media_type": part.mime_type or "image/png", "data": part.base64_image}
                    blocks.append({"type": "image", "source": source})
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.tool_name, "input": c.arguments} for c in m.tool_calls
            ]
        role = "assistant" if m.role is ChatRole.ASSISTANT else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), turns


def reply_from_blocks(
    blocks: list[dict[str, Any]], model: str | None, stop_reason: str | None, usage: Any
) -> ChatMessage:
    """An assistant message from a reply's content blocks (unparsable tool input kept for the model to fix)."""
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
    calls = []
    for b in blocks:
        if b.get("type") == "tool_use":
            given = b.get("input")
            arguments = given if isinstance(given, dict) else parse_tool_arguments(str(given or "{}"))
            calls.append(ToolCall(b["name"], arguments, b.get("id")))
    thinking = "".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking")
    meta: dict[str, Any] = {"model": model, "finish_reason": stop_reason}
    if usage:
        meta["usage"] = usage
    return ChatMessage.from_assistant(
        "".join(texts) if texts else None, meta=meta, tool_calls=calls, reasoning=thinking or None
    )


class _MessageStream(StreamAssembly):
    """Puts a streamed Messages API reply together, event by event."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: dict[int, dict[str, Any]] = {}
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.usage: dict[str, int] = {}

    def add(self, event: dict[str, Any]) -> list[StreamingChunk]:
        """Take one event in; the chunks it adds (text, thinking and tool-input deltas)."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self.model = message.get("model")
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            block = dict(event.get("content_block") or {})
            if block.get("type") == "tool_use":
                block["input"] = ""
            self.blocks[event.get("index", 0)] = block
        elif kind == "content_block_delta":
            block = self.blocks.setdefault(event.get("index", 0), {"type": "text", "text": ""})
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
                return [StreamingChunk(content=delta.get("text", ""), index=event.get("index", 0))]
            if delta.get("type") == "input_json_delta":
                block["input"] = block.get("input", "") + delta.get("partial_json", "")
                return [StreamingChunk(meta={"tool_call_delta": delta}, index=event.get("index", 0))]
            if delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
                return [
                    StreamingChunk(reasoning=ReasoningContent(delta.get("thinking", "")), index=event.get("index", 0))
                ]
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(event.get("usage") or {})
        return []

    def finished(self, event: dict[str, Any]) -> bool:
        """``message_stop`` ends the stream."""
        return event.get("type") == "message_stop"

    def message(self) -> ChatMessage:
        """The whole reply, as the same answer without streaming would give it."""
        blocks = [self.blocks[i] for i in sorted(self.blocks)]
        for block in blocks:
            if block.get("type") == "tool_use" and isinstance(block.get("input"), str):
                block["input"] = parse_tool_arguments(block["input"] or "{}")
        return reply_from_blocks(blocks, self.model, self.stop_reason, self.usage)

    def final_chunk(self) -> StreamingChunk:
        """The last chunk: the stop reason, the model, the token usage."""
        meta = {"finish_reason": self.stop_reason, "model": self.model, "usage": self.usage}
        return StreamingChunk(finish_reason=self.stop_reason, meta=meta)


class AnthropicChatGenerator(HTTPChatGenerator):
    """A model client for Anthropic's Messages API.

    ``generation_kwargs`` are sent with every request (``max_tokens``, default 1024, ``temperature``,
    ``tool_choice`` in the API's form). See ``HTTPChatGenerator`` for the other settings.
    """

    path = "/messages"
    default_model = "claude-sonnet-4-5"
    api_key_env_var = "ANTHROPIC_API_KEY"
    default_base_url = DEFAULT_BASE_URL

    def headers(self, key: str | None) -> dict[str, str]:
        """The key and the API version."""
        return {"anthropic-version": API_VERSION, **({"x-api-key": key} if key else {})}

    def payload(
        self, messages: list[ChatMessage], tools: list[Tool] | None, stream: bool, **kwargs: Any
    ) -> dict[str, Any]:
        """The Messages API request."""
        system, turns = to_anthropic(messages)
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": 1024,
            "messages": turns,
            **self.generation_kwargs,
            **(kwargs.get("generation_kwargs") or {}),
        }
        if system is not None:
            payload["system"] = system
        if tools:
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
        if stream:
            payload["stream"] = True
        return payload

    def replies(self, data: Any) -> list[ChatMessage]:
        """The reply's content blocks as one assistant message."""
        return [reply_from_blocks(data["content"], data.get("model"), data.get("stop_reason"), data.get("usage"))]

    def assembly(self) -> StreamAssembly:
        """A streamed reply's assembly."""
        return _MessageStream()
