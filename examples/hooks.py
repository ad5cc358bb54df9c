"""Hooks: a research agent whose hooks build its context, audit its tool calls and make it search.

Run it with ``python examples/hooks.py`` (the scripted model: no API key, no network).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from agentfsm import Agent, ChatMessage, State, ToolCall, hook, replace_values, tool
from agentfsm.generators import ScriptedChatGenerator


@tool
def search(query: Annotated[str, "The search query"]) -> str:
    """Search the web."""
    return "Fusion startups reported net-energy-gain milestones this year."


@hook
def build_context(state: State) -> None:
    """before_llm: put the current time in a system message, once, before the first model call."""
    if state.get("step_count") == 0:
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        system = ChatMessage.from_system(f"You are a research assistant. The current time is {now}.")
        state.set("messages", [system, *state.data["messages"]], handler_override=replace_values)


@hook
def audit_tool_calls(state: State) -> None:
    """before_tool: see which tools the model is about to run."""
    pending = state.data["messages"][-1].tool_calls
    print(f"  audit: about to run {[tc.tool_name for tc in pending]}")


@hook
def require_search(state: State) -> None:
    """on_exit: an answer given before searching is no exit; the run goes on."""
    if state.get("tool_call_counts", {}).get("search", 0) == 0:
        print("  require_search: no search yet, sending the model back")
        state.set("messages", [ChatMessage.from_system("Search before answering.")])


@hook
def budget(state: State) -> None:
    """after_llm: stop cleanly once the run has used its token budget."""
    if state.get("token_usage", {}).get("total_tokens", 0) > 1_000:
        state.set("stop_run", "token budget spent")


def scripted_model() -> ScriptedChatGenerator:
    """The replies the model gives, with the token usage a real model would report."""
    usage = {"usage": {"total_tokens": 300}}
    return ScriptedChatGenerator(
        [
            ChatMessage.from_assistant("Fusion is making progress.", meta=usage),
            ChatMessage.from_assistant(tool_calls=[ToolCall("search", {"query": "fusion 2026"})], meta=usage),
            ChatMessage.from_assistant("Startups reported net-energy-gain milestones this year.", meta=usage),
        ]
    )


def main() -> None:
    """Run the agent and show what the hooks did."""
    agent = Agent(
        chat_generator=scripted_model(),
        tools=[search],
        hooks={
            "before_llm": [build_context],
            "after_llm": [budget],
            "before_tool": [audit_tool_calls],
            "on_exit": [require_search],
        },
    )
    result = agent.run([ChatMessage.from_user("What are the latest developments in fusion energy?")])
    print(f"answer: {result['last_message'].text}")
    print(f"exit: {result['exit_reason']}, model calls: {result['step_count']}, tokens: {result['token_usage']}")
    print(agent.draw())


if __name__ == "__main__":
    main()
