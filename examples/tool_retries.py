"""Tool retries: a flaky tool is run again after a backoff; a timed-out payment is not. No API key.

Run it: ``python examples/tool_retries.py``. The scripted model asks for a page from a server that
drops two connections, then for a payment whose server answers too late: the page's call is
retried (each attempt an edge of the call machine), the payment's is not (it is not idempotent, and
its effect may have happened), and the model reads both results.
"""

from __future__ import annotations

import threading

from agentfsm import Agent, ChatMessage, Retry, ToolCall, tool
from agentfsm.events import CallChanged, Event
from agentfsm.generators import ScriptedChatGenerator

DROPS = [ConnectionError("connection reset"), ConnectionError("connection reset")]
SLOW_BANK = threading.Event()


@tool(retry=Retry(attempts=3, backoff=0.05, on=(ConnectionError, TimeoutError)), idempotent=True)
def fetch(url: str) -> str:
    """Fetch a page; the server drops connections now and then."""
    if DROPS:
        raise DROPS.pop()
    return f"<html>the page at {url}</html>"


@tool(timeout=0.1, retry=Retry(attempts=3, on=(TimeoutError,)))
def pay(amount: int) -> str:
    """Pay an amount; the bank answers after the run stopped waiting."""
    SLOW_BANK.wait(0.5)
    return f"paid {amount}"


def main() -> None:
    """Run the agent and print each call's edges and the results the model read."""
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("fetch", {"url": "https://example.com"}, "page")]),
            ChatMessage.from_assistant(tool_calls=[ToolCall("pay", {"amount": 10}, "payment")]),
            "The page is fetched; the payment's outcome is unknown: check with the bank before paying again.",
        ]
    )
    agent = Agent(chat_generator=model, tools=[fetch, pay])
    edges: list[str] = []

    def on_event(event: Event) -> None:
        if isinstance(event, CallChanged):
            edges.append(f"{event.call}: {event.source} --{event.trigger}--> {event.dest}")

    result = agent.run([ChatMessage.from_user("Fetch example.com, then pay 10.")], on_event=on_event)
    print("\n".join(edges))
    for message in result["messages"]:
        if message.tool_call_result is not None:
            print(f"{message.tool_call_result.origin.tool_name}: {message.tool_call_result.result[:80]}")
    print(result["last_message"].text)
    assert sum("--retry-->" in e for e in edges) == 2 and not any(
        e.startswith("payment") and "retry" in e for e in edges
    )


if __name__ == "__main__":
    main()
