"""Tools and scripts used by several test modules (module-level so that they serialize)."""

from __future__ import annotations

from typing import Annotated

from agentfsm import ChatMessage, ToolCall, tool

SIDE_EFFECTS: list[str] = []


@tool
def add(a: Annotated[int, "first"], b: Annotated[int, "second"]) -> int:
    """Add two integers."""
    SIDE_EFFECTS.append(f"add({a},{b})")
    return a + b


@tool
def fail(reason: str) -> str:
    """Always raises."""
    raise RuntimeError(reason)


@tool
def finish(answer: str) -> str:
    """Give the final answer."""
    return answer


def call(name: str, call_id: str | None = None, **arguments: object) -> ToolCall:
    """A tool call for scripts."""
    return ToolCall(name, dict(arguments), id=call_id)


def calls(*tool_calls: ToolCall, text: str | None = None) -> ChatMessage:
    """An assistant reply with tool calls."""
    return ChatMessage.from_assistant(text, tool_calls=list(tool_calls))


@tool(outputs_to_state={"notes": {"source": "note"}}, inputs_from_state={"prefix": "prefix"})
def remember(text: str, prefix: str = "") -> dict[str, str]:
    """Write a note into State."""
    SIDE_EFFECTS.append(f"remember({text})")
    return {"note": prefix + text}


RESUME_SCHEMA = {"notes": {"type": list[str]}, "prefix": {"type": str}}
