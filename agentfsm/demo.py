"""The demo agent: a two-tool assistant on a scripted model (no network, no API key)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from agentfsm.agent import Agent
from agentfsm.generators.scripted import ScriptedChatGenerator
from agentfsm.messages import ChatMessage, ToolCall
from agentfsm.tools.from_function import tool

_TEMPERATURES = {"Berlin": 21.0, "Lisbon": 26.5, "Oslo": 14.0}


@tool
def get_weather(
    city: Annotated[str, "The city to look up"],
    unit: Annotated[Literal["celsius", "fahrenheit"], "Temperature unit"] = "celsius",
) -> dict[str, object]:
    """Current temperature in a city."""
    celsius = _TEMPERATURES.get(city)
    if celsius is None:
        raise ValueError(f"no weather station in {city}")
    value = celsius if unit == "celsius" else celsius * 9 / 5 + 32
    return {"city": city, "temperature": round(value, 1), "unit": unit}


@tool
def calculator(expression: Annotated[str, "Arithmetic with + - * / and parentheses"]) -> float:
    """Evaluate an arithmetic expression."""
    if not set(expression) <= set("0123456789.+-*/() "):
        raise ValueError(f"unsupported characters in {expression!r}")
    return float(eval(expression, {"__builtins__": {}}, {}))  # characters checked above


def demo_script() -> list[ChatMessage]:
    """The replies the scripted model gives, in order."""
    return [
        ChatMessage.from_assistant(
            "Let me look up both cities.",
            tool_calls=[
                ToolCall("get_weather", {"city": "Berlin"}, id="w1"),
                ToolCall("get_weather", {"city": "Lisbon"}, id="w2"),
            ],
        ),
        ChatMessage.from_assistant(tool_calls=[ToolCall("calculator", {"expression": "26.5 - 21.0"}, id="c1")]),
        ChatMessage.from_assistant("Lisbon is 26.5 °C and Berlin 21.0 °C: Lisbon is 5.5 °C warmer."),
    ]


def demo_agent(chat_generator: Any = None, **agent_kwargs: Any) -> Agent:
    """A fresh demo agent, on its script unless ``chat_generator`` is given; ``agent_kwargs`` add Agent options."""
    return Agent(
        chat_generator=chat_generator if chat_generator is not None else ScriptedChatGenerator(demo_script()),
        tools=[get_weather, calculator],
        system_prompt="You are a concise weather assistant.",
        max_agent_steps=5,
        **agent_kwargs,
    )


DEMO_QUESTION = "How much warmer is it in Lisbon than in Berlin?"
