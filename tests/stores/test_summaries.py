"""Run summaries: what the SQLite store keeps to list runs answers as reading every run's newest snapshot does."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, Breakpoint, BreakpointException, ChatMessage, Phase, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, ToolExecutionDecision
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore
from agentfsm.stores.base import RunInfo, SnapshotInfo
from agentfsm.stores.summaries import Finding, RunSummary, Summarised, SummaryStore
from agentfsm.web.finding import Finder, Query
from agentfsm.web.pages import runs_html


@tool
def lookup(name: str) -> str:
    """Look a name up."""
    return f"{name} is a name"


@tool
def broken(name: str) -> str:
    """Fail."""
    raise RuntimeError("the tool broke")


class Failing:
    """A model whose second call fails: the run fails after its first step."""

    def __init__(self) -> None:
        self.calls = 0

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, list[ChatMessage]]:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("the model is down")
        return {"replies": [ChatMessage.from_assistant("Looking.", tool_calls=[ToolCall("lookup", {"name": "Zed"})])]}


def looking(store: Any, text: str = "Found it.", **kwargs: Any) -> Agent:
    script = [
        ChatMessage.from_assistant("Let me see.", tool_calls=[ToolCall("lookup", {"name": "Ünï"}, id="l1")]),
        text,
    ]
    return Agent(chat_generator=ScriptedChatGenerator(script), tools=[lookup], snapshot_store=store, **kwargs)


def confirming(store: Any, tmp: Path, position: int = 0) -> Agent:
    script = [ChatMessage.from_assistant(tool_calls=[ToolCall("lookup", {"name": "bob"}, id="c1")]), "Bob looked up."]
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[lookup],
        confirmation_strategies={"lookup": BreakpointConfirmationStrategy(str(tmp))},
        snapshot_store=store,
    )


def fill(store: Any, tmp: Path) -> dict[str, str]:
    """A store with a run of each kind: done, waiting for approval, resumed, paused, failed, threads' turns, a fork.

    A store that keeps pauses only (not durable) holds the paused runs and the threads' turns.
    """
    ids: dict[str, str] = {}

    def kept(name: str) -> None:
        new = [r.run_id for r in store.runs() if r.run_id not in ids.values()]
        if new:
            ids[name] = new[0]

    looking(store).run([ChatMessage.from_user("Look   Ünï\nup, PLEASE")])
    kept("done")
    with pytest.raises(HITLBreakpointException):
        confirming(store, tmp).run([ChatMessage.from_user("Look bob up.")])
    kept("waiting")
    with pytest.raises(HITLBreakpointException) as decided:
        confirming(store, tmp).run([ChatMessage.from_user("Decide on carol.")])
    confirming(store, tmp, position=1).run(
        snapshot=decided.value.snapshot, decisions=[ToolExecutionDecision("lookup", execute=True, tool_call_id="c1")]
    )
    kept("resumed")
    with pytest.raises(BreakpointException) as stopped:
        looking(store).run([ChatMessage.from_user("Stop at the tool.")], break_point=Breakpoint(phase=Phase.TOOL_RUN))
    kept("paused")
    with pytest.raises(RuntimeError):
        Agent(chat_generator=Failing(), tools=[lookup], snapshot_store=store).run([ChatMessage.from_user("Fail me.")])
    kept("failed")
    if isinstance(store, SQLiteSnapshotStore):
        chat = Agent(chat_generator=ScriptedChatGenerator(["First answer.", "Second answer."]), snapshot_store=store)
        chat.run([ChatMessage.from_user("First question of the thread")], thread="t")
        kept("first turn")
        chat.run([ChatMessage.from_user("Second question, about kiwis")], thread="t")
        kept("turn")
        looking(store, "Forked reply.").run(snapshot=stopped.value.snapshot.fork())
        kept("fork")
    return ids


class Plain:
    """The same runs through the ``Runs`` protocol only: summarised from their snapshots, as any store is."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def runs(self) -> list[RunInfo]:
        return self.store.runs()  # type: ignore[no-any-return]

    def latest(self, run_id: str) -> AgentSnapshot:
        return self.store.latest(run_id)  # type: ignore[no-any-return]

    def history(self, run_id: str) -> list[SnapshotInfo]:
        return self.store.history(run_id)  # type: ignore[no-any-return]

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        return self.store.load(run_id, seq)  # type: ignore[no-any-return]


def from_snapshots(store: Any, finding: Finding) -> list[RunSummary]:
    def latest(run_id: str) -> AgentSnapshot | None:
        return store.latest(run_id) if store.history(run_id) else None

    return Summarised(latest).find(store.runs(), finding)


FINDINGS = [
    Finding(),
    Finding(("ünï",)),
    Finding(("lookup", "found")),
    Finding(("kiwis",)),
    Finding(("first", "question")),
    Finding(("nowhere",)),
    Finding(since="2000-01-01", until="2999-12-31"),
    Finding(until="2000-01-01"),
]
QUERIES = [
    Query(),
    Query(text="look"),
    Query(status="waiting for approval"),
    Query(status="failed"),
    Query(status="paused", sort="title"),
    Query(sort="steps"),
    Query(sort="oldest", text="question"),
]


@pytest.fixture(params=[True, False], ids=["durable", "plain"])
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[SQLiteSnapshotStore, dict[str, str]]:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=request.param)
    ids = fill(store, tmp_path)
    yield store, ids
    store.close()


def test_the_stores_summaries_answer_as_the_runs_snapshots_do(
    filled: tuple[SQLiteSnapshotStore, dict[str, str]],
) -> None:
    store, ids = filled
    assert isinstance(store, SummaryStore)
    for finding in FINDINGS:
        assert store.summaries(finding) == from_snapshots(store, finding), finding
    by_id = {s.info.run_id: s for s in store.summaries(Finding())}
    statuses = {name: by_id[run_id].status for name, run_id in ids.items()}
    expected = {"waiting": "waiting for approval", "resumed": "done", "paused": "paused"}
    expected.update({"first turn": "done", "turn": "done", "fork": "done"})
    if store.durable:  # a store that keeps pauses only holds no new run that ran to its end
        expected.update(done="done", failed="failed")
        assert by_id[ids["done"]].title == "Look Ünï up, PLEASE" and by_id[ids["done"]].tools == ("lookup",)
        assert store.summaries(Finding((ids["failed"][3:12].lower(),)))[0].info.run_id == ids["failed"]
    assert statuses == expected
    assert by_id[ids["turn"]].title == "First question of the thread", "a thread's turn is titled by its thread"
    assert [s.info.run_id for s in store.summaries(Finding(("kiwis",)))] == [ids["turn"]]
    assert [s.info.run_id for s in store.summaries(Finding(("forked",)))] == [ids["fork"]]
    assert store.run_info(ids["waiting"]) == by_id[ids["waiting"]].info and store.run_info("nope") is None


def test_the_list_page_shows_what_it_showed_from_the_snapshots(
    filled: tuple[SQLiteSnapshotStore, dict[str, str]],
) -> None:
    store, _ids = filled
    plain = Plain(store)
    summarised, read = Finder(store, store.latest), Finder(plain, plain.latest)
    for query in QUERIES:
        for page in (1, 2):
            asked = Query(query.text, query.status, query.since, query.until, query.sort, page)
            assert runs_html(summarised.find(asked), asked) == runs_html(read.find(asked), asked), asked


def test_a_resumed_run_is_summarised_where_it_stands(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    with pytest.raises(HITLBreakpointException) as decided:
        confirming(store, tmp_path).run([ChatMessage.from_user("Decide on carol.")])
    run_id = decided.value.snapshot.run_id
    (waiting,) = store.summaries(Finding())
    assert waiting.status == "waiting for approval" and not store.summaries(Finding(("looked",)))
    confirming(store, tmp_path, position=1).run(
        snapshot=decided.value.snapshot, decisions=[ToolExecutionDecision("lookup", execute=True, tool_call_id="c1")]
    )
    (done,) = store.summaries(Finding(("looked",)))
    assert (done.info.run_id, done.status, done.title, done.tools) == (run_id, "done", "Decide on carol.", ("lookup",))
    store.close()


def test_a_file_of_layout_6_is_upgraded_with_every_runs_summary(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path, durable=True)
    fill(store, tmp_path)
    before = store.summaries(Finding())
    store.close()
    with sqlite3.connect(path) as db:  # the file as layout 6 wrote it
        db.executescript(
            "DROP TABLE run_texts; ALTER TABLE runs DROP COLUMN title; ALTER TABLE runs DROP COLUMN tools; "
            "ALTER TABLE runs DROP COLUMN waits; PRAGMA user_version = 6;"
        )
    upgraded = SQLiteSnapshotStore(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 7
    assert upgraded.summaries(Finding()) == before
    for finding in FINDINGS:
        assert upgraded.summaries(finding) == from_snapshots(upgraded, finding), finding
    upgraded.close()


def test_a_store_without_summaries_is_listed_from_its_snapshots(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path / "runs")
    ids = fill(store, tmp_path)
    assert not isinstance(store, SummaryStore)
    found = Finder(store, store.latest).find(Query(text="stop"))
    assert [s.info.run_id for s in found.runs] == [ids["paused"]], "the store keeps pauses only"
    assert found.counts["paused"] == 1 and found.runs[0].title == "Stop at the tool."
