"""A remote agent whose payments wait for approval, served as an A2A server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.a2a import create_app
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy
from agentfsm.stores import SQLiteSnapshotStore
from tests.servers import free_port, serving

PAID: list[str] = []


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment in EUR."""
    PAID.append(f"{to}:{amount}")
    return f"paid {amount} EUR to {to}"


def payments_agent(store: SQLiteSnapshotStore, folder: Path, script: list[Any] | None = None) -> Agent:
    """Pays Ann 30 EUR once approved, then says so."""
    script = script or [
        ChatMessage.from_assistant("Paying Ann.", tool_calls=[ToolCall("pay", {"to": "ann", "amount": 30}, "p1")]),
        "Paid Ann 30 EUR.",
    ]
    return Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[pay],
        system_prompt="You pay people.",
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(folder))},
        snapshot_store=store,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteSnapshotStore]:
    runs = SQLiteSnapshotStore(tmp_path / "remote.db")
    yield runs
    runs.close()


@pytest.fixture
def remote(store: SQLiteSnapshotStore, tmp_path: Path) -> Agent:
    PAID.clear()
    return payments_agent(store, tmp_path)


@pytest.fixture
def served(remote: Agent) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(create_app(remote, name="payments", url=url), port=port):
        yield url


def model_calls(agent: Agent) -> int:
    return len(agent.chat_generator.calls)  # type: ignore[attr-defined]
