"""Guardrails at every point of a run: redact a tool's result, refuse a call, send a rude answer back.

Runs without an API key (a scripted model): ``python examples/guardrails.py``.
"""

from __future__ import annotations

from typing import Any

from agentfsm import Agent, ChatMessage, GuardrailResult, ToolCall, guardrail, tool
from agentfsm.generators import ScriptedChatGenerator


@tool
def lookup(card: str) -> str:
    """Look a customer up by card."""
    return f"card {card}: Ann Lee, 4111-1111-1111-1111"


@guardrail("tool_result")
def redact_cards(result: Any) -> GuardrailResult:
    """The model never reads a card number."""
    text = str(result.result)
    if "4111" in text:
        return GuardrailResult.rewrite(text.replace("4111-1111-1111-1111", "****"), "card number redacted")
    return GuardrailResult.passed()


@guardrail("tool_call", on_trip="model", tools=["lookup"])
def no_test_cards(call: Any) -> GuardrailResult:
    """Test cards are never looked up: the call gets an error result and never runs."""
    if call.arguments.get("card") == "0000":
        return GuardrailResult.tripwire("test cards are not looked up")
    return GuardrailResult.passed()


@guardrail("output", on_trip="model")
def polite(answer: Any) -> GuardrailResult:
    """A rude answer goes back to the model."""
    return GuardrailResult.tripwire("be polite") if "stupid" in str(answer) else GuardrailResult.passed()


@guardrail("input")
def no_passwords(messages: list[ChatMessage]) -> GuardrailResult:
    """Before every model call: no password reaches the model; the run ends instead."""
    if any("password" in (m.text or "") for m in messages):
        return GuardrailResult.tripwire("a password in the conversation")
    return GuardrailResult.passed()


def main() -> None:
    """Run the agent and show what the guardrails did."""
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(
                tool_calls=[ToolCall("lookup", {"card": "1"}, "c1"), ToolCall("lookup", {"card": "0000"}, "c2")]
            ),
            "a stupid question, but it is Ann Lee",
            "It is Ann Lee.",
        ]
    )
    agent = Agent(chat_generator=model, tools=[lookup], guardrails=[redact_cards, no_test_cards, polite, no_passwords])
    events: list[Any] = []
    result = agent.run([ChatMessage.from_user("Whose cards are 1 and 0000?")], on_event=events.append)
    for event in events:
        if event.kind == "guardrail" and (event.rewrites or event.tripped):
            print(f"{event.point} {event.subject}: rewrites={event.rewrites} tripped={event.tripped} {event.reason}")
    print("answer:", result["last_message"].text, "| exit:", result.exit_reason)
    stopped = Agent(chat_generator=ScriptedChatGenerator(["never said"]), guardrails=[no_passwords])
    print("exit:", stopped.run([ChatMessage.from_user("my password is hunter2")]).exit_reason)


if __name__ == "__main__":
    main()
