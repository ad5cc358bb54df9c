"""Model clients.

``ScriptedChatGenerator`` is the embedded default (no network, no API key); ``OpenAIChatGenerator``
talks to OpenAI or any OpenAI-compatible server, ``AnthropicChatGenerator`` to Anthropic, over httpx;
``FallbackChatGenerator`` tries several in order.
"""

from agentfsm.errors import CassetteMismatchError
from agentfsm.generators.anthropic import AnthropicChatGenerator
from agentfsm.generators.base import ChatGenerator
from agentfsm.generators.cassette import CassetteChatGenerator
from agentfsm.generators.fallback import FallbackChatGenerator
from agentfsm.generators.openai import OpenAIChatGenerator
from agentfsm.generators.scripted import ScriptedChatGenerator
from agentfsm.messages import StreamingCallback

__all__ = [
    "AnthropicChatGenerator",
    "CassetteChatGenerator",
    "CassetteMismatchError",
    "ChatGenerator",
    "FallbackChatGenerator",
    "OpenAIChatGenerator",
    "ScriptedChatGenerator",
    "StreamingCallback",
]
