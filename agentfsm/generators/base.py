"""The ChatGenerator protocol: what the agent needs from a model client."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agentfsm.messages import ChatMessage, StreamingCallback
from agentfsm.tools.tool import Tool


@runtime_checkable
class ChatGenerator(Protocol):
    """A model client: takes the conversation and the tools, returns ``{"replies": [ChatMessage, ...]}``.

    Generators may also define ``async def run_async(...)`` with the same parameters (used by
    ``Agent.run_async``; without it the sync ``run`` is called in a worker thread), ``warm_up()``,
    and ``to_dict()`` / ``from_dict()`` for serialization.
    """

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: StreamingCallback | None = None,
        **kwargs: Any,
    ) -> dict[str, list[ChatMessage]]:
        """Produce the model's replies to ``messages``."""
        ...
