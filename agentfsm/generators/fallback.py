"""FallbackChatGenerator: several chat generators tried in order until one answers (Haystack's name and output).

Each generator keeps its own retries, timeouts and deadline; the fallback moves on when one
raises. The output and every reply's ``meta`` say which one answered:
``successful_chat_generator_index``, ``successful_chat_generator_class``, ``total_attempts`` and
``failed_chat_generators`` (the class names of those that failed before it).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import Any

from agentfsm.errors import (
    AllChatGeneratorsFailedError,
    ConfigurationError,
    ConfigurationTypeError,
    DeserializationError,
    ModelResponseError,
)
from agentfsm.logs import logger
from agentfsm.messages import ChatMessage, StreamingCallback
from agentfsm.serialization import CHAT_GENERATOR, object_from_dict, object_path
from agentfsm.tools.tool import Tool

#: Errors that are the caller's (the messages, tools or arguments given, the configuration): every
#: generator would fail the same way, so they are raised, not passed on to the next generator.
_CALLERS_ERRORS = (ConfigurationError, ConfigurationTypeError)


def _replies(output: Any) -> list[ChatMessage]:
    replies = output.get("replies") if isinstance(output, dict) else None
    if not isinstance(replies, list) or not replies or not all(isinstance(r, ChatMessage) for r in replies):
        raise ModelResponseError(f"The chat generator returned no replies: {str(output)[:200]}")
    return replies


class FallbackChatGenerator:
    """Tries ``chat_generators`` in order; the first that returns replies answers.

    A generator "fails" when it raises an ``Exception`` (a model client error, a bug) or returns no
    replies; when all fail, ``AllChatGeneratorsFailedError`` holds each one's error. A
    ``ConfigurationError`` or ``ConfigurationTypeError`` (bad messages, tools or arguments, a
    missing API key) is the caller's to fix and is raised at once. With streaming, a generator that failed mid-stream may already have handed some
    chunks to the callback before the next one starts.

    Args:
        chat_generators: the generators to try, first to last (at least one).
    """

    def __init__(self, chat_generators: list[Any]) -> None:
        if not isinstance(chat_generators, (list, tuple)) or not chat_generators:
            raise ConfigurationError("chat_generators must be a non-empty list of chat generators.")
        for generator in chat_generators:
            if not callable(getattr(generator, "run", None)):
                raise ConfigurationTypeError(
                    f"Each of chat_generators must have a run() method, got {type(generator).__name__}."
                )
        self.chat_generators = list(chat_generators)

    @property
    def supports_response_format(self) -> bool:
        """Whether each generator takes an output type's ``response_format`` (the agent then passes it on).

        Otherwise the agent shows the final-answer tool, which every generator can call.
        """
        return all(getattr(g, "supports_response_format", False) is True for g in self.chat_generators)

    # -- lifecycle --------------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Warm up every generator that has ``warm_up``."""
        for generator in self.chat_generators:
            warm = getattr(generator, "warm_up", None)
            if callable(warm):
                warm()

    def close(self) -> None:
        """Close every generator that has ``close``."""
        for generator in self.chat_generators:
            close = getattr(generator, "close", None)
            if callable(close):
                close()

    async def close_async(self) -> None:
        """Close every generator, awaiting ``close_async`` where it has one."""
        for generator in self.chat_generators:
            close_async = getattr(generator, "close_async", None)
            close = getattr(generator, "close", None)
            if callable(close_async):
                await close_async()
            elif callable(close):
                close()

    # -- running ----------------------------------------------------------------------------------------

    def _answered(self, index: int, replies: list[ChatMessage], failed: list[str]) -> dict[str, Any]:
        meta = {
            "successful_chat_generator_index": index,
            "successful_chat_generator_class": type(self.chat_generators[index]).__name__,
            "total_attempts": index + 1,
            "failed_chat_generators": list(failed),
        }
        tagged = [dataclasses.replace(r, _meta={**r.meta, **meta}) for r in replies]
        return {"replies": tagged, "meta": meta}

    def _failed(self, index: int, error: Exception, failed: list[str], errors: list[Exception]) -> None:
        name = type(self.chat_generators[index]).__name__
        logger.warning(
            "chat generator failed, trying the next", generator=name, index=index, error=type(error).__name__
        )
        failed.append(name)
        errors.append(error)

    def _all_failed(self, failed: list[str], errors: list[Exception]) -> AllChatGeneratorsFailedError:
        return AllChatGeneratorsFailedError(
            f"All {len(self.chat_generators)} chat generators failed ({', '.join(failed)}); the last error: "
            f"{type(errors[-1]).__name__}: {errors[-1]}",
            errors,
        )

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The replies of the first generator that answers, and ``meta`` saying which one it was."""
        failed: list[str] = []
        errors: list[Exception] = []
        for index, generator in enumerate(self.chat_generators):
            try:
                replies = _replies(
                    generator.run(messages=messages, tools=tools, streaming_callback=streaming_callback, **kwargs)
                )
            except _CALLERS_ERRORS:
                raise
            except Exception as error:
                self._failed(index, error, failed, errors)
                continue
            return self._answered(index, replies, failed)
        raise self._all_failed(failed, errors)

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Like ``run``; a generator without ``run_async`` runs in a worker thread."""
        failed: list[str] = []
        errors: list[Exception] = []
        for index, generator in enumerate(self.chat_generators):
            arguments = {"messages": messages, "tools": tools, "streaming_callback": streaming_callback, **kwargs}
            run_async = getattr(generator, "run_async", None)
            try:
                output = (
                    await run_async(**arguments)
                    if callable(run_async)
                    else await asyncio.to_thread(generator.run, **arguments)
                )
                replies = _replies(output)
            except _CALLERS_ERRORS:
                raise
            except Exception as error:
                self._failed(index, error, failed, errors)
                continue
            return self._answered(index, replies, failed)
        raise self._all_failed(failed, errors)

    # -- serialization ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Serialize the generators, each by its class path and its own ``to_dict``."""
        generators = []
        for generator in self.chat_generators:
            to_dict = getattr(generator, "to_dict", None)
            if not callable(to_dict):
                raise ConfigurationTypeError(
                    f"{type(generator).__name__} has no to_dict(); give it to_dict/from_dict to serialize the fallback."
                )
            generators.append(to_dict())
        return {"type": object_path(type(self)), "data": {"chat_generators": generators}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> FallbackChatGenerator:
        """Invert ``to_dict``; each generator's class is resolved through the allow-list and must be a chat generator.

        Raises:
            DeserializationError: ``data`` is not a serialized fallback, or names a class that is not
                an allowed chat generator.
        """
        body = data.get("data") if isinstance(data, dict) else None
        generators = body.get("chat_generators") if isinstance(body, dict) else None
        if not isinstance(generators, list) or not generators:
            raise DeserializationError(
                "A FallbackChatGenerator's data must be {'chat_generators': [{'type': ..., ...}, ...]}, as to_dict writes it."
            )
        allowed = list(allowed_modules or ())
        return cls([object_from_dict(g, allowed, CHAT_GENERATOR, whole=True) for g in generators])
