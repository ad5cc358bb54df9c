"""Two agents talking A2A: an assistant delegates a payment to a payments agent that asks for approval first.

Run it with ``python examples/a2a_agents.py`` (scripted models: no API key; both agents on 127.0.0.1).
The payments agent is served as an A2A server (``agentfsm.a2a.create_app``); the assistant calls it
through an ``A2AAgentTool``. The payments agent pauses for approval of its payment (its task goes
``input-required``), so the assistant's run pauses too, waiting on its delegation; approving that
call relays the approval, the payment is made, and the assistant answers with the remote's reply.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.a2a import A2AAgentTool, create_app
from agentfsm.errors import HITLBreakpointException
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from agentfsm.stores import SQLiteSnapshotStore

PAID: list[str] = []


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment in EUR."""
    PAID.append(f"{to}:{amount}")
    return f"paid {amount} EUR to {to}"


def payments_agent(folder: Path) -> Agent:
    """The remote agent: it pays, once a person approved the payment."""
    script = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("pay", {"to": "ann", "amount": 30}, "pay-1")]),
        "Paid Ann 30 EUR.",
    ]
    return Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[pay],
        system_prompt="You make payments.",
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(folder))},
        snapshot_store=SQLiteSnapshotStore(folder / "payments.db"),
    )


def assistant(payments_url: str) -> tuple[Agent, A2AAgentTool]:
    """The calling agent: it hands payments to the remote agent and tells the user what it said."""
    payments = A2AAgentTool(payments_url, "payments", "Makes payments; say who gets how much.", timeout=30)
    script = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("payments", {"request": "Pay Ann 30 EUR."}, "ask-1")]),
        "The payments agent confirmed: Ann has her 30 EUR.",
    ]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[payments],
        # The relay lets the remote's pause pause this run: a person answers here.
        confirmation_strategies={payments.name: payments.relay},
    )
    return agent, payments


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_in_thread(app: object, port: int) -> uvicorn.Server:
    """Serve ``app`` on 127.0.0.1:``port`` in a thread, once the port answers."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the payments agent did not start") from None
            time.sleep(0.05)


def main() -> None:
    """Start the payments agent, delegate to it, approve its payment through the assistant's pause."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"  # the card tells callers where the agent's JSON-RPC endpoint is
    server = serve_in_thread(create_app(payments_agent(Path(tempfile.mkdtemp())), name="payments", url=url), port)
    try:
        agent, payments = assistant(url)
        try:
            agent.run([ChatMessage.from_user("Please get Ann her 30 EUR.")])
        except HITLBreakpointException as paused:
            snapshot = paused.snapshot
        [question] = asyncio.run(payments.remote_questions(snapshot, "ask-1"))
        print("the payments agent asks:", question["message"])
        print("paid before the approval:", PAID)
        result = agent.run(snapshot=snapshot, decisions=[ToolExecutionDecision("payments", True, "ask-1")])
        print("paid after the approval:", PAID)
        print("assistant:", result["last_message"].text)
    finally:
        server.should_exit = True


if __name__ == "__main__":
    main()
