"""A durable run: every transition is recorded in SQLite; after a crash the run resumes where it was.

Run it with ``python examples/durable_run.py`` (no API key, no network).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore

crash_once = {"lookup_b": True}
done: list[str] = []


# Looking a key up twice does no harm: a call cut short by a crash may run again when the run resumes
# (a tool that is not idempotent would make the resumed run stop and ask what to do with that call).
@tool(idempotent=True)
def lookup(key: str) -> str:
    """Look a key up (the second call crashes the first time)."""
    if crash_once.get(f"lookup_{key}"):
        crash_once[f"lookup_{key}"] = False
        raise KeyboardInterrupt("simulated crash")
    done.append(key)
    return key.upper()


SCRIPT = [
    ChatMessage.from_assistant(
        tool_calls=[ToolCall("lookup", {"key": "a"}, id="1"), ToolCall("lookup", {"key": "b"}, id="2")]
    ),
    "A and B found.",
]

if __name__ == "__main__":
    store = SQLiteSnapshotStore(Path(tempfile.mkdtemp()) / "runs.db", durable=True)
    agent = Agent(
        chat_generator=ScriptedChatGenerator(SCRIPT), tools=[lookup], snapshot_store=store, tool_concurrency=1
    )
    try:
        agent.run([ChatMessage.from_user("look up a and b")])
    except KeyboardInterrupt as crash:
        print(f"crashed: {crash}")
    run = store.runs()[0]
    print(f"run {run.run_id}: {run.status}, {run.snapshots} snapshots, last before {run.phase} at step {run.step}")
    snapshot = store.latest(run.run_id)
    print(f"finished before the crash: {sorted(snapshot.completed_tool_results)}")

    resumed = Agent(
        chat_generator=ScriptedChatGenerator(SCRIPT, position=snapshot.step), tools=[lookup], snapshot_store=store
    )
    print(resumed.run(snapshot=snapshot)["last_message"].text)
    print(f"each lookup ran once: {done}")
    store.close()
