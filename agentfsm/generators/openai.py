"""OpenAIChatGenerator: the Chat Completions API, for OpenAI and any OpenAI-compatible server.

The HTTP side (clients, retries, typed errors, server-sent events) is ``agentfsm.generators._http``;
this module maps messages, tools and replies to and from the API.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentfsm.errors import ConfigurationError, ModelResponseError
from agentfsm.generators._http import HTTPChatGenerator, StreamAssembly, text_of, tool_arguments
from agentfsm.messages import ChatMessage, ChatRole, ReasoningContent, StreamingChunk, ToolCall
from agentfsm.tools.tool import Tool

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def tool_spec(t: Tool) -> dict[str, Any]:
    """A tool as the Chat Completions API describes functions."""
    return {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}


def api_message(message: ChatMessage) -> dict[str, Any]:
    """A message as the API takes it; an assistant turn that only calls tools has ``""`` as its content.

    Sending ``null`` there is what the API describes, but some servers refuse it (llama-cpp-python
    answers 500); an empty string is accepted by every server tried.
    """
    try:
        encoded = message.to_openai_dict_format()
    except ValueError as exc:
        raise ConfigurationError(
            f"{exc} The API pairs each tool result with its call by id: give every ToolCall an id."
        ) from None
    if message.role is ChatRole.ASSISTANT and encoded.get("content") is None:
        encoded["content"] = ""
    return encoded


def tool_choice_for(choice: Any) -> Any:
    """``tool_choice`` in this API's form; Anthropic's forms (``"any"``, ``{"type": "tool", ...}``) are translated."""
    if choice == "any":
        return "required"
    if isinstance(choice, dict) and choice.get("type") in ("tool", "any", "auto", "none"):
        if choice["type"] == "tool":
            return {"type": "function", "function": {"name": choice.get("name")}}
        return "required" if choice["type"] == "any" else choice["type"]
    return choice


def _tool_call(raw: Any) -> ToolCall:
    function = raw["function"]
    name = function["name"]
    if not isinstance(name, str) or not name:
        raise ModelResponseError(f"The model server sent a tool call without a function name: {str(raw)[:200]}")
    call_id = raw.get("id")
    return ToolCall(
        name, tool_arguments(function.get("arguments")), call_id if isinstance(call_id, str) and call_id else None
    )


def reply_from_choice(choice: dict[str, Any], model: Any, usage: Any) -> ChatMessage:
    """One choice of a completion as an assistant message (unusable tool arguments kept for the model to fix).

    A tool call the server gave no id keeps ``id=None``; the run gives it one before it is sent back.
    """
    message = choice.get("message") or {}
    calls = [_tool_call(c) for c in message.get("tool_calls") or []]
    reasoning = text_of(message.get("reasoning_content") or message.get("reasoning"))
    meta: dict[str, Any] = {
        "model": model if isinstance(model, str) else None,
        "index": choice.get("index", 0),
        "finish_reason": choice.get("finish_reason"),
    }
    if isinstance(usage, dict) and usage:
        meta["usage"] = usage
    return ChatMessage.from_assistant(text_of(message.get("content")), meta=meta, tool_calls=calls, reasoning=reasoning)


class _CompletionStream(StreamAssembly):
    """Puts a streamed chat completion together, event by event.

    Servers differ in how they stream a tool call: OpenAI sends its id and name once, then pieces
    of the arguments; others repeat the name (and the id) in every chunk, leave out ``index``, or
    reuse an index for a call with a new id. A call is found by its index (a new id at that index
    starts another call), else by its id, else it is the last one; a name equal to the one already
    known is a repetition, anything else continues it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, str]] = []
        self.by_index: dict[int, dict[str, str]] = {}
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def _slot(self, part: dict[str, Any]) -> tuple[int, dict[str, str]]:
        call_id = part.get("id") if isinstance(part.get("id"), str) and part.get("id") else None
        index = part.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            slot = self.by_index.get(index)
            if slot is not None and (call_id is None or slot["id"] in ("", call_id)):
                return self.calls.index(slot), slot
        elif call_id is not None:
            for number, slot in enumerate(self.calls):
                if slot["id"] == call_id:
                    return number, slot
        elif self.calls:
            return len(self.calls) - 1, self.calls[-1]
        slot = {"id": "", "name": "", "arguments": ""}
        self.calls.append(slot)
        if isinstance(index, int) and not isinstance(index, bool):
            self.by_index[index] = slot
        return len(self.calls) - 1, slot

    def _tool_call_part(self, part: dict[str, Any]) -> StreamingChunk:
        number, slot = self._slot(part)
        function = part.get("function") or {}
        if isinstance(part.get("id"), str) and part["id"]:
            slot["id"] = part["id"]
        name = function.get("name")
        if isinstance(name, str) and name and name != slot["name"]:
            slot["name"] += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            slot["arguments"] += arguments
        elif isinstance(arguments, dict):
            slot["arguments"] = orjson.dumps(arguments).decode()
        return StreamingChunk(meta={"tool_call_delta": part}, index=number)

    def add(self, event: dict[str, Any]) -> list[StreamingChunk]:
        """Take one event in; the chunks it adds (text, reasoning and tool-call deltas)."""
        if isinstance(event.get("model"), str):
            self.model = event["model"]
        if isinstance(event.get("usage"), dict) and event["usage"]:
            self.usage = event["usage"]
        chunks = []
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                chunks.append(StreamingChunk(content=content, index=0, start=len(self.text) == 1))
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self.reasoning.append(thought)
                chunks.append(StreamingChunk(reasoning=ReasoningContent(thought), index=0))
            chunks += [self._tool_call_part(part) for part in delta.get("tool_calls") or []]
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        return chunks

    @property
    def complete(self) -> bool:
        """Whether a choice said why it ended."""
        return self.finish_reason is not None

    def message(self) -> ChatMessage:
        """The whole reply, as the same completion without streaming would give it."""
        message: dict[str, Any] = {"content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"] or None, "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in self.calls
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
    every request (``temperature``, ``tool_choice``, ``max_tokens``...). When tools are given and
    no ``tool_choice`` is, ``"auto"`` is sent (some servers show the model its tools only then);
    without tools, ``tool_choice`` and ``parallel_tool_calls`` are left out (servers refuse them).
    See ``HTTPChatGenerator`` for the timeouts, the deadline, retries and ``http_client_kwargs``.
    """

    path = "/chat/completions"
    #: The agent gives an output type's schema as ``generation_kwargs={"response_format": ...}`` (``agentfsm.output``).
    supports_response_format = True
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
            "messages": [api_message(m) for m in messages],
            **self.generation_kwargs,
            **(kwargs.get("generation_kwargs") or {}),
        }
        if tools:
            payload["tools"] = [tool_spec(t) for t in tools]
            payload["tool_choice"] = tool_choice_for(payload.get("tool_choice", "auto"))
        else:
            payload.pop("tool_choice", None)
            payload.pop("parallel_tool_calls", None)
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    def replies(self, data: Any) -> list[ChatMessage]:
        """One assistant message per choice."""
        choices = data["choices"]
        if not isinstance(choices, list):
            raise ModelResponseError(f"The model server's 'choices' is not a list: {str(choices)[:200]}")
        return [reply_from_choice(c, data.get("model"), data.get("usage")) for c in choices]

    def assembly(self) -> StreamAssembly:
        """A streamed completion's assembly."""
        return _CompletionStream()
