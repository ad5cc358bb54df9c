"""Model clients. ``ScriptedChatGenerator`` is the embedded default: no network, no API key."""

from agentfsm.generators.base import ChatGenerator, StreamingCallback
from agentfsm.generators.scripted import ScriptedChatGenerator

__all__ = ["ChatGenerator", "ScriptedChatGenerator", "StreamingCallback"]
