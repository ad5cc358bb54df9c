"""Compaction: keep what the model is sent short on long runs, and keep every message it no longer sees.

``CompactionHook`` goes on ``before_llm``. When its trigger fires, its compactor rewrites the
conversation in State (what the next model call is sent); the messages it dropped or replaced are
appended to State's ``compacted_messages`` (``keep_history=True``, the default), in order, so the
whole conversation is ``compacted_messages`` followed by what remains of ``messages`` (a summary
or an omission note aside). With a durable snapshot store the earlier snapshots hold them too.

A *step* here is one model reply and the tool results that answer it. Compactors never separate a
reply's tool calls from their results, and keep every system message and the messages before the
first reply (the task).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agentfsm.errors import ConfigurationError, check_int
from agentfsm.messages import ChatMessage, ChatRole
from agentfsm.serialization import CHAT_GENERATOR, Slot, object_from_dict, object_to_dict
from agentfsm.state import State, replace_values

#: What compaction adds to State: the messages taken out of the conversation, oldest first.
COMPACTED_KEY = "compacted_messages"


def estimate_tokens(messages: Sequence[ChatMessage]) -> int:
    """A fast estimate of the tokens of ``messages``: about four characters a token (no tokenizer, no network)."""
    chars = 0
    for m in messages:
        for text in m.texts:
            chars += len(text)
        for call in m.tool_calls:
            chars += len(call.tool_name) + len(str(call.arguments))
        for result in m.tool_call_results:
            chars += len(str(result.result))
    return chars // 4 + 4 * len(messages)


class MessageCount:
    """Trigger: the conversation holds more than ``max_messages`` messages."""

    def __init__(self, max_messages: int) -> None:
        self.max_messages = check_int("max_messages", max_messages, 2)

    def __call__(self, messages: Sequence[ChatMessage]) -> bool:
        """Whether to compact."""
        return len(messages) > self.max_messages

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"max_messages": self.max_messages}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MessageCount:
        """Deserialize."""
        return cls(**data)


class EstimatedTokens:
    """Trigger: the conversation's estimated tokens (``estimate_tokens``) pass ``max_tokens``."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = check_int("max_tokens", max_tokens, 1)

    def __call__(self, messages: Sequence[ChatMessage]) -> bool:
        """Whether to compact."""
        return estimate_tokens(messages) > self.max_tokens

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"max_tokens": self.max_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EstimatedTokens:
        """Deserialize."""
        return cls(**data)


@runtime_checkable
class Compactor(Protocol):
    """Rewrites a conversation: returns the new one (kept messages are the same objects), or None to leave it."""

    def compact(self, messages: list[ChatMessage]) -> list[ChatMessage] | None:
        """The shorter conversation."""
        ...


#: Where a document names a compactor, and a trigger (called with the messages, it says when to compact).
COMPACTOR = Slot("a compactor class (with compact())", methods=("compact", "from_dict"))
TRIGGER = Slot("a compaction trigger class (called with the messages)", methods=("__call__", "from_dict"))

#: The ``meta`` key of the messages compaction writes (an omission note, a summary).
NOTE_META = "compaction"


def is_note(message: ChatMessage) -> bool:
    """Whether ``message`` was written by a compaction (an omission note or a summary)."""
    return NOTE_META in message.meta


def split_steps(messages: Sequence[ChatMessage]) -> tuple[list[ChatMessage], list[list[ChatMessage]]]:
    """The messages before the first model reply (the task), and the steps after it.

    A step starts at an assistant message and holds what follows until the next one (its tool
    results, and any user message given in between). System messages and earlier compactions'
    notes are left out: see ``_rebuilt``.
    """
    head: list[ChatMessage] = []
    steps: list[list[ChatMessage]] = []
    for m in messages:
        if m.role is ChatRole.SYSTEM or is_note(m):
            continue
        if m.role is ChatRole.ASSISTANT:
            steps.append([m])
        elif steps:
            steps[-1].append(m)
        else:
            head.append(m)
    return head, steps


def _notes(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    return [m for m in messages if is_note(m)]


def _note(text: str, **details: Any) -> ChatMessage:
    return ChatMessage.from_user(text, meta={NOTE_META: details})


def _rebuilt(
    messages: list[ChatMessage], head: list[ChatMessage], middle: list[ChatMessage], kept: list[list[ChatMessage]]
) -> list[ChatMessage]:
    """The system messages, the task, what stands for the old steps (``middle``), then the steps kept."""
    systems = [m for m in messages if m.role is ChatRole.SYSTEM]
    return [*systems, *head, *middle, *(m for step in kept for m in step)]


class SlidingWindowCompactor:
    """Drops whole old steps, keeping the last ``min_keep_steps``; an ``omission_note`` (a user message) says how many messages went.

    ``{count}`` in the note is replaced by that number, counting earlier compactions too (one note
    stands for them all); ``omission_note=None`` adds no note.
    """

    def __init__(
        self, min_keep_steps: int = 1, omission_note: str | None = "[{count} earlier messages were left out here.]"
    ) -> None:
        self.min_keep_steps = check_int("min_keep_steps", min_keep_steps, 1)
        self.omission_note = omission_note

    def compact(self, messages: list[ChatMessage]) -> list[ChatMessage] | None:
        """Drop every step but the last ``min_keep_steps``."""
        head, steps = split_steps(messages)
        dropped = steps[: -self.min_keep_steps]
        if not dropped:
            return None
        earlier = sum(n.meta[NOTE_META].get("omitted", 0) for n in _notes(messages))
        count = earlier + sum(len(step) for step in dropped)
        note = [] if self.omission_note is None else [_note(self.omission_note.format(count=count), omitted=count)]
        return _rebuilt(messages, head, note, steps[-self.min_keep_steps :])

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"min_keep_steps": self.min_keep_steps, "omission_note": self.omission_note}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SlidingWindowCompactor:
        """Deserialize."""
        return cls(**data)


class ToolResultPruningCompactor:
    """Shortens the tool results of all but the last ``min_keep_steps`` steps to ``max_chars`` characters.

    A shortened result says how many characters were cut. Results already short enough, and
    results that are not text, stay as they are.
    """

    def __init__(self, max_chars: int = 200, min_keep_steps: int = 1) -> None:
        self.max_chars = check_int("max_chars", max_chars, 0)
        self.min_keep_steps = check_int("min_keep_steps", min_keep_steps, 1)

    def _pruned(self, message: ChatMessage) -> ChatMessage:
        result = message.tool_call_result
        if result is None or not isinstance(result.result, str) or len(result.result) <= self.max_chars:
            return message
        cut = len(result.result) - self.max_chars
        text = f"{result.result[: self.max_chars]}... [{cut} more characters pruned]"
        return ChatMessage.from_tool(text, result.origin, result.error, meta=dict(message.meta))

    def compact(self, messages: list[ChatMessage]) -> list[ChatMessage] | None:
        """Shorten the old tool results."""
        head, steps = split_steps(messages)
        old = steps[: -self.min_keep_steps]
        pruned = [[self._pruned(m) for m in step] for step in old]
        if all(a is b for step, new in zip(old, pruned, strict=True) for a, b in zip(step, new, strict=True)):
            return None
        middle = [*_notes(messages), *(m for step in pruned for m in step)]
        return _rebuilt(messages, head, middle, steps[-self.min_keep_steps :])

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"max_chars": self.max_chars, "min_keep_steps": self.min_keep_steps}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResultPruningCompactor:
        """Deserialize."""
        return cls(**data)


SUMMARY_PROMPT = (
    "Summarize the conversation below for the assistant that will continue it: the task, what was "
    "done, the results that matter (numbers, names, decisions) and what is left to do. Be brief."
)


def transcript(messages: Sequence[ChatMessage]) -> str:
    """The messages as plain text, one line a part, for a summarizing model."""
    lines = []
    for m in messages:
        for text in m.texts:
            lines.append(f"{m.role.value}: {text}")
        for call in m.tool_calls:
            lines.append(f"{m.role.value} called {call.tool_name}({call.arguments})")
        for result in m.tool_call_results:
            lines.append(f"result of {result.origin.tool_name}: {result.result}")
    return "\n".join(lines)


class SummarizationCompactor:
    """Replaces all but the last ``min_keep_steps`` steps by a summary that ``chat_generator`` writes.

    The summary is a user message starting with ``summary_prefix``; the next compaction summarizes
    it again with the steps after it. The model is called from the hook, once per compaction.
    """

    def __init__(
        self,
        chat_generator: Any,
        min_keep_steps: int = 1,
        prompt: str = SUMMARY_PROMPT,
        summary_prefix: str = "Summary of the conversation so far:",
    ) -> None:
        if not callable(getattr(chat_generator, "run", None)):
            raise ConfigurationError(f"chat_generator must have run(messages=...), got {chat_generator!r}.")
        self.chat_generator = chat_generator
        self.min_keep_steps = check_int("min_keep_steps", min_keep_steps, 1)
        self.prompt = prompt
        self.summary_prefix = summary_prefix

    def compact(self, messages: list[ChatMessage]) -> list[ChatMessage] | None:
        """Summarize the old steps."""
        head, steps = split_steps(messages)
        old = steps[: -self.min_keep_steps]
        if not old:
            return None
        told = transcript([*_notes(messages), *(m for s in old for m in s)])
        asked = [ChatMessage.from_system(self.prompt), ChatMessage.from_user(told)]
        replies = self.chat_generator.run(messages=asked)["replies"]
        summary = _note(f"{self.summary_prefix}\n{replies[0].text or ''}", summary=True)
        return _rebuilt(messages, head, [summary], steps[-self.min_keep_steps :])

    def to_dict(self) -> dict[str, Any]:
        """Serialize; the chat generator by its own ``to_dict``."""
        return {
            "chat_generator": object_to_dict(self.chat_generator),
            "min_keep_steps": self.min_keep_steps,
            "prompt": self.prompt,
            "summary_prefix": self.summary_prefix,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Sequence[str] | None = None) -> SummarizationCompactor:
        """Deserialize through the serialization allow-list."""
        model = object_from_dict(data["chat_generator"], allowed_modules, CHAT_GENERATOR)
        return cls(model, **{k: v for k, v in data.items() if k != "chat_generator"})


class CompactionHook:
    """A ``before_llm`` hook: when ``trigger(messages)`` holds, ``compactor`` rewrites the conversation.

    ``trigger``: ``MessageCount(n)`` or ``EstimatedTokens(n)`` (any callable of the messages works,
    but only those two serialize). ``keep_history``: the messages taken out go to State's
    ``compacted_messages`` (declared by the hook), so nothing given is lost; without it, only a
    durable snapshot store's earlier snapshots keep them (and its new snapshots stay small: State
    is stored whole at every transition).
    """

    points = frozenset({"before_llm"})

    def __init__(self, compactor: Compactor, trigger: Any, keep_history: bool = True) -> None:
        if not isinstance(compactor, Compactor):
            raise ConfigurationError(f"compactor must have compact(messages), got {compactor!r}.")
        if not callable(trigger):
            raise ConfigurationError(
                f"trigger must be MessageCount(n), EstimatedTokens(n) or a callable, got {trigger!r}."
            )
        self.compactor = compactor
        self.trigger = trigger
        self.keep_history = keep_history

    @property
    def state_schema(self) -> dict[str, Any]:
        """The State key this hook writes (the agent adds it to its schema)."""
        return {COMPACTED_KEY: {"type": list[ChatMessage]}} if self.keep_history else {}

    def run(self, state: State) -> None:
        """Compact the conversation when the trigger holds."""
        messages: list[ChatMessage] = state.data.get("messages") or []  # read, never changed in place
        if not self.trigger(messages):
            return
        compacted = self.compactor.compact(list(messages))
        if compacted is None:
            return
        if self.keep_history:  # what the conversation no longer holds, but the notes compaction wrote
            kept = {id(m) for m in compacted}
            state.set(COMPACTED_KEY, [m for m in messages if id(m) not in kept and not is_note(m)])
        state.set("messages", compacted, handler_override=replace_values)

    def to_dict(self) -> dict[str, Any]:
        """Serialize the compactor and the trigger by their classes' ``to_dict``."""
        return {
            "compactor": object_to_dict(self.compactor),
            "trigger": object_to_dict(self.trigger),
            "keep_history": self.keep_history,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Sequence[str] | None = None) -> CompactionHook:
        """Deserialize through the serialization allow-list."""
        return cls(
            object_from_dict(data["compactor"], allowed_modules, COMPACTOR),
            object_from_dict(data["trigger"], allowed_modules, TRIGGER),
            data.get("keep_history", True),
        )
