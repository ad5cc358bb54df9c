"""The connection's declared states: undeclared moves are refused, and the docs draw the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentfsm.errors import MachineError
from agentfsm.mcp.connection_states import TRANSITIONS, ConnectionState, mermaid, next_state

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"


def test_declared_moves() -> None:
    assert next_state(ConnectionState.DISCONNECTED, "connect") is ConnectionState.CONNECTING
    assert next_state(ConnectionState.READY, "lost") is ConnectionState.LOST
    assert next_state(ConnectionState.LOST, "connect") is ConnectionState.CONNECTING
    assert all(
        next_state(s, "close") is ConnectionState.CLOSED for s in ConnectionState if s is not ConnectionState.CLOSED
    )


def test_an_undeclared_move_is_refused() -> None:
    with pytest.raises(MachineError, match="cannot 'lost' while connecting"):
        next_state(ConnectionState.CONNECTING, "lost")


def test_every_state_is_reachable_and_left() -> None:
    assert {t.dest for t in TRANSITIONS} | {ConnectionState.DISCONNECTED} == set(ConnectionState)
    assert {t.source for t in TRANSITIONS} == set(ConnectionState)


def test_the_docs_draw_the_table() -> None:
    drawn = re.search(r"```mermaid\n(stateDiagram-v2.*?)\n```", DOCS.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert drawn is not None and drawn.group(1) == mermaid()
