"""OpenAIChatGenerator: the Chat Completions API, for OpenAI and any OpenAI-compatible server.

The HTTP side (clients, retries, typed errors, server-sent events) is ``agentfsm.generators._http``;
this module maps messages, tools and replies to and from the API.
"""

from __future__ import annotations

from typing import Any

from agentfsm.generators._http import HTTPChatGenerator, StreamAssembly
from agentfsm.messages import (
    ChatMessage,
    ReasoningContent,
    StreamingChunk,
    ToolCall,
    parse_tool_arguments,
)
from agentfsm.tools.tool import Tool

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def tool_spec(t: Tool) -> dict[str, Any]:
    """A tool as the Chat Completions API describes functions."""
    return {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}


def reply_from_choice(choice: dict[str, Any], model: str | None, usage: dict[str, Any] | None) -> ChatMessage:
    """One choice of a completion as an assistant message (unparsable tool arguments kept for the model to fix)."""
    message = choice.get("message") or {}
    calls = [
        ToolCall(c["function"]["name"], parse_tool_arguments(c["function"].get("arguments") or "{}"), c.get("id"))
        for c in message.get("tool_calls") or []
    ]
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    meta = {"model": model, "index": choice.get("index", 0), "finish_reason": choice.get("finish_reason")}
    if usage:
        meta["usage"] = usage
    return ChatMessage.from_assistant(message.get("content"), meta=meta, tool_calls=calls, reasoning=reasoning)


class _CompletionStream(StreamAssembly):
    """Puts a streamed chat completion together, event by event."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, event: dict[str, Any]) -> list[StreamingChunk]:
        """Take one event in; the chunks it adds (text, reasoning and tool-call deltas)."""
        self.model = event.get("model") or self.model
        if event.get("usage"):
            self.usage = event["usage"]
        chunks = []
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
                chunks.append(StreamingChunk(content=delta["content"], index=0, start=len(self.text) == 1))
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if thought:
                self.reasoning.append(thought)
                chunks.append(StreamingChunk(reasoning=ReasoningContent(thought), index=0))
            for part in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(part.get("index", 0), {"id": "", "name": "", "arguments": ""})
                function = part.get("function") or {}
                slot["id"] = part.get("id") or slot["id"]
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
                chunks.append(StreamingChunk(meta={"tool_call_delta": part}, index=part.get("index", 0)))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return chunks

    def message(self) -> ChatMessage:
        """The whole reply, as the same completion without streaming would give it."""
        message: dict[str, Any] = {"content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"] or None, "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())
            ]
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        choice = {"index": 0, "finish_reason": self.finish_reason, "message": message}
        return reply_from_choice(choice, self.model, self.usage)

    def final_chunk(self) -> StreamingChunk:
        """The last chunk: why the reply ended, the model, the token usage."""
        meta = {"finish_reason": self.finish_reason, "model": self.model, "usage": self.usage}
        return StreamingChunk(finish_reason=self.finish_reason, meta=meta)


class OpenAIChatGenerator(HTTPChatGenerator):
    """A model client for the Chat Completions API (OpenAI, vLLM, Ollama, llama.cpp, LM Studio, ...).

    ``api_base_url`` points it at any OpenAI-compatible server; ``generation_kwargs`` are sent with
    every request (``temperature``, ``tool_choice``, ``max_tokens``...). See ``HTTPChatGenerator``
    for ``timeout``, ``max_retries``, ``backoff_base`` and ``http_client_kwargs``.
    """

    path = "/chat/completions"
    default_model = "gpt-4o-mini"
    api_key_env_var = "OPENAI_API_KEY"
    default_base_url = DEFAULT_BASE_URL

    def headers(self, key: str | None) -> dict[str, str]:
        """A bearer token, when there is a key (a local server may need none)."""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def payload(
        self, messages: list[ChatMessage], tools: list[Tool] | None, stream: bool, **kwargs: Any
    ) -> dict[str, Any]:
        """The chat completion request."""
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai_dict_format() for m in messages],
            **self.generation_kwargs,
            **(kwargs.get("generation_kwargs") or {}),
        }
        if tools:
            payload["tools"] = [tool_spec(t) for t in tools]
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    def replies(self, data: Any) -> list[ChatMessage]:
        """One assistant message per choice."""
        return [reply_from_choice(c, data.get("model"), data.get("usage")) for c in data["choices"]]

    def assembly(self) -> StreamAssembly:
        """A streamed completion's assembly."""
        return _CompletionStream()
