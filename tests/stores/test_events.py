"""Stores that keep the events of runs (``record_events=True``): what they keep, in which order, read back by any reader."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage
from agentfsm.errors import ConfigurationError, DeserializationError
from agentfsm.events import PhaseChanged, RunPaused, ToolEnded, stored_dict
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, ToolExecutionDecision
from agentfsm.serialization import TAG
from agentfsm.stores import EventStore, JsonFileStore, SQLiteSnapshotStore
from tests.helpers import add, call, calls

USER = [ChatMessage.from_user("go")]

#: Each kind of store, opened on ``tmp`` (a second call opens a second instance of the same store).
STORES: dict[str, Callable[..., Any]] = {
    "sqlite": lambda tmp, **options: SQLiteSnapshotStore(tmp / "runs.db", durable=True, **options),
    "json": lambda tmp, **options: JsonFileStore(tmp / "runs", **options),
}


@pytest.fixture(params=sorted(STORES))
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Opens the parametrized kind of store on one place; closes what it opened."""
    opened: list[Any] = []

    def open_one(**options: Any) -> Any:
        opened.append(STORES[request.param](tmp_path, **options))
        return opened[-1]

    yield open_one
    for store in opened:
        if isinstance(store, SQLiteSnapshotStore):
            store.close()


def edge(run_id: str, step: int, source: str, dest: str) -> PhaseChanged:
    return PhaseChanged(run_id, step, 1000.0 + step, source, dest, "go", 1.5, None)


def pausing_agent(store: Any, tmp: Path, position: int = 0) -> Agent:
    """An agent whose one ``add`` call waits for a decision, kept in ``store`` (``position``: replies already given)."""
    script: list[ChatMessage | str] = [calls(call("add", "c1", a=1, b=2)), "3"]
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[add],
        confirmation_strategies={"add": BreakpointConfirmationStrategy(str(tmp))},
        snapshot_store=store,
    )


def test_a_store_numbers_each_runs_events_in_the_order_they_came(open_store: Callable[..., Any]) -> None:
    store = open_store(record_events=True)
    assert isinstance(store, EventStore)
    sent = {"a": [edge("a", i, "LLM_CALL", "EXIT_CHECK") for i in range(5)], "b": [edge("b", 0, "IDLE", "LLM_CALL")]}
    for first, second in zip(sent["a"], [*sent["b"], None, None, None, None], strict=True):
        store.record_event(first)
        if second is not None:
            store.record_event(second)
    assert store.event_count("a") == 5, "a store reads the events it queued once they are written"
    reader = open_store()  # another instance, as another process would open it; it records nothing itself
    for run_id, events in sent.items():
        stored = reader.events(run_id)
        assert [s.number for s in stored] == list(range(1, len(events) + 1))
        assert [s.event for s in stored] == events
        assert reader.event_count(run_id) == len(events)
    assert [s.number for s in reader.events("a", after=2)] == [3, 4, 5]
    assert [s.event for s in reader.events("a", after=1, limit=2)] == sent["a"][1:3]
    assert reader.events("a", after=5) == [] and reader.events("unknown") == [] and reader.event_count("unknown") == 0
    with pytest.raises(ConfigurationError):
        reader.events("a", after=-1)
    with pytest.raises(ConfigurationError):
        reader.events("a", limit=0)


def test_a_paused_event_is_read_back_with_its_stored_snapshot_and_an_end_without_its_result(
    open_store: Callable[..., Any], tmp_path: Path
) -> None:
    store = open_store()
    seen = []
    for event in pausing_agent(store, tmp_path).iter(USER):  # recorded by hand: the agent's store records nothing
        store.record_event(event)
        seen.append(event)
    paused = seen[-1]
    assert isinstance(paused, RunPaused) and paused.seq is not None
    approve = ToolExecutionDecision("add", True, "c1")
    for event in pausing_agent(store, tmp_path, 1).iter(snapshot=paused.snapshot, decisions=[approve]):
        store.record_event(event)
        seen.append(event)
    assert store.event_count(paused.run_id) == len(seen)
    stored = open_store().events(paused.run_id)
    assert [s.number for s in stored] == list(range(1, len(seen) + 1))
    assert [stored_dict(s.event) for s in stored] == [stored_dict(e) for e in seen]
    again = next(s.event for s in stored if isinstance(s.event, RunPaused))
    assert again == paused and again.snapshot == store.load(paused.run_id, paused.seq)
    assert seen[-1].kind == "run_ended" and seen[-1].result is not None
    assert stored[-1].event.result is None and stored[-1].event.exit_reason == seen[-1].exit_reason


def test_a_pause_no_store_holds_is_stored_with_its_snapshot(open_store: Callable[..., Any], tmp_path: Path) -> None:
    store = open_store()
    seen: list[Any] = []
    with pytest.raises(HITLBreakpointException):
        pausing_agent(None, tmp_path).run(USER, on_event=lambda e: (seen.append(e), store.record_event(e)))
    paused = seen[-1]
    assert isinstance(paused, RunPaused) and paused.seq is None, "the agent has no store: no seq"
    again = store.events(paused.run_id)[-1].event
    assert isinstance(again, RunPaused) and again.snapshot == paused.snapshot


def stored_raw(store: Any, run_id: str, data: bytes) -> None:
    """Write ``data`` as the next stored event of ``run_id``, as someone changing the store by hand would."""
    if isinstance(store, SQLiteSnapshotStore):
        with sqlite3.connect(store.path) as db:
            db.execute(
                "INSERT INTO events SELECT ?, COALESCE(MAX(number), 0) + 1, ? FROM events WHERE run_id = ?",
                (run_id, data, run_id),
            )
    else:
        folder = store.directory / run_id
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "events.jsonl", "ab") as file:
            file.write(data + b"\n")


def good(without: str = "", **changes: Any) -> bytes:
    """A stored transition of run ``r``, with ``changes`` and ``without`` one of its fields."""
    import orjson

    data = {**stored_dict(edge("r", 0, "IDLE", "LLM_CALL")), **changes}
    return orjson.dumps({k: v for k, v in data.items() if k != without})


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (good(run_id="other"), "an event of run 'other'"),
        (good(kind="nothing"), "Unknown event kind"),
        (good(step="3"), "not a number"),
        (good(without="source"), r"needs the fields \['source'\]"),
        (good(kind="paused", reason="breakpoint", pause={}, seq=7, path=None), "no (snapshot )?number 7"),
        # A value naming a module the allow-list refuses: `this` prints a poem when imported.
        (good(source={TAG: "object", "type": "this.s", "data": {}}), "module 'this': it is not in the allow-list"),
    ],
)
def test_a_stored_event_that_cannot_be_read_back_is_a_deserialization_error(
    open_store: Callable[..., Any], data: bytes, why: str
) -> None:
    store = open_store()
    store.record_event(edge("r", 0, "IDLE", "LLM_CALL"))
    assert store.event_count("r") == 1  # written
    stored_raw(store, "r", data)
    assert [s.number for s in store.events("r", limit=1)] == [1], "the events before it are read"
    with pytest.raises(DeserializationError, match=why) as refused:
        store.events("r")
    assert "Stored event 2 of run 'r'" in str(refused.value)
    assert "this" not in sys.modules, "nothing a stored event names is imported unless allowed"


def test_a_line_being_written_is_not_an_event_yet(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path)
    store.record_event(edge("r", 0, "IDLE", "LLM_CALL"))
    assert store.event_count("r") == 1  # written
    with open(tmp_path / "r" / "events.jsonl", "ab") as file:
        file.write(good()[:20])  # a writer halfway through its line
    assert store.event_count("r") == 1 and len(store.events("r")) == 1


def test_an_event_that_cannot_be_stored_is_logged_and_left_out(
    open_store: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    class Opaque:
        """A tool result without a JSON form."""

    store = open_store(record_events=True)
    with caplog.at_level(logging.ERROR, logger="agentfsm"):
        store.record_event(ToolEnded("r", 1, 1.0, "c1", "c1", "add", Opaque(), None, 1.0))
        store.record_event(edge("r", 1, "TOOL_RUN", "EXIT_CHECK"))
    assert [s.event.kind for s in store.events("r")] == ["transition"]
    assert any("event not stored" in r.getMessage() and "SerializationError" in r.getMessage() for r in caplog.records)


def test_a_process_that_never_closes_its_store_still_writes_every_event(
    open_store: Callable[..., Any], tmp_path: Path
) -> None:
    kind = "sqlite" if isinstance(open_store(), SQLiteSnapshotStore) else "json"
    program = textwrap.dedent(
        f"""
        from pathlib import Path
        from agentfsm import ChatMessage
        from agentfsm.demo import DEMO_QUESTION, demo_agent
        from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore

        tmp = Path({str(tmp_path)!r})
        store = SQLiteSnapshotStore(tmp / "runs.db", durable=True) if {kind!r} == "sqlite" else JsonFileStore(tmp / "runs")
        agent = demo_agent()
        agent.snapshot_store = store
        runs = set()
        agent.run([ChatMessage.from_user(DEMO_QUESTION)], on_event=lambda e: (store.record_event(e), runs.add(e.run_id)))
        print(*runs)
        """
    )  # and it exits at once, its writer thread holding the last events
    done = subprocess.run([sys.executable, "-c", program], check=True, timeout=60, capture_output=True, text=True)
    kinds = [s.event.kind for s in open_store().events(done.stdout.strip())]
    assert kinds[0] == "run_started" and kinds[-1] == "run_ended" and len(kinds) > 10


def test_a_layout_4_database_gets_the_events_table(tmp_path: Path) -> None:
    SQLiteSnapshotStore(tmp_path / "runs.db").close()
    with sqlite3.connect(tmp_path / "runs.db") as db:  # as layout 4 left it: no events, no threads
        db.executescript(
            "DROP TABLE run_texts; ALTER TABLE runs DROP COLUMN title; ALTER TABLE runs DROP COLUMN tools; "
            "ALTER TABLE runs DROP COLUMN waits; "
            "DROP TABLE events; DROP TABLE threads; ALTER TABLE runs DROP COLUMN thread_id; "
            "ALTER TABLE runs DROP COLUMN base_run_id; ALTER TABLE runs DROP COLUMN base_seq; "
            "ALTER TABLE runs DROP COLUMN base_messages; PRAGMA user_version = 4;"
        )
    store = SQLiteSnapshotStore(tmp_path / "runs.db")
    store.record_event(edge("r", 0, "IDLE", "LLM_CALL"))
    assert [s.number for s in store.events("r")] == [1]
    store.close()
    assert sqlite3.connect(tmp_path / "runs.db").execute("PRAGMA user_version").fetchone()[0] == 7


@pytest.mark.parametrize("in_async", [False, True], ids=["run", "run_async"])
def test_an_agent_whose_store_records_events_keeps_every_event_its_runs_emit(
    open_store: Callable[..., Any], tmp_path: Path, in_async: bool
) -> None:
    store = open_store(record_events=True)
    seen: list[Any] = []

    def run(agent: Agent, **options: Any) -> None:
        with pytest.raises(HITLBreakpointException) if "snapshot" not in options else contextlib.nullcontext():
            if in_async:

                async def handler(event: Any) -> None:
                    seen.append(event)

                asyncio.run(agent.run_async(on_event=handler, **options))
            else:
                agent.run(on_event=seen.append, **options)

    run(pausing_agent(store, tmp_path), messages=USER)
    paused = seen[-1]
    assert isinstance(paused, RunPaused)
    run(
        pausing_agent(store, tmp_path, 1),
        snapshot=paused.snapshot,
        decisions=[ToolExecutionDecision("add", True, "c1")],
    )
    assert seen[-1].kind == "run_ended"
    assert store.event_count(paused.run_id) == len(seen)
    stored = open_store().events(paused.run_id)
    assert [s.number for s in stored] == list(range(1, len(seen) + 1)), "both segments, one numbering"
    assert [stored_dict(s.event) for s in stored] == [stored_dict(e) for e in seen]


def test_a_store_that_records_no_events_costs_a_run_nothing(open_store: Callable[..., Any], tmp_path: Path) -> None:
    from agentfsm.agent import RunRequest

    quiet = pausing_agent(open_store(), tmp_path)
    assert not quiet.new_run(RunRequest(messages=USER)).records_events
    with pytest.raises(HITLBreakpointException) as paused:
        quiet.run(USER)
    assert quiet.snapshot_store.event_count(paused.value.snapshot.run_id) == 0  # type: ignore[union-attr]
    assert pausing_agent(open_store(record_events=True), tmp_path).new_run(RunRequest(messages=USER)).records_events
