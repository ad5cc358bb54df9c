"""An agent whose payments wait for a person's approval, with a snapshot store, for the AG-UI tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy
from agentfsm.stores import SQLiteSnapshotStore

PAID: list[str] = []


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment in EUR."""
    PAID.append(f"{to}:{amount}")
    return f"paid {amount} EUR to {to}"


def payment_script() -> list[ChatMessage | str]:
    """Text, then a payment for approval; then an answer that reads the payment's result."""
    return [
        ChatMessage.from_assistant("I will pay Ann.", tool_calls=[ToolCall("pay", {"to": "ann", "amount": 30}, "p1")]),
        "Done: paid 30 EUR to Ann.",
    ]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteSnapshotStore]:
    runs = SQLiteSnapshotStore(tmp_path / "runs.db")
    yield runs
    runs.close()


@pytest.fixture
def agent(store: SQLiteSnapshotStore, tmp_path: Path) -> Agent:
    PAID.clear()
    return Agent(
        chat_generator=ScriptedChatGenerator(payment_script()),
        tools=[pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(tmp_path))},
        snapshot_store=store,
        state_schema={"cart": {"type": list}},
    )
