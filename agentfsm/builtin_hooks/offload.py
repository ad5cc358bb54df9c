"""Offloading: large tool results go to a store; the conversation keeps a reference and a preview.

``ToolResultOffloadHook`` goes on ``after_tool``: a text result of the step longer than
``threshold`` characters is put in its ``ToolResultStore`` and replaced, in the conversation, by
a short message naming its reference, its length and its first ``preview_chars`` characters.
Give the agent ``hook.read_tool()`` (the ``read_offloaded_result(ref, offset, length)`` tool) so
that the model can read any slice back. A reference is the hash of the result, so putting the
same result twice (a resumed run) stores it once.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentfsm.errors import ConfigurationError, ToolInvocationError, check_int
from agentfsm.files import atomic_write
from agentfsm.messages import ChatMessage, ChatRole
from agentfsm.serialization import Slot, object_from_dict, object_path, object_to_dict
from agentfsm.state import State, replace_values
from agentfsm.tools.tool import Tool


def result_ref(text: str) -> str:
    """The reference of an offloaded result: a hash of its text."""
    return "result-" + hashlib.sha256(text.encode()).hexdigest()[:24]


@runtime_checkable
class ToolResultStore(Protocol):
    """Where offloaded tool results are kept, by reference."""

    def put(self, text: str) -> str:
        """Keep ``text``; returns its reference (the same for the same text)."""
        ...

    def get(self, ref: str) -> str:
        """The text kept under ``ref``; ``KeyError`` if there is none."""
        ...


#: Where a document names a tool result store.
TOOL_RESULT_STORE = Slot("a tool result store class (with put() and get())", methods=("put", "get", "from_dict"))


class DirectoryToolResultStore:
    """One text file per result: ``<directory>/<ref>.txt``, written atomically."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def put(self, text: str) -> str:
        """Keep ``text``."""
        ref = result_ref(text)
        path = self.directory / f"{ref}.txt"
        if not path.exists():
            atomic_write(path, text.encode())
        return ref

    def get(self, ref: str) -> str:
        """The text kept under ``ref``."""
        if not ref.startswith("result-") or not ref[7:].isalnum():
            raise KeyError(ref)
        try:
            return (self.directory / f"{ref}.txt").read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KeyError(ref) from None

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"directory": str(self.directory)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DirectoryToolResultStore:
        """Deserialize."""
        return cls(data["directory"])


class SQLiteToolResultStore:
    """Results in one SQLite file (a table ``tool_results(ref, text)``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.execute("CREATE TABLE IF NOT EXISTS tool_results (ref TEXT PRIMARY KEY, text TEXT NOT NULL)")

    def put(self, text: str) -> str:
        """Keep ``text``."""
        ref = result_ref(text)
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO tool_results VALUES (?, ?)", (ref, text))
        return ref

    def get(self, ref: str) -> str:
        """The text kept under ``ref``."""
        with self._lock:
            row = self._db.execute("SELECT text FROM tool_results WHERE ref = ?", (ref,)).fetchone()
        if row is None:
            raise KeyError(ref)
        return str(row[0])

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"path": self.path}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SQLiteToolResultStore:
        """Deserialize."""
        return cls(data["path"])


READ_TOOL_NAME = "read_offloaded_result"


class ReadOffloadedResultTool(Tool):
    """The ``read_offloaded_result(ref, offset=0, length=2000)`` tool: a slice of an offloaded result."""

    def __init__(self, store: ToolResultStore) -> None:
        self.store = store

        def read_offloaded_result(ref: str, offset: int = 0, length: int = 2000) -> str:
            try:
                text = store.get(ref)
            except KeyError:
                raise ToolInvocationError(
                    f"No offloaded result {ref!r}: use the reference the conversation gives."
                ) from None
            return text[max(offset, 0) : max(offset, 0) + max(length, 0)]

        super().__init__(
            name=READ_TOOL_NAME,
            description="Read part of a tool result that was too long to keep in the conversation: "
            "characters offset to offset + length of the result with reference ref.",
            parameters={
                "type": "object",
                "properties": {
                    "ref": {"type": "string", "description": "the reference the conversation gives"},
                    "offset": {"type": "integer", "minimum": 0, "description": "first character (default 0)"},
                    "length": {"type": "integer", "minimum": 1, "description": "how many characters (default 2000)"},
                },
                "required": ["ref"],
            },
            function=read_offloaded_result,
            idempotent=True,
        )

    def to_dict(self) -> dict[str, Any]:
        """Serialize by its store."""
        return {"type": object_path(type(self)), "data": {"store": object_to_dict(self.store)}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Any = None) -> ReadOffloadedResultTool:
        """Deserialize through the serialization allow-list."""
        return cls(object_from_dict(data["data"]["store"], allowed_modules, TOOL_RESULT_STORE))


class ToolResultOffloadHook:
    """An ``after_tool`` hook: the step's text results longer than ``threshold`` characters go to ``store``."""

    points = frozenset({"after_tool"})

    def __init__(self, store: ToolResultStore, threshold: int = 4000, preview_chars: int = 200) -> None:
        if not isinstance(store, ToolResultStore):
            raise ConfigurationError(f"store must be a ToolResultStore (put, get), got {store!r}.")
        self.store = store
        self.threshold = check_int("threshold", threshold, 1)
        self.preview_chars = preview_chars

    def read_tool(self) -> ReadOffloadedResultTool:
        """The tool that reads offloaded results back: give it to the agent."""
        return ReadOffloadedResultTool(self.store)

    def _offloaded(self, message: ChatMessage) -> ChatMessage:
        result = message.tool_call_result
        if result is None or not isinstance(result.result, str) or len(result.result) <= self.threshold:
            return message
        text = result.result
        ref = self.store.put(text)
        note = (
            f"[This result is {len(text)} characters long and was stored as {ref!r}. It begins: "
            f"{text[: self.preview_chars]!r}. Read more with {READ_TOOL_NAME}(ref={ref!r}, offset, length).]"
        )
        return ChatMessage.from_tool(note, result.origin, result.error, meta={**message.meta, "offloaded": ref})

    def run(self, state: State) -> None:
        """Offload the large results of the step that just ran."""
        messages: list[ChatMessage] = state.data.get("messages") or []  # read, never changed in place
        start = len(messages)
        while start > 0 and messages[start - 1].role is ChatRole.TOOL:
            start -= 1
        step = [self._offloaded(m) for m in messages[start:]]
        if any(new is not old for new, old in zip(step, messages[start:], strict=True)):
            state.set("messages", [*messages[:start], *step], handler_override=replace_values)

    def to_dict(self) -> dict[str, Any]:
        """Serialize by the store's ``to_dict``."""
        return {"store": object_to_dict(self.store), "threshold": self.threshold, "preview_chars": self.preview_chars}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Any = None) -> ToolResultOffloadHook:
        """Deserialize through the serialization allow-list."""
        store = object_from_dict(data["store"], allowed_modules, TOOL_RESULT_STORE)
        return cls(store, data["threshold"], data["preview_chars"])
