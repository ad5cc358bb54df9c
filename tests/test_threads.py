"""Threads: runs that continue one conversation and its State, turn by turn, in either store."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, State, tool
from agentfsm.builtin_hooks import CompactionHook, MessageCount, SlidingWindowCompactor
from agentfsm.errors import ConfigurationError, ConfigurationTypeError, SnapshotError, ThreadBusyError
from agentfsm.events import RunEnded
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, ToolExecutionDecision
from agentfsm.pauses import RunStatus
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore
from agentfsm.threads import ThreadStore, turn_messages
from tests.helpers import add, call, calls

ROOT = Path(__file__).resolve().parent.parent

STORES: dict[str, Callable[[Path], ThreadStore]] = {
    "sqlite": lambda d: SQLiteSnapshotStore(d / "runs.db"),
    "sqlite-durable": lambda d: SQLiteSnapshotStore(d / "runs.db", durable=True),
    "json": lambda d: JsonFileStore(d / "runs"),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ThreadStore:
    return STORES[request.param](tmp_path)


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage.from_user(text)]


@tool(outputs_to_state={"facts": {"source": "fact"}})
def remember(fact: str) -> dict[str, str]:
    """Remember a fact."""
    return {"fact": fact}


def chat(store: ThreadStore, script: list[Any], **options: Any) -> Agent:
    return Agent(
        chat_generator=ScriptedChatGenerator(script),
        system_prompt="Be brief.",
        snapshot_store=store,
        state_schema={"facts": {"type": list[str]}},
        tools=[remember, add],
        **options,
    )


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.text for m in messages]


def test_each_turn_continues_the_last_ones_conversation_and_state(store: ThreadStore) -> None:
    script = [calls(call("remember", "c1", fact="tea")), "Noted.", "You like tea.", "Bye."]
    agent = chat(store, script)
    first = agent.run(user("I like tea."), thread="t1")
    second = agent.run(user("What do I like?"), thread="t1")
    assert texts(second["messages"])[:3] == ["Be brief.", "I like tea.", None], "one system prompt, the whole chat"
    assert second["facts"] == ["tea"] and second["tool_call_counts"] == {}, "State goes on, counts are the run's"
    assert second["step_count"] == 1 and first["step_count"] == 2
    third = agent.run(user("Bye."), thread="t1", facts=["coffee"])
    assert third["facts"] == ["tea", "coffee"], "values given to the run merge in as State's handler merges them"

    turns = store.thread_turns("t1")
    assert [t.number for t in turns] == [1, 2, 3] and all(t.status is RunStatus.DONE for t in turns)
    assert [texts(turn_messages(store, t)) for t in turns[1:]] == [
        ["What do I like?", "You like tea."],
        ["Bye.", "Bye."],
    ]
    assert texts(turn_messages(store, turns[0]))[:2] == ["Be brief.", "I like tea."]
    info = store.thread("t1")
    assert info is not None and (info.head_run_id, info.turns, info.status) == (turns[-1].run_id, 3, RunStatus.DONE)
    assert [t.thread_id for t in store.threads()] == ["t1"] and store.thread("t2") is None


def test_run_async_and_iter_go_on_in_the_same_thread(store: ThreadStore) -> None:
    agent = chat(store, ["one", "two", "three"])
    agent.run(user("a"), thread="t")
    asyncio.run(agent.run_async(user("b"), thread="t"))
    ended = [e for e in agent.iter(user("c"), thread="t") if isinstance(e, RunEnded)]
    assert ended[0].result is not None
    assert texts(ended[0].result["messages"]) == ["Be brief.", "a", "one", "b", "two", "c", "three"]
    assert store.thread("t").turns == 3  # type: ignore[union-attr]


def test_a_paused_turn_is_resumed_with_decisions_and_the_thread_goes_on(store: ThreadStore, tmp_path: Path) -> None:
    script = [calls(call("add", "c1", a=1, b=2)), "3.", "Again?"]
    agent = chat(store, script, confirmation_strategies={"add": BreakpointConfirmationStrategy(str(tmp_path / "p"))})
    with pytest.raises(HITLBreakpointException):
        agent.run(user("1 + 2?"), thread="t")
    assert store.thread("t").status is RunStatus.PAUSED  # type: ignore[union-attr]
    with pytest.raises(ThreadBusyError, match="is paused: resume it"):
        agent.run(user("Hello?"), thread="t")
    resumed = agent.run(thread="t", decisions=[ToolExecutionDecision("add", True, "c1")])
    assert resumed["last_message"].text == "3." and len(store.thread_turns("t")) == 1
    after = agent.run(user("More?"), thread="t")
    assert texts(after["messages"])[-2:] == ["More?", "Again?"]
    assert [texts(turn_messages(store, t))[-1] for t in store.thread_turns("t")] == ["3.", "Again?"]


def test_a_second_run_on_a_thread_is_refused_while_its_run_goes_on(store: ThreadStore) -> None:
    seen: list[str] = []

    @tool
    def ask_again(question: str) -> str:
        """Ask the same thread something while its run goes on."""
        other = chat(store, ["never"])
        try:
            other.run(user(question), thread="t")
        except ThreadBusyError as exc:
            seen.append(str(exc))
        return "asked"

    agent = Agent(
        chat_generator=ScriptedChatGenerator(["first", calls(call("ask_again", "c1", question="?")), "done"]),
        tools=[ask_again],
        snapshot_store=store,
    )
    agent.run(user("start"), thread="t")
    agent.run(user("go on"), thread="t")
    assert len(seen) == 1 and "goes on: one thread, one timeline" in seen[0] and "take it over" in seen[0]
    assert store.thread("t").turns == 2  # type: ignore[union-attr]


def test_a_turn_onto_a_head_the_thread_left_is_refused(store: ThreadStore) -> None:
    agent = chat(store, ["one", "two"])
    agent.run(user("a"), thread="t")
    read = store.thread("t")
    agent.run(user("b"), thread="t")
    with pytest.raises(ThreadBusyError, match="moved on since this run read it"):
        store.begin_turn("t", "late", head=read, base_messages=3)
    with pytest.raises(ThreadBusyError, match="moved on"):
        store.begin_turn("t", "late", head=None, base_messages=0)
    assert store.thread("t").turns == 2 and "late" not in {r.run_id for r in store.runs()}  # type: ignore[union-attr]


def test_a_fork_at_a_run_is_a_new_branch_and_leaves_the_thread_as_it_was(store: ThreadStore) -> None:
    agent = chat(store, ["one", "two", "branch two", "three"])
    first = agent.run(user("a"), thread="t")
    agent.run(user("b"), thread="t")
    first_run = store.thread_turns("t")[0].run_id
    branch = store.fork_thread("t", first_run, new_thread_id="b")
    assert (branch.parent_thread_id, branch.turns, branch.head_run_id) == ("t", 1, first_run)
    on_branch = agent.run(user("b'"), thread="b")
    assert texts(on_branch["messages"]) == [*texts(first["messages"]), "b'", "branch two"]
    back = agent.run(user("c"), thread="t")
    assert texts(back["messages"])[-4:] == ["b", "two", "c", "three"], "the thread forked is untouched"
    assert store.thread_turns("b")[0].run_id == first_run and len(store.thread_turns("b")) == 2
    with pytest.raises(SnapshotError, match="is no turn of thread"):
        store.fork_thread("b", store.thread_turns("t")[1].run_id)
    with pytest.raises(SnapshotError, match="no number 99"):
        store.fork_thread("t", first_run, 99)
    with pytest.raises(ConfigurationError, match="exists already"):
        store.fork_thread("t", new_thread_id="b")


def test_a_fork_at_a_transition_goes_on_from_there_as_the_branchs_next_turn(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    agent = chat(store, [calls(call("add", "c1", a=1, b=2)), "3."])
    agent.run(user("1 + 2?"), thread="t")
    run_id = store.thread_turns("t")[0].run_id
    mid = next(s for s in store.history(run_id) if s.phase.value == "TOOL_PENDING")
    store.fork_thread("t", run_id, mid.seq, new_thread_id="b")
    with pytest.raises(ConfigurationError, match="forked in the middle of run"):
        agent.run(user("x"), thread="b")
    redo = chat(store, ["It is 3."])
    result = redo.run(thread="b")
    assert result["last_message"].text == "It is 3." and result["tool_call_counts"] == {"add": 1}
    turns = store.thread_turns("b")
    assert (turns[0].run_id, turns[0].until_seq) == (run_id, mid.seq) and len(turns) == 2
    assert texts(turn_messages(store, turns[1])) == [None, "It is 3."], "the call's result, then the new reply"


def test_compaction_applies_to_the_thread_and_the_next_turn_continues_what_it_left() -> None:
    hooks = {"before_llm": [CompactionHook(SlidingWindowCompactor(min_keep_steps=1), MessageCount(6))]}
    store = SQLiteSnapshotStore(":memory:")
    agent = Agent(chat_generator=ScriptedChatGenerator([f"r{i}" for i in range(6)]), hooks=hooks, snapshot_store=store)
    for i in range(5):
        result = agent.run(user(f"q{i}"), thread="t")
    assert len(result["messages"]) <= 7 and texts(result["messages"])[-2:] == ["q4", "r4"]
    assert "r0" in texts(result["compacted_messages"]), "what compaction took out goes on in the thread's State"
    stored = store.latest(store.thread("t").head_run_id)  # type: ignore[union-attr]
    assert [ChatMessage.from_dict(m) for m in stored.messages] == result["messages"], "stored as compacted"


def test_what_a_call_with_thread_cannot_take_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="the agent has no snapshot store"):
        Agent(chat_generator=ScriptedChatGenerator(["x"])).run(user("a"), thread="t")
    store = SQLiteSnapshotStore(tmp_path / "runs.db")
    agent = chat(store, ["one", "two"])
    with pytest.raises(ConfigurationTypeError, match="thread must be a thread id"):
        agent.run(user("a"), thread="")
    agent.run(user("a"), thread="t")
    with pytest.raises(ConfigurationError, match="pass no system_prompt"):
        agent.run(user("b"), thread="t", system_prompt="Other.")
    with pytest.raises(ConfigurationError, match="give the next turn's messages"):
        agent.run(thread="t")
    with pytest.raises(ConfigurationError, match="waits for no decisions"):
        agent.run(user("b"), thread="t", decisions=[ToolExecutionDecision("add", True, "c1")])
    with pytest.raises(ConfigurationError, match="pass no snapshot= or fork="):
        agent.run(thread="t", fork=True, snapshot=store.latest(store.thread("t").head_run_id))  # type: ignore[union-attr]
    assert store.thread("t").turns == 1  # type: ignore[union-attr]


def test_another_process_continues_the_thread_and_this_one_reads_its_turn(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    agent = chat(SQLiteSnapshotStore(path), ["here", "and here again"])
    agent.run(user("first, here"), thread="t")
    code = textwrap.dedent(
        f"""
        from agentfsm import Agent, ChatMessage
        from agentfsm.generators import ScriptedChatGenerator
        from agentfsm.stores import SQLiteSnapshotStore
        from tests.test_threads import remember
        from tests.helpers import add
        agent = Agent(chat_generator=ScriptedChatGenerator(["there"]), system_prompt="Be brief.",
                      snapshot_store=SQLiteSnapshotStore({str(path)!r}), tools=[remember, add],
                      state_schema={{"facts": {{"type": list[str]}}}})
        print(len(agent.run([ChatMessage.from_user("second, there")], thread="t")["messages"]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "5"
    third = agent.run(user("third, here"), thread="t")
    assert texts(third["messages"])[3:] == ["second, there", "there", "third, here", "and here again"]


def test_state_values_of_a_thread_are_its_own(store: ThreadStore) -> None:
    def note(state: State) -> None:
        state.set("facts", ["seen"])

    agent = chat(store, ["a", "b", "c"], hooks={"before_llm": [note]})
    agent.run(user("x"), thread="one")
    second = agent.run(user("y"), thread="one")
    other = agent.run(user("z"), thread="two")
    assert second["facts"] == ["seen", "seen"] and other["facts"] == ["seen"]
