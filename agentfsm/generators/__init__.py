"""Model clients. ``ScriptedChatGenerator`` is the embedded default: no network, no API key."""

from agentfsm.generators.base import ChatGenerator
from agentfsm.generators.scripted import ScriptedChatGenerator
from agentfsm.messages import StreamingCallback

__all__ = ["ChatGenerator", "ScriptedChatGenerator", "StreamingCallback"]
