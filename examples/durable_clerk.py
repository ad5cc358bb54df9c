"""A durable agent for ``examples/scaling_out.py``: what ``agentfsm worker --agent examples.durable_clerk:durable`` runs.

Every process that starts, runs or reads its runs imports it from here, by module name: the
names of its tools are part of the agent's fingerprint, which a worker checks.
"""

from __future__ import annotations

from typing import Any

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.durable import DurableAgent
from agentfsm.hitl import BreakpointConfirmationStrategy


@tool(idempotent=True)
def balance(account: str) -> str:
    """An account's balance."""
    return f"{account}: 120 EUR"


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment (a person approves each one)."""
    return f"paid {amount} to {to}"


class Clerk:
    """A stand-in model that answers from the conversation, as a real model does (any worker can continue a run)."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        """Pay or look up what the user asks for, then say what came of it."""
        last = messages[-1]
        if last.tool_call_result is not None:
            return {"replies": [ChatMessage.from_assistant(f"Done: {last.tool_call_result.result}.")]}
        words = (last.text or "").split()
        call = ToolCall("pay", {"to": words[1], "amount": int(words[2])}) if words[0] == "pay" else None
        call = call or ToolCall("balance", {"account": words[1]})
        return {"replies": [ChatMessage.from_assistant(tool_calls=[call])]}


#: The agent, durable.
durable = DurableAgent(
    Agent(
        chat_generator=Clerk(),
        tools=[balance, pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy("")},
    ),
    "clerk",
)
