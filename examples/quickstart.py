"""Quickstart: a weather agent with two tools on the scripted model (no API key, no network).

Run it with ``python examples/quickstart.py``.
"""

from __future__ import annotations

from typing import Annotated

from agentfsm import Agent, ChatMessage, ToolCall, configure_logging, tool
from agentfsm.generators import ScriptedChatGenerator


@tool
def get_weather(city: Annotated[str, "The city to look up"]) -> dict[str, object]:
    """Current weather in a city."""
    return {"city": city, "temperature": {"Paris": 18, "Rome": 24}.get(city, 20), "sky": "clear"}


@tool(outputs_to_state={"visited": {"source": "city"}})
def plan_visit(city: str) -> dict[str, str]:
    """Plan a visit to a city and remember it in State."""
    return {"city": city, "plan": f"Walk through {city} in the afternoon."}


# The scripted model plays the part of the LLM: one reply per model call.
model = ScriptedChatGenerator(
    [
        ChatMessage.from_assistant(
            tool_calls=[ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})]
        ),
        ChatMessage.from_assistant(tool_calls=[ToolCall("plan_visit", {"city": "Rome"})]),
        "Rome is warmer (24 °C): walk through Rome in the afternoon.",
    ]
)

agent = Agent(
    chat_generator=model,
    tools=[get_weather, plan_visit],
    system_prompt="You plan short city visits.",
    state_schema={"visited": {"type": list[str]}},
)

if __name__ == "__main__":
    configure_logging()  # one structured line per transition, on stderr
    result = agent.run([ChatMessage.from_user("Paris or Rome this afternoon?")])
    print(result["last_message"].text)
    print("visited:", result["visited"])
    print("path:", " -> ".join(["IDLE", *(r.dest.value for r in result.trace)]))
