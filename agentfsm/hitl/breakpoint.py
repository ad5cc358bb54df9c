"""Reading a paused run's pending tool calls out of its snapshot, to show them to a person."""

from __future__ import annotations

from typing import Any

from agentfsm.snapshot import AgentSnapshot


def get_tool_calls_and_descriptions_from_snapshot(
    agent_snapshot: AgentSnapshot, breakpoint_tool_only: bool = True
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The snapshot's pending tool calls (``tool_name``, ``arguments``, ``id``) and the descriptions of their tools.

    With ``breakpoint_tool_only`` only the call the run paused for is returned (for a confirmation
    pause: the first call waiting for a decision; for a tool breakpoint naming a tool: that tool's calls).
    """
    bp = agent_snapshot.break_point or {}
    calls: list[dict[str, Any]] = [dict(c) for c in agent_snapshot.pending_tool_calls]
    if breakpoint_tool_only:
        if bp.get("tool_call_id") is not None:
            calls = [c for c in calls if c.get("id") == bp["tool_call_id"]]
        elif bp.get("tool_name") is not None:
            calls = [c for c in calls if c["tool_name"] == bp["tool_name"]]
    described: dict[str, str] = bp.get("tool_descriptions") or {}
    return calls, {c["tool_name"]: described.get(c["tool_name"], "") for c in calls}
