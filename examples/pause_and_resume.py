"""Pause a run before its tools run, store the snapshot as a file, and resume it in a fresh agent.

Run it with ``python examples/pause_and_resume.py`` (no API key, no network).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentfsm import Agent, AgentSnapshot, Breakpoint, BreakpointException, ChatMessage, Phase, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator


@tool
def transfer(amount: int, to: str) -> str:
    """Transfer money (the step a reviewer wants to see before it happens)."""
    print(f"  -> transferring {amount} to {to}")
    return f"sent {amount} to {to}"


def make_agent() -> Agent:
    """The example agent, on a fresh scripted model."""
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("transfer", {"amount": 30, "to": "ann"})]),
            "Done: 30 sent to Ann.",
        ]
    )
    return Agent(chat_generator=model, tools=[transfer])


if __name__ == "__main__":
    folder = Path(tempfile.mkdtemp())
    agent = make_agent()
    try:
        agent.run(
            [ChatMessage.from_user("Send Ann 30")],
            break_point=Breakpoint(phase=Phase.TOOL_RUN, snapshot_file_path=str(folder)),
        )
    except BreakpointException as paused:
        print(paused)
        path = paused.snapshot_file_path
    assert path is not None
    snapshot = AgentSnapshot.from_file(path)
    print(f"pending: {[(c['tool_name'], c['arguments']) for c in snapshot.pending_tool_calls]}")

    # Later, maybe in another process: rebuild the agent from its configuration and resume.
    fresh = Agent.from_dict(agent.to_dict(), allowed_modules=[__name__])
    result = fresh.run(snapshot=snapshot)
    print(result["last_message"].text)
