"""Record a model's answers to a cassette once, then replay them in tests: no network, no key.

Run it with ``python examples/cassette.py``. A ScriptedChatGenerator stands in for the real
model here; with one, record with ``OpenAIChatGenerator(...)`` (or Anthropic's) in its place.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import CassetteChatGenerator, CassetteMismatchError, ScriptedChatGenerator


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def real_model() -> ScriptedChatGenerator:
    """Stands in for a real model client in this example."""
    return ScriptedChatGenerator([ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": 2, "b": 3})]), "5."])


def main() -> None:
    """Record, replay, and see a changed agent caught."""
    question = [ChatMessage.from_user("What is 2 + 3?")]
    with tempfile.TemporaryDirectory() as tmp:
        cassette = Path(tmp) / "add.json"
        recorded = Agent(chat_generator=CassetteChatGenerator(cassette, real_model(), "record"), tools=[add]).run(
            question
        )
        print(f"recorded {cassette.name}: {recorded['last_message'].text}")

        replayed = Agent(chat_generator=CassetteChatGenerator(cassette), tools=[add]).run(question)
        print(
            f"replayed: {replayed['last_message'].text} (same conversation: {replayed['messages'] == recorded['messages']})"
        )

        changed = Agent(chat_generator=CassetteChatGenerator(cassette), tools=[add], system_prompt="Be terse.")
        try:
            changed.run(question)
        except CassetteMismatchError as exc:
            print(f"a changed agent is caught: {str(exc)[:80]}...")


if __name__ == "__main__":
    main()
