"""AnthropicChatGenerator: Anthropic's Messages API.

The HTTP side (clients, retries, typed errors, server-sent events) is ``agentfsm.generators._http``;
this module maps messages, tools and replies to and from the API: system messages become the
``system`` prompt, tool calls ``tool_use`` blocks, tool results ``tool_result`` blocks of a user
turn, and consecutive turns of one role are merged (the API wants them to alternate).
"""

from __future__ import annotations

from typing import Any

from agentfsm.errors import ConfigurationError, ModelResponseError
from agentfsm.generators._http import HTTPChatGenerator, StreamAssembly, tool_arguments
from agentfsm.messages import ChatMessage, ChatRole, ReasoningContent, StreamingChunk, TextContent, ToolCall
from agentfsm.tools.tool import Tool

DEFAULT_BASE_URL = "https://api.anthropic.com/v1"
API_VERSION = "2023-06-01"


def _call_id(call: ToolCall) -> str:
    if call.id is None:
        raise ConfigurationError(
            f"Tool call to {call.tool_name!r} has no id; the API pairs each tool result with its call by id: "
            "give every ToolCall an id."
        )
    return call.id


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
                    {"type": "tool_result", "tool_use_id": _call_id(r.origin), "content": content, "is_error": r.error}
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
                {"type": "tool_use", "id": _call_id(c), "name": c.tool_name, "input": c.arguments} for c in m.tool_calls
            ]
        role = "assistant" if m.role is ChatRole.ASSISTANT else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), turns


def tool_choice_for(choice: Any) -> Any:
    """``tool_choice`` in this API's form.

    The Chat Completions forms (``"auto"``, ``"required"``, ``"none"``, ``{"type": "function",
    "function": {"name": ...}}``) are translated.
    """
    if isinstance(choice, str):
        return {"type": {"required": "any"}.get(choice, choice)}
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    return choice


def reply_from_blocks(blocks: Any, model: Any, stop_reason: Any, usage: Any) -> ChatMessage:
    """An assistant message from a reply's content blocks (unusable tool input kept for the model to fix).

    A ``tool_use`` block without an id gives ``ToolCall(id=None)``; the run gives it one before it is sent back.
    """
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise ModelResponseError(f"The model server's 'content' is not a list of blocks: {str(blocks)[:200]}")
    texts = [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
    calls = []
    for b in blocks:
        if b.get("type") == "tool_use":
            name, call_id = b.get("name"), b.get("id")
            if not isinstance(name, str) or not name:
                raise ModelResponseError(f"The model server sent a tool_use block without a name: {str(b)[:200]}")
            calls.append(
                ToolCall(
                    name, tool_arguments(b.get("input")), call_id if isinstance(call_id, str) and call_id else None
                )
            )
    thinking = "".join(
        b["thinking"] for b in blocks if b.get("type") == "thinking" and isinstance(b.get("thinking"), str)
    )
    meta: dict[str, Any] = {
        "model": model if isinstance(model, str) else None,
        "finish_reason": stop_reason if isinstance(stop_reason, str) else None,
    }
    if isinstance(usage, dict) and usage:
        meta["usage"] = usage
    return ChatMessage.from_assistant(
        "".join(texts) if texts else None, meta=meta, tool_calls=calls, reasoning=thinking or None
    )


def _index(event: dict[str, Any]) -> int:
    """An event's content-block index (0 when it gives none, or one that is not an int)."""
    index = event.get("index", 0)
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


class _MessageStream(StreamAssembly):
    """Puts a streamed Messages API reply together, event by event."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: dict[int, dict[str, Any]] = {}
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.stopped = False
        self.usage: dict[str, int] = {}

    def add(self, event: dict[str, Any]) -> list[StreamingChunk]:
        """Take one event in; the chunks it adds (text, thinking and tool-input deltas)."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            model = message.get("model")
            self.model = model if isinstance(model, str) else None
            self._add_usage(message.get("usage"))
        elif kind == "content_block_start":
            block = dict(event.get("content_block") or {})
            if block.get("type") == "tool_use":
                block["input"] = ""
            self.blocks[_index(event)] = block
        elif kind == "content_block_delta":
            index = _index(event)
            block = self.blocks.setdefault(index, {"type": "text", "text": ""})
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
                return [StreamingChunk(content=delta.get("text", ""), index=index)]
            if delta.get("type") == "input_json_delta":
                block["input"] = block.get("input", "") + delta.get("partial_json", "")
                return [StreamingChunk(meta={"tool_call_delta": delta}, index=index)]
            if delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
                return [StreamingChunk(reasoning=ReasoningContent(delta.get("thinking", "")), index=index)]
        elif kind == "message_delta":
            stop_reason = (event.get("delta") or {}).get("stop_reason")
            self.stop_reason = stop_reason if isinstance(stop_reason, str) and stop_reason else self.stop_reason
            self._add_usage(event.get("usage"))
        return []

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage.update(usage)

    def finished(self, event: dict[str, Any]) -> bool:
        """``message_stop`` ends the stream."""
        self.stopped = self.stopped or event.get("type") == "message_stop"
        return self.stopped

    @property
    def complete(self) -> bool:
        """Whether the server gave a stop reason or ended the message."""
        return self.stop_reason is not None or self.stopped

    def message(self) -> ChatMessage:
        """The whole reply, as the same answer without streaming would give it."""
        blocks = [self.blocks[i] for i in sorted(self.blocks)]
        return reply_from_blocks(blocks, self.model, self.stop_reason, self.usage)

    def final_chunk(self) -> StreamingChunk:
        """The last chunk: the stop reason, the model, the token usage."""
        meta = {"finish_reason": self.stop_reason, "model": self.model, "usage": self.usage}
        return StreamingChunk(finish_reason=self.stop_reason, meta=meta)


class AnthropicChatGenerator(HTTPChatGenerator):
    """A model client for Anthropic's Messages API.

    ``generation_kwargs`` are sent with every request (``max_tokens``, default 1024, ``temperature``,
    ``tool_choice``). When tools are given and no ``tool_choice`` is, ``{"type": "auto"}`` is sent;
    without tools, ``tool_choice`` is left out; the Chat Completions forms of ``tool_choice`` are
    translated. See ``HTTPChatGenerator`` for the timeouts, the deadline, retries and the rest.
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
            payload["tool_choice"] = tool_choice_for(payload.get("tool_choice", "auto"))
        else:
            payload.pop("tool_choice", None)
        if stream:
            payload["stream"] = True
        return payload

    def replies(self, data: Any) -> list[ChatMessage]:
        """The reply's content blocks as one assistant message."""
        return [reply_from_blocks(data["content"], data.get("model"), data.get("stop_reason"), data.get("usage"))]

    def assembly(self) -> StreamAssembly:
        """A streamed reply's assembly."""
        return _MessageStream()
