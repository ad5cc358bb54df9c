"""A chat that goes on across runs: each message is the next turn of one thread, kept in an SQLite file.

Two turns of thread ``chat``: the second continues the first's conversation and State. Then the
thread is forked at its first turn, the branch asked something else, and both read back turn by
turn. No API key needed: the model is scripted.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.threads import turn_messages


@tool(outputs_to_state={"likes": {"source": "like"}})
def remember(like: Annotated[str, "something the user likes"]) -> dict[str, str]:
    """Remember what the user likes."""
    return {"like": like}


def chat_agent(store: SQLiteSnapshotStore) -> Agent:
    """An agent that remembers likes in State, on a scripted model, keeping its threads in ``store``."""
    replies: list[ChatMessage | str] = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("remember", {"like": "tea"}, "c1")]),
        "Noted: you like tea.",
        "You like tea.",
        "On this branch, you asked about coffee instead.",
    ]
    return Agent(
        chat_generator=ScriptedChatGenerator(replies),
        system_prompt="You are a friendly assistant. Be brief.",
        tools=[remember],
        state_schema={"likes": {"type": list[str]}},
        snapshot_store=store,
    )


def main(folder: Path) -> None:
    """Two turns of a thread, a fork at its first turn, and both threads read back."""
    store = SQLiteSnapshotStore(folder / "chat.db")
    agent = chat_agent(store)
    agent.run([ChatMessage.from_user("I like tea.")], thread="chat")
    answer = agent.run([ChatMessage.from_user("What do I like?")], thread="chat")
    print("answer:", answer["last_message"].text, "| likes:", answer["likes"])

    first = store.thread_turns("chat")[0]
    store.fork_thread("chat", first.run_id, new_thread_id="chat-coffee")
    branch = agent.run([ChatMessage.from_user("And coffee?")], thread="chat-coffee")
    print("branch:", branch["last_message"].text)

    for thread in store.threads():
        print(f"thread {thread.thread_id}: {thread.turns} turns, {thread.status}")
        for turn in store.thread_turns(thread.thread_id):
            said = [m.text for m in turn_messages(store, turn) if m.text]
            print(f"  turn {turn.number}: {said}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
