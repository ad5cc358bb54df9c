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


CRASH_ON: set[str] = set()


@tool
def flaky(label: str) -> str:
    """Record the call; crash the process-like way (KeyboardInterrupt) when told to."""
    if label in CRASH_ON:
        CRASH_ON.discard(label)
        raise KeyboardInterrupt(f"crash while running {label}")
    SIDE_EFFECTS.append(f"flaky({label})")
    return label.upper()


@tool
def logged_step(label: str) -> str:
    """Append ``label`` to the file named by $AGENTFSM_TEST_LOG; exit the process if it equals $AGENTFSM_TEST_KILL."""
    import os

    if os.environ.get("AGENTFSM_TEST_KILL") == label:
        os._exit(9)
    with open(os.environ["AGENTFSM_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(label + "\n")
    return label


KILL_SCRIPT = [calls(call("logged_step", "s1", label="one"), call("logged_step", "s2", label="two")), "done"]
