"""The states of an MCP connection and the declared moves between them.

The connection (``agentfsm.mcp.connection``) changes state only through ``next_state``, which
refuses a move this table does not declare; ``mermaid()`` draws the same table for the docs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from agentfsm.errors import MachineError


class ConnectionState(StrEnum):
    """Where one MCP connection stands."""

    #: No session: never connected yet, or the last attempt to connect failed. The next use connects.
    DISCONNECTED = "disconnected"
    #: Starting the server process or reaching the URL, then listing the tools.
    CONNECTING = "connecting"
    #: A session is open: calls go to the server.
    READY = "ready"
    #: The session dropped on its own (the server process died, the stream ended); nothing is
    #: under way: the next use connects again.
    LOST = "lost"
    #: Closed by its owner; using it again connects again.
    CLOSED = "closed"


class ConnectionTransition(NamedTuple):
    """One declared move: ``trigger`` takes a connection from ``source`` to ``dest``."""

    trigger: str
    source: ConnectionState
    dest: ConnectionState


_S = ConnectionState

#: Every move a connection can make. ``close`` is declared from each state but CLOSED.
TRANSITIONS: tuple[ConnectionTransition, ...] = (
    ConnectionTransition("connect", _S.DISCONNECTED, _S.CONNECTING),
    ConnectionTransition("connect", _S.LOST, _S.CONNECTING),
    ConnectionTransition("connect", _S.CLOSED, _S.CONNECTING),
    ConnectionTransition("connected", _S.CONNECTING, _S.READY),
    ConnectionTransition("connect_failed", _S.CONNECTING, _S.DISCONNECTED),
    ConnectionTransition("lost", _S.READY, _S.LOST),
    *(ConnectionTransition("close", state, _S.CLOSED) for state in _S if state is not _S.CLOSED),
)

_NEXT = {(t.source, t.trigger): t.dest for t in TRANSITIONS}


def next_state(state: ConnectionState, trigger: str) -> ConnectionState:
    """The state ``trigger`` leads to from ``state``; ``MachineError`` for a move the table does not declare."""
    try:
        return _NEXT[(state, trigger)]
    except KeyError:
        allowed = sorted(t.trigger for t in TRANSITIONS if t.source is state)
        raise MachineError(
            f"An MCP connection cannot {trigger!r} while {state.value}; from {state.value} it can: {allowed}."
        ) from None


def mermaid() -> str:
    """The table as a Mermaid state diagram."""
    lines = ["stateDiagram-v2", f"    [*] --> {_S.DISCONNECTED.value}"]
    lines += [f"    {t.source.value} --> {t.dest.value}: {t.trigger}" for t in TRANSITIONS]
    return "\n".join(lines)
