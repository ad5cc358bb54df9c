"""CassetteChatGenerator: record a model's exchanges to a JSON file, and replay them, deterministically.

Record once against a real model, then replay in tests: no network, no key, the same replies in
the same order. A replayed request that differs from the recorded one (other messages or tools)
raises ``CassetteMismatchError`` saying where, so a change in the agent's behaviour is caught.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Literal

import orjson

from agentfsm.errors import CassetteMismatchError, ConfigurationError
from agentfsm.files import atomic_write, read_file
from agentfsm.messages import ChatMessage, StreamingCallback, StreamingChunk
from agentfsm.serialization import CHAT_GENERATOR, object_from_dict, object_path, object_to_dict
from agentfsm.tools.tool import Tool

CASSETTE_VERSION = 1


def _request(messages: list[ChatMessage], tools: list[Tool] | None) -> dict[str, Any]:
    """What a request is compared by: each message's role and content (not its metadata), and the tool names."""
    return {
        "messages": [{k: v for k, v in m.to_dict().items() if k != "meta"} for m in messages],
        "tools": [t.name for t in tools or []],
    }


class CassetteChatGenerator:
    """A model client that records to a cassette file, or replays from it.

    In ``"record"`` mode it calls ``generator`` and appends each exchange to ``path``; in ``"replay"``
    mode it answers from ``path`` in order, without a model.
    """

    def __init__(
        self, path: str | os.PathLike[str], generator: Any = None, mode: Literal["record", "replay"] = "replay"
    ) -> None:
        if mode not in ("record", "replay"):
            raise ConfigurationError(f"mode must be 'record' or 'replay', got {mode!r}.")
        if mode == "record" and generator is None:
            raise ConfigurationError(
                "Recording needs the generator to record: CassetteChatGenerator(path, generator, 'record')."
            )
        self.path = Path(path)
        self.generator = generator
        self.mode = mode
        self._exchanges: list[dict[str, Any]] = []
        self._position = 0
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        if self.mode == "replay":
            data = orjson.loads(read_file(self.path, "cassette"))
            if not isinstance(data, dict) or data.get("version") != CASSETTE_VERSION:
                raise ConfigurationError(f"{self.path} is not a cassette of version {CASSETTE_VERSION}.")
            self._exchanges = list(data["exchanges"])
        self._loaded = True

    def warm_up(self) -> None:
        """Read the cassette (replay) or warm the recorded generator up (record)."""
        self._load()
        warm = getattr(self.generator, "warm_up", None)
        if self.mode == "record" and callable(warm):
            warm()

    def close(self) -> None:
        """Close the recorded generator."""
        close = getattr(self.generator, "close", None)
        if callable(close):
            close()

    def _replay(self, request: dict[str, Any]) -> list[ChatMessage]:
        self._load()
        if self._position >= len(self._exchanges):
            raise CassetteMismatchError(
                f"The cassette {self.path} holds {len(self._exchanges)} exchanges; call {self._position + 1} asked for another."
            )
        recorded = self._exchanges[self._position]
        if recorded["request"] != request:
            raise CassetteMismatchError(
                f"Request {self._position + 1} differs from the one recorded in {self.path}: {_difference(recorded['request'], request)}"
            )
        self._position += 1
        return [ChatMessage.from_dict(r) for r in recorded["replies"]]

    def _record(self, request: dict[str, Any], output: dict[str, list[ChatMessage]]) -> None:
        self._exchanges.append({"request": request, "replies": [r.to_dict() for r in output["replies"]]})
        document = {"version": CASSETTE_VERSION, "exchanges": self._exchanges}
        atomic_write(self.path, orjson.dumps(document, option=orjson.OPT_INDENT_2))

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Record (call the generator, keep the exchange) or replay (the next recorded reply)."""
        request = _request(messages, tools)
        if self.mode == "record":
            output: dict[str, list[ChatMessage]] = self.generator.run(
                messages=messages, tools=tools, streaming_callback=streaming_callback, **kwargs
            )
            self._record(request, output)
            return output
        replies = self._replay(request)
        if streaming_callback is not None:
            for chunk in _chunks(replies):
                streaming_callback(chunk)
        return {"replies": replies}

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Async twin of ``run``."""
        request = _request(messages, tools)
        if self.mode == "record":
            run_async = getattr(self.generator, "run_async", None)
            if run_async is None:
                raise ConfigurationError("Recording under run_async needs a generator with run_async.")
            output: dict[str, list[ChatMessage]] = await run_async(
                messages=messages, tools=tools, streaming_callback=streaming_callback, **kwargs
            )
            self._record(request, output)
            return output
        replies = self._replay(request)
        if streaming_callback is not None:
            for chunk in _chunks(replies):
                pending = streaming_callback(chunk)
                if inspect.isawaitable(pending):
                    await pending
        return {"replies": replies}

    def to_dict(self) -> dict[str, Any]:
        """Serialize: the path, the mode and (recording) the generator."""
        generator = object_to_dict(self.generator) if self.generator is not None else None
        return {
            "type": object_path(type(self)),
            "data": {"path": str(self.path), "mode": self.mode, "generator": generator},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Any = None) -> CassetteChatGenerator:
        """Invert ``to_dict``."""
        body = data["data"]
        inner = body.get("generator")
        generator = object_from_dict(inner, allowed_modules, CHAT_GENERATOR) if inner is not None else None
        return cls(body["path"], generator, body["mode"])


def _chunks(replies: list[ChatMessage]) -> list[StreamingChunk]:
    """A replayed reply streamed as one text chunk, its tool calls, and a final chunk."""
    chunks = []
    for reply in replies:
        if reply.text:
            chunks.append(StreamingChunk(content=reply.text, index=0, start=True))
        if reply.tool_calls:
            chunks.append(StreamingChunk(tool_calls=reply.tool_calls))
        finish = reply.meta.get("finish_reason")
        chunks.append(StreamingChunk(finish_reason=finish, meta={"finish_reason": finish}))
    return chunks


def _difference(recorded: dict[str, Any], asked: dict[str, Any]) -> str:
    if recorded["tools"] != asked["tools"]:
        return f"the tools were {recorded['tools']}, now {asked['tools']}."
    for i, (then, now) in enumerate(zip(recorded["messages"], asked["messages"], strict=False)):
        if then != now:
            return f"message {i} was {then}, now {now}."
    return f"the recording has {len(recorded['messages'])} messages, the request {len(asked['messages'])}."
