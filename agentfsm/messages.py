"""Chat messages and their parts: the data that flows between the model, the tools and State.

Messages and their parts are slotted, frozen dataclasses: safe to share between the run, its
snapshots and the caller. Each content part names its ``kind``, the key it is stored under in a
message's serialized ``content``. ``to_dict``/``from_dict`` round-trip exactly; ``to_openai_dict_format``/``from_openai_dict_format``
convert to and from the OpenAI chat-completions wire format.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal

import orjson

from agentfsm.errors import DeserializationError
from agentfsm.serialization import brief


class ChatRole(StrEnum):
    """Who a message is from."""

    USER = "user"
    SYSTEM = "system"
    ASSISTANT = "assistant"
    TOOL = "tool"

    @staticmethod
    def from_str(value: str) -> ChatRole:
        """Return the role named by ``value``; raise ``DeserializationError`` for unknown roles."""
        try:
            return ChatRole(value)
        except ValueError:
            roles = ", ".join(r.value for r in ChatRole)
            raise DeserializationError(f"Unknown chat role {value!r}; expected one of: {roles}.") from None


@dataclass(frozen=True, slots=True)
class TextContent:
    """A piece of text in a message."""

    kind: ClassVar[Literal["text"]] = "text"
    text: str

    def to_dict(self) -> dict[str, Any]:
        """Serialize to a dictionary."""
        return {"text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TextContent:
        """Deserialize from a dictionary made by ``to_dict``."""
        return cls(_field(data, "text", str))


@dataclass(frozen=True, slots=True)
class ImageContent:
    """An image, base64-encoded: a part of a user's message, or of a ``raw_result`` tool's result."""

    kind: ClassVar[Literal["image"]] = "image"
    base64_image: str
    mime_type: str | None = None
    detail: Literal["auto", "high", "low"] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Serialize to a dictionary."""
        return {
            "base64_image": self.base64_image,
            "mime_type": self.mime_type,
            "detail": self.detail,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ImageContent:
        """Deserialize from a dictionary made by ``to_dict``."""
        detail = _field(data, "detail", str, optional=True)
        if detail not in (None, "auto", "high", "low"):
            raise DeserializationError(f"An image's detail is 'auto', 'high' or 'low', got {detail!r}.")
        return cls(
            _field(data, "base64_image", str),
            _field(data, "mime_type", str, optional=True),
            detail,
            dict(_field(data, "meta", dict, optional=True) or {}),
        )


#: A tool result: text, or (``raw_result`` tools) a list of text and image parts.
ToolResultContent = str | list[TextContent | ImageContent]


def _result_to_dict(result: ToolResultContent) -> Any:
    if isinstance(result, str):
        return result
    return [{"text": p.text} if isinstance(p, TextContent) else {"image": p.to_dict()} for p in result]


def _result_from_dict(data: Any) -> ToolResultContent:
    if isinstance(data, str):
        return data
    if not isinstance(data, list) or not all(isinstance(p, dict) for p in data):
        raise DeserializationError(f"A tool result is a string or a list of parts, got {brief(data)}.")
    return [TextContent.from_dict(p) if "text" in p else ImageContent.from_dict(_field(p, "image", dict)) for p in data]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call prepared by the model: which tool, with which arguments."""

    kind: ClassVar[Literal["tool_call"]] = "tool_call"
    tool_name: str
    arguments: dict[str, Any]
    id: str | None = None
    extra: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Serialize to a dictionary."""
        data: dict[str, Any] = {"tool_name": self.tool_name, "arguments": self.arguments, "id": self.id}
        if self.extra is not None:
            data["extra"] = self.extra
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """Deserialize from a dictionary made by ``to_dict``."""
        return cls(
            tool_name=_field(data, "tool_name", str),
            arguments=_field(data, "arguments", dict),
            id=_field(data, "id", str, optional=True),
            extra=_field(data, "extra", dict, optional=True),
        )


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """The result of running a tool call; ``error`` is True when the call failed."""

    kind: ClassVar[Literal["tool_call_result"]] = "tool_call_result"
    result: ToolResultContent
    origin: ToolCall
    error: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Serialize to a dictionary."""
        return {"result": _result_to_dict(self.result), "origin": self.origin.to_dict(), "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCallResult:
        """Deserialize from a dictionary made by ``to_dict``."""
        return cls(
            result=_result_from_dict(data["result"]),
            origin=ToolCall.from_dict(_field(data, "origin", dict)),
            error=_field(data, "error", bool),
        )


@dataclass(frozen=True, slots=True)
class ReasoningContent:
    """The model's reasoning text, kept apart from the answer."""

    kind: ClassVar[Literal["reasoning"]] = "reasoning"
    reasoning_text: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Serialize to a dictionary."""
        return {"reasoning_text": self.reasoning_text, "extra": self.extra}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReasoningContent:
        """Deserialize from a dictionary made by ``to_dict``."""
        return cls(
            reasoning_text=_field(data, "reasoning_text", str), extra=_field(data, "extra", dict, optional=True) or {}
        )


ChatMessageContent = TextContent | ImageContent | ToolCall | ToolCallResult | ReasoningContent


#: The class of each content kind: a message's serialized content is a list of ``{kind: data}``.
_CONTENT_KINDS: dict[str, type[ChatMessageContent]] = {
    cls.kind: cls for cls in (TextContent, ImageContent, ToolCall, ToolCallResult, ReasoningContent)
}


def _content_to_dict(part: ChatMessageContent) -> dict[str, Any]:
    return {part.kind: part.text if isinstance(part, TextContent) else part.to_dict()}


def _content_from_dict(part: dict[str, Any]) -> ChatMessageContent:
    if not isinstance(part, dict):
        raise DeserializationError(f"A message content part is an object, got {brief(part)}.")
    for kind in part:
        cls = _CONTENT_KINDS.get(kind)
        if cls is not None:
            if cls is TextContent:
                return TextContent(_field(part, "text", str))
            return cls.from_dict(_field(part, kind, dict))
    raise DeserializationError(
        f"Unknown message content part with keys {sorted(map(str, part))}; expected one of "
        f"{', '.join(map(repr, _CONTENT_KINDS))}."
    )


def _field(data: Mapping[str, Any], key: str, kind: type, *, optional: bool = False) -> Any:
    """``data[key]`` when it is a ``kind`` (or missing or None, when ``optional``); else ``DeserializationError``."""
    if not isinstance(data, Mapping):
        raise DeserializationError(f"Expected an object with {key!r}, got {brief(data)}.")
    value = data.get(key)
    if value is None and optional:
        return None
    if key not in data:
        raise DeserializationError(f"{key!r} is missing in {brief(data)}.")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise DeserializationError(f"{key!r} must be a {kind.__name__}, got {brief(value)}.")
    return value


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a conversation. Create messages with the ``from_*`` class methods.

    Built directly, as Haystack's tests do (``ChatMessage(_role=ChatRole.USER, _content=[TextContent("Hi")])``),
    a message keeps its content as a tuple, whatever sequence it was given: messages with the same
    role, content, name and meta are equal however they were built, and hash alike.
    """

    _role: ChatRole
    _content: Sequence[ChatMessageContent]
    _name: str | None = None
    _meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self._content, tuple):
            object.__setattr__(self, "_content", tuple(self._content))

    def __hash__(self) -> int:
        # Content parts such as tool calls and the meta hold dicts: the hash reads only the
        # immutable parts, which equal messages share.
        return hash((self._role, self._name, tuple(p.kind for p in self._content), self.text))

    # -- constructors -----------------------------------------------------------------------------

    @classmethod
    def from_user(
        cls,
        text: str | None = None,
        meta: dict[str, Any] | None = None,
        name: str | None = None,
        *,
        content_parts: Sequence[TextContent | ImageContent] | None = None,
    ) -> ChatMessage:
        """A message from the user: ``text``, or ``content_parts`` (text and images), or both."""
        parts: tuple[ChatMessageContent, ...] = (
            *(() if text is None else (TextContent(text),)),
            *(content_parts or ()),
        )
        if not parts:
            raise ValueError("A user message needs text or content_parts.")
        return cls(ChatRole.USER, parts, name, meta or {})

    @classmethod
    def from_system(cls, text: str, meta: dict[str, Any] | None = None, name: str | None = None) -> ChatMessage:
        """A system message (instructions for the model)."""
        return cls(ChatRole.SYSTEM, (TextContent(text),), name, meta or {})

    @classmethod
    def from_assistant(
        cls,
        text: str | None = None,
        meta: dict[str, Any] | None = None,
        name: str | None = None,
        tool_calls: Sequence[ToolCall] | None = None,
        reasoning: str | ReasoningContent | None = None,
    ) -> ChatMessage:
        """A reply of the model: text and/or tool calls, optionally with its reasoning."""
        parts: list[ChatMessageContent] = []
        if reasoning is not None:
            parts.append(ReasoningContent(reasoning) if isinstance(reasoning, str) else reasoning)
        if text is not None:
            parts.append(TextContent(text))
        if tool_calls:
            parts.extend(tool_calls)
        return cls(ChatRole.ASSISTANT, tuple(parts), name, meta or {})

    @classmethod
    def from_tool(
        cls, tool_result: ToolResultContent, origin: ToolCall, error: bool = False, meta: dict[str, Any] | None = None
    ) -> ChatMessage:
        """The result of a tool call, sent back to the model."""
        return cls(ChatRole.TOOL, (ToolCallResult(tool_result, origin, error),), None, meta or {})

    # -- accessors --------------------------------------------------------------------------------

    @property
    def role(self) -> ChatRole:
        """Who the message is from."""
        return self._role

    @property
    def name(self) -> str | None:
        """The optional name of the participant."""
        return self._name

    @property
    def meta(self) -> dict[str, Any]:
        """Free-form metadata (model name, token usage, ...)."""
        return self._meta

    def texts_and_images(self) -> list[TextContent | ImageContent]:
        """The text and image parts, in order."""
        return [p for p in self._content if isinstance(p, (TextContent, ImageContent))]

    @property
    def images(self) -> list[ImageContent]:
        """All image parts."""
        return [p for p in self._content if isinstance(p, ImageContent)]

    @property
    def texts(self) -> list[str]:
        """All text parts."""
        return [p.text for p in self._content if isinstance(p, TextContent)]

    @property
    def text(self) -> str | None:
        """The first text part, or None."""
        for p in self._content:
            if isinstance(p, TextContent):
                return p.text
        return None

    @property
    def tool_calls(self) -> list[ToolCall]:
        """All tool calls."""
        return [p for p in self._content if isinstance(p, ToolCall)]

    @property
    def tool_call(self) -> ToolCall | None:
        """The first tool call, or None."""
        for p in self._content:
            if isinstance(p, ToolCall):
                return p
        return None

    @property
    def tool_call_results(self) -> list[ToolCallResult]:
        """All tool call results."""
        return [p for p in self._content if isinstance(p, ToolCallResult)]

    @property
    def tool_call_result(self) -> ToolCallResult | None:
        """The first tool call result, or None."""
        for p in self._content:
            if isinstance(p, ToolCallResult):
                return p
        return None

    @property
    def reasonings(self) -> list[ReasoningContent]:
        """All reasoning parts."""
        return [p for p in self._content if isinstance(p, ReasoningContent)]

    @property
    def reasoning(self) -> ReasoningContent | None:
        """The first reasoning part, or None."""
        for p in self._content:
            if isinstance(p, ReasoningContent):
                return p
        return None

    def is_from(self, role: ChatRole | str) -> bool:
        """Whether the message is from ``role``."""
        return self._role == ChatRole(role)

    # -- serialization ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dictionary."""
        return {
            "role": self._role.value,
            "content": [_content_to_dict(p) for p in self._content],
            "name": self._name,
            "meta": self._meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatMessage:
        """Deserialize from a dictionary made by ``to_dict``."""
        try:
            content = tuple(_content_from_dict(p) for p in _field(data, "content", list))
            role = ChatRole.from_str(_field(data, "role", str))
            meta = _field(data, "meta", dict, optional=True)
            return cls(role, content, _field(data, "name", str, optional=True), dict(meta or {}))
        except DeserializationError as exc:
            raise DeserializationError(f"Malformed chat message: {exc}") from None
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise DeserializationError(f"Malformed chat message {brief(data)}: {exc!r}") from None

    def to_openai_dict_format(self) -> dict[str, Any]:
        """Convert to the OpenAI chat-completions message format."""
        msg: dict[str, Any] = {"role": self._role.value}
        if self._name is not None:
            msg["name"] = self._name
        if self._role is ChatRole.TOOL:
            result = self.tool_call_result
            if result is None or result.origin.id is None:
                raise ValueError("A tool message needs a tool call result whose origin has an id for OpenAI.")
            msg["content"] = (
                result.result if isinstance(result.result, str) else [_openai_part(p) for p in result.result]
            )
            msg["tool_call_id"] = result.origin.id
            return msg
        texts = self.texts
        if self.images:  # text and images as parts, in order
            msg["content"] = [_openai_part(p) for p in self.texts_and_images()]
        else:
            msg["content"] = "\n".join(texts) if texts else None
        if self.tool_calls:
            calls = []
            for tc in self.tool_calls:
                if tc.id is None:
                    raise ValueError(f"Tool call to {tc.tool_name!r} needs an id for the OpenAI format.")
                arguments = orjson.dumps(tc.arguments).decode()
                calls.append(
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.tool_name, "arguments": arguments},
                    }
                )
            msg["tool_calls"] = calls
        return msg

    @classmethod
    def from_openai_dict_format(cls, message: dict[str, Any]) -> ChatMessage:
        """Build a message from the OpenAI chat-completions format.

        Tool-call arguments that are not valid JSON are kept as ``{"__raw__": "<text>"}`` so that the
        tool invoker can report the problem to the model instead of losing it.
        """
        role = ChatRole.from_str(message.get("role", ""))
        name = message.get("name")
        content = message.get("content")
        if role is ChatRole.TOOL:
            call_id = message.get("tool_call_id")
            origin = ToolCall(tool_name=message.get("name") or "", arguments={}, id=call_id)
            return cls(role, (ToolCallResult(str(content or ""), origin),), None, {})
        if role is ChatRole.ASSISTANT:
            tool_calls = [
                ToolCall(
                    tool_name=tc["function"]["name"],
                    arguments=parse_tool_arguments(tc["function"].get("arguments") or "{}"),
                    id=tc.get("id") or str(uuid.uuid4()),
                )
                for tc in message.get("tool_calls") or []
            ]
            return cls.from_assistant(text=content, name=name, tool_calls=tool_calls)
        if not isinstance(content, str):
            content = "\n".join(p.get("text", "") for p in content or [] if p.get("type") == "text")
        return cls(role, (TextContent(content),), name, {})


#: The key of a reply's ``meta`` that keeps the ids a model gave to calls which got new ones: new id -> given id.
GIVEN_CALL_IDS_KEY = "given_tool_call_ids"


def have_own_ids(ids: Sequence[str | None]) -> bool:
    """Whether each of the tool-call ``ids`` is a non-empty string that no other call has."""
    if len(ids) == 1:  # most replies make one call: there is no other id to compare it with
        return isinstance(ids[0], str) and ids[0] != ""
    distinct = set(ids)
    return len(distinct) == len(ids) and all(isinstance(i, str) and i for i in distinct)


def with_unique_call_ids(replies: list[ChatMessage], step: int) -> list[ChatMessage]:
    """``replies`` where every tool call has an id of its own, for the model's step ``step``.

    A decision, a tool result and the model API all name a call by its id, so each call of a step
    needs its own. A call keeps the id the model gave it when it is a non-empty string that no
    earlier call of the step has; any other call (no id, an empty one, or one taken) gets
    ``call_<step>_<position>`` (``_2``, ``_3``... appended while that is taken too), which the
    OpenAI and Anthropic APIs accept. The id the model gave is kept in the reply's ``meta`` under
    ``GIVEN_CALL_IDS_KEY``. Replies whose calls all have ids of their own are returned as they are.
    """
    given = [c.id for reply in replies for c in reply.tool_calls]
    if have_own_ids(given):
        return replies
    taken = {i for i in given if isinstance(i, str) and i}
    seen: set[str] = set()
    position = 0
    renamed_replies = []
    for reply in replies:
        parts: list[ChatMessageContent] = []
        renamed: dict[str, str | None] = {}
        for part in reply._content:
            if not isinstance(part, ToolCall):
                parts.append(part)
                continue
            if isinstance(part.id, str) and part.id and part.id not in seen:
                seen.add(part.id)
                parts.append(part)
            else:
                new_id, suffix = f"call_{step}_{position}", 1
                while new_id in taken or new_id in seen:
                    suffix += 1
                    new_id = f"call_{step}_{position}_{suffix}"
                seen.add(new_id)
                renamed[new_id] = part.id
                parts.append(ToolCall(part.tool_name, part.arguments, new_id, part.extra))
            position += 1
        meta = {**reply._meta, GIVEN_CALL_IDS_KEY: renamed}
        renamed_replies.append(ChatMessage(reply._role, tuple(parts), reply._name, meta) if renamed else reply)
    return renamed_replies


def _openai_part(part: TextContent | ImageContent) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    url = f"data:{part.mime_type or 'image/png'};base64,{part.base64_image}"
    image: dict[str, Any] = {"url": url} if part.detail is None else {"url": url, "detail": part.detail}
    return {"type": "image_url", "image_url": image}


RAW_ARGUMENTS_KEY = "__raw__"


def parse_tool_arguments(raw: str) -> dict[str, Any]:
    """Parse the JSON arguments of a tool call; keep unparsable text under ``__raw__``."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {RAW_ARGUMENTS_KEY: raw}
    return parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS_KEY: raw}


@dataclass(frozen=True, slots=True)
class StreamingChunk:
    """A piece of a streamed reply (text delta, tool call, or a finished tool's result)."""

    content: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    index: int | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_result: ToolCallResult | None = None
    start: bool = False
    finish_reason: str | None = None
    reasoning: ReasoningContent | None = None


#: Called with each streamed chunk; under ``run_async`` it may also be a coroutine function.
StreamingCallback = Callable[[StreamingChunk], Awaitable[None] | None]
