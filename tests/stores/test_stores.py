from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from agentfsm import (
    Agent,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    Phase,
    SnapshotError,
    StaleSnapshotError,
    StoreError,
    ToolCall,
    TransitionRecord,
    tool,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import (
    JsonFileStore,
    RunDelta,
    RunInfo,
    SnapshotStore,
    SQLiteSnapshotStore,
)
from agentfsm.stores._checkpoint import CHECKPOINT_EVERY, WAL_RESTART_BYTES
from agentfsm.testing import comparable_result, scripted_conversations
from tests.helpers import (
    CRASH_ON,
    KILL_SCRIPT,
    RESUME_SCHEMA,
    SIDE_EFFECTS,
    add,
    call,
    calls,
    flaky,
    logged_step,
    remember,
    rerun_in_doubt,
)

USER = [ChatMessage.from_user("go")]
SCRIPT = [
    calls(call("add", "a1", a=1, b=2)),
    calls(call("remember", "r1", text="x"), call("add", "a2", a=3, b=4)),
    "done",
]


def agent(store: SnapshotStore | None = None, script: list[Any] = SCRIPT, position: int = 0, **kwargs: Any) -> Agent:
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[add, remember, flaky],
        state_schema=RESUME_SCHEMA,
        snapshot_store=store,
        **kwargs,
    )


def pause(a: Agent, break_point: Breakpoint) -> AgentSnapshot:
    with pytest.raises(BreakpointException) as info:
        a.run(USER, break_point=break_point)
    return info.value.snapshot  # type: ignore[no-any-return]


@pytest.fixture(params=["json", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SnapshotStore:
    if request.param == "json":
        return JsonFileStore(tmp_path / "snapshots")
    return SQLiteSnapshotStore(tmp_path / "runs.db")


def test_stores_keep_pause_snapshots(store: SnapshotStore) -> None:
    assert isinstance(store, SnapshotStore)
    first = pause(agent(store), Breakpoint(phase=Phase.LLM_CALL, step=1))
    assert store.latest(first.run_id) == first
    resumed_agent = agent(store, position=1)
    with pytest.raises(BreakpointException):
        resumed_agent.run(snapshot=store.latest(first.run_id), break_point=Breakpoint(phase=Phase.TOOL_RUN, step=2))
    history = store.history(first.run_id)
    assert [(h.seq, h.phase, h.step) for h in history] == [(0, Phase.LLM_CALL, 1), (1, Phase.TOOL_RUN, 2)]
    assert store.load(first.run_id, 0) == first
    assert [r.run_id for r in store.runs()] == [first.run_id]
    with pytest.raises(SnapshotError):
        store.latest("no-such-run")
    with pytest.raises(SnapshotError):
        store.load(first.run_id, 7)


def test_json_store_files_are_readable(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path)
    snapshot = pause(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=2))
    files = sorted((tmp_path / snapshot.run_id).iterdir())
    assert [f.name for f in files] == ["000000_0002_TOOL_RUN.json", "run.json"]
    assert json.loads(files[0].read_text())["pending_tool_calls"][0]["tool_name"] == "remember"


def test_json_store_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = JsonFileStore(tmp_path)
    snapshot = pause(agent(store), Breakpoint(phase=Phase.LLM_CALL, step=1))

    def crash(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        store.save(snapshot.model_copy(update={"step": 2}))
    monkeypatch.undo()
    assert store.latest(snapshot.run_id) == snapshot
    assert sorted(p.name for p in (tmp_path / snapshot.run_id).iterdir()) == [
        "000000_0001_LLM_CALL.json",
        "run.json",
    ], "no temp files left"


# -- durable mode -----------------------------------------------------------------------------------


def test_durable_store_records_every_transition_and_time_travels(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    baseline = comparable_result(agent().run(USER))
    started = datetime.now(UTC)
    result = agent(store).run(USER)
    run_id = store.runs()[0].run_id
    history = store.history(run_id)
    times = [datetime.fromisoformat(h.created_at) for h in history]
    assert started <= times[0] and times == sorted(times) and times[-1] <= datetime.now(UTC)
    p = Phase
    # One row per transition into an active phase, plus one per finished tool call inside TOOL_RUN.
    assert [(h.phase, h.step) for h in history] == [
        (p.LLM_CALL, 0),
        (p.TOOL_PENDING, 1),
        (p.TOOL_RUN, 1),
        (p.TOOL_RUN, 1),  # a1 finished
        (p.EXIT_CHECK, 1),
        (p.LLM_CALL, 1),
        (p.TOOL_PENDING, 2),
        (p.TOOL_RUN, 2),
        (p.TOOL_RUN, 2),  # r1 finished
        (p.TOOL_RUN, 2),  # a2 finished
        (p.EXIT_CHECK, 2),
        (p.LLM_CALL, 2),
        (p.EXIT_CHECK, 3),
        (p.DONE, 3),  # the run's record: its last edge taken
    ]
    assert len(history) == len(result["trace"]) + 3
    assert store.latest(run_id).trace == [r.to_dict() for r in result["trace"]]
    assert store.runs() == [
        RunInfo(
            run_id,
            "done",
            history[-1].phase,
            history[-1].step,
            len(history),
            store.runs()[0].updated_at,
            exit_reason="text",
        )
    ]
    for info in history:
        snapshot = store.load(run_id, info.seq)
        assert (snapshot.phase, snapshot.step, snapshot.seq) == (info.phase, info.step, info.seq)
        # A snapshot taken while the tools ran: its calls without a result may have run; run them again.
        # The finished run's record resumes nowhere: a fork of it starts before its last edge.
        again = agent(position=snapshot.step)
        resumed = again.run(snapshot=snapshot, decisions=rerun_in_doubt(snapshot), fork=snapshot.ended)
        assert comparable_result(resumed) == baseline, f"resuming from snapshot {info.seq} ({info.phase})"


def test_durable_rows_hold_only_what_changed(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    history = [ChatMessage.from_user(f"old message {i}") for i in range(1000)]
    script = [calls(call("add", f"c{i}", a=i, b=1)) for i in range(5)] + ["done"]
    a = agent(store, script=script)
    a.run(history)
    db = sqlite3.connect(tmp_path / "runs.db")
    rows = db.execute("SELECT full, entries FROM snapshot_batches ORDER BY key").fetchall()
    # One row per commit: before each step's tool call, after it, and at the end.
    assert len(rows) == 5 + 5 + 1
    entries = [entry for _full, blob in rows for entry in orjson.loads(blob)]
    assert rows[0][0] == 1 and len(entries[0][0]) == 1000, "the first snapshot holds the history"
    assert all(full == 0 for full, _ in rows[1:])
    for messages, trace, _body, _created_at in entries[1:]:
        assert len(messages) <= 2 and len(trace) <= 2
    run_id = store.runs()[0].run_id
    assert len(store.latest(run_id).messages) == 1000 + 2 * 5 + 1  # five (call, result) pairs and the answer


def test_crash_inside_tool_run_resumes_only_unfinished_calls(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    script = [
        calls(call("flaky", "f1", label="one"), call("flaky", "f2", label="two"), call("flaky", "f3", label="three")),
        "done",
    ]
    SIDE_EFFECTS.clear()
    CRASH_ON.add("two")
    crashing = agent(store, script=script, tool_concurrency=1)
    with pytest.raises(KeyboardInterrupt):
        crashing.run(USER)
    assert SIDE_EFFECTS == ["flaky(one)"]
    run = store.runs()[0]
    assert run.status == "failed"
    snapshot = store.latest(run.run_id)
    # The failed run's record: its fail edge taken; resuming it retries the tool run where it failed.
    assert snapshot.phase is Phase.FAILED and snapshot.trace[-1]["source"] is Phase.TOOL_RUN
    assert (
        snapshot.reopened().phase is Phase.TOOL_RUN
        and snapshot.exit_reason == "KeyboardInterrupt: crash while running two"
    )
    assert snapshot.completed_tool_results == {"f1": {"value": "ONE"}}
    resumed = agent(store, script=script, position=1, tool_concurrency=1)
    # f2 and f3 were handed to the tools before the crash: the run cannot know whether they ran.
    with pytest.raises(BreakpointException, match=r"\['f2', 'f3'\].*unknown") as paused:
        resumed.run(snapshot=snapshot)
    assert SIDE_EFFECTS == ["flaky(one)"], "nothing ran"
    in_doubt = paused.value.snapshot
    assert in_doubt.outcome_unknown_calls() == {"f2": "flaky", "f3": "flaky"} and store.runs()[0].status == "paused"
    result = resumed.run(snapshot=in_doubt, decisions=rerun_in_doubt(in_doubt))
    assert SIDE_EFFECTS == ["flaky(one)", "flaky(two)", "flaky(three)"], "each call ran exactly once"
    assert [m.tool_call_result.result for m in result["messages"] if m.tool_call_result] == ["ONE", "TWO", "THREE"]
    assert store.runs()[0].status == "done"


KILLED_PROGRAM = """
import sys
from agentfsm import Agent, ChatMessage
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import KILL_SCRIPT, logged_step

store = SQLiteSnapshotStore(sys.argv[1], durable=True)
agent = Agent(chat_generator=ScriptedChatGenerator(KILL_SCRIPT), tools=[logged_step], snapshot_store=store, tool_concurrency=1)
agent.run([ChatMessage.from_user("go")])
"""


def test_a_killed_process_resumes_from_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[2]
    db, log = tmp_path / "runs.db", tmp_path / "log.txt"
    env = {**os.environ, "AGENTFSM_TEST_LOG": str(log), "AGENTFSM_TEST_KILL": "two"}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_PROGRAM, str(db)], cwd=root, env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 9, done.stderr
    assert log.read_text() == "one\n"
    store = SQLiteSnapshotStore(db, durable=True)
    run = store.runs()[0]
    assert run.status == "active", "nobody marked the killed run: it is still active"
    snapshot = store.latest(run.run_id)
    assert snapshot.phase is Phase.TOOL_RUN and list(snapshot.completed_tool_results) == ["s1"]
    assert [c["id"] for c in snapshot.pending_tool_calls] == ["s1", "s2"]

    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    agent = Agent(
        chat_generator=ScriptedChatGenerator(KILL_SCRIPT, position=snapshot.step),
        tools=[logged_step],
        snapshot_store=store,
        tool_concurrency=1,
    )
    with pytest.raises(StaleSnapshotError, match=r"is being run by .* take the run over"):
        agent.run(snapshot=snapshot)  # the killed process's claim has not expired
    assert snapshot.outcome_unknown_calls() == {"s2": "logged_step"}, "s2 was under way when the process died"
    resumed = agent.run(snapshot=snapshot, take_over=True, decisions=rerun_in_doubt(snapshot))
    assert log.read_text() == "one\ntwo\n", "the finished call did not run again"
    assert [m.tool_call_result.result for m in resumed["messages"] if m.tool_call_result] == ["one", "two"]
    assert store.runs()[0].status == "done"


def test_fork_an_earlier_point_of_a_durable_run(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    original = agent(store).run(USER)
    run_id = store.runs()[0].run_id
    before_second_call = next(h for h in store.history(run_id) if (h.phase, h.step) == (Phase.LLM_CALL, 1))
    branch = store.load(run_id, before_second_call.seq).fork()
    assert branch.run_id != run_id and branch.phase is Phase.LLM_CALL
    other_ending = [calls(call("add", "b1", a=10, b=20)), "a different ending"]
    forked = agent(store, script=[SCRIPT[0], *other_ending], position=1).run(snapshot=branch)
    assert forked["last_message"].text == "a different ending"
    assert forked["messages"][:3] == original["messages"][:3], "the branch shares the history up to the fork"
    assert {r.run_id: r.status for r in store.runs()} == {run_id: "done", branch.run_id: "done"}
    assert len(store.history(run_id)) == 14, "the original run is untouched"


class RecordingStore(SQLiteSnapshotStore):
    """A durable store that also keeps, from the deltas it is told, the whole snapshot of every point it records."""

    def __init__(self) -> None:
        super().__init__(":memory:", durable=True)
        self.taken: list[dict[str, Any]] = []
        self.messages: list[ChatMessage] = []
        self.trace: list[TransitionRecord] = []

    def observe(self, delta: RunDelta) -> None:
        self.messages = [*([] if delta.rewritten else self.messages), *delta.messages]
        self.trace += delta.trace
        whole = {"messages": [m.to_dict() for m in self.messages], "trace": [r.to_dict() for r in self.trace]}
        if delta.fields is not None:
            self.taken.append({**delta.fields, **whole})
        elif delta.record is not None and delta.record.dest in (Phase.DONE, Phase.FAILED):
            # The run's record: where it stood before its last edge, that edge taken.
            ended = {"phase": delta.record.dest, "exit_reason": delta.exit_reason, "break_point": None}
            self.taken.append({**self.taken[-1], **ended, **whole})
        super().observe(delta)


def without_time(snapshot: AgentSnapshot) -> dict[str, Any]:
    return {k: v for k, v in snapshot.to_dict().items() if k not in ("created_at", "format_version", "seq")}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripted_conversations([add, remember, flaky], max_replies=5))
def test_durable_snapshots_load_as_the_whole_snapshot_of_their_point(script: list[ChatMessage]) -> None:
    store = RecordingStore()
    result = agent(store, script=script).run(USER, prefix="> ")
    assert store.messages == result["messages"], "the deltas add up to the conversation"
    run_id = store.runs()[0].run_id
    history = store.history(run_id)
    assert len(history) == len(store.taken)
    for info, taken in zip(history, store.taken, strict=True):
        assert (info.phase, info.step) == (taken["phase"], taken["step"])
        assert without_time(store.load(run_id, info.seq)) == taken, f"snapshot {info.seq}"
    store.close()


def test_pending_calls_are_listed_until_their_tools_ran(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    agent(store).run(USER)
    run_id = store.runs()[0].run_id
    for info in store.history(run_id):
        pending = store.load(run_id, info.seq).pending_tool_calls
        tool_phase = info.phase in (Phase.TOOL_PENDING, Phase.CONFIRM, Phase.TOOL_RUN)
        assert bool(pending) == tool_phase, f"{info.phase} at step {info.step}"
    store.close()


@pytest.mark.parametrize("synchronous", ["OFF", "NORMAL", "FULL"])
def test_sqlite_synchronous_setting(tmp_path: Path, synchronous: Literal["OFF", "NORMAL", "FULL"]) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True, synchronous=synchronous)
    level = store._db.execute("PRAGMA synchronous").fetchone()[0]
    assert level == {"OFF": 0, "NORMAL": 1, "FULL": 2}[synchronous]
    result = agent(store).run(USER)
    assert store.runs()[0].status == "done"
    assert store.latest(store.runs()[0].run_id).messages[-1] == result["messages"][-1].to_dict()


def test_sqlite_synchronous_must_be_a_known_level(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous must be"):
        SQLiteSnapshotStore(tmp_path / "runs.db", synchronous="SOMETIMES")  # type: ignore[arg-type]


def test_sqlite_checkpoints_in_a_thread_and_stops_it_on_close(tmp_path: Path) -> None:
    import threading

    def checkpoint_threads() -> int:
        return sum(t.name == "agentfsm-sqlite-checkpoint" for t in threading.enumerate())

    before = checkpoint_threads()
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0, "no commit pays for a checkpoint"
    assert checkpoint_threads() == before + 1
    for _ in range(30):
        agent(store).run(USER)
    wal = tmp_path / "runs.db-wal"
    store.close()
    assert checkpoint_threads() == before
    assert not wal.exists() or wal.stat().st_size == 0, "closing checkpointed the WAL into the database"
    reopened = SQLiteSnapshotStore(tmp_path / "runs.db")
    assert len(reopened.runs()) == 30
    reopened.close()
    assert SQLiteSnapshotStore(":memory:", durable=True)._checkpointer is None


def test_the_wal_stays_bounded_while_commits_keep_coming(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    script = [calls(call("add", f"c{i}", a=i, b=1)) for i in range(100)] + ["done"]
    for _ in range(70):  # back to back: the WAL is never found fully copied between two commits
        agent(store, script=script).run(USER)
    with closing(sqlite3.connect(tmp_path / "runs.db")) as db:
        commits = db.execute("SELECT COUNT(*) FROM snapshot_batches").fetchone()[0]
        page = db.execute("PRAGMA page_size").fetchone()[0]
    # The WAL starts over at every checkpoint past the limit: it holds at most what the commits between
    # two checkpoints add (one to two pages each), as many again if a checkpoint runs late, or the limit.
    bound = max(WAL_RESTART_BYTES, 2 * CHECKPOINT_EVERY * 2 * (page + 24))
    assert commits * page > 3 * bound, "without a restart the WAL would grow past the bound"
    wal = (tmp_path / "runs.db-wal").stat().st_size
    assert wal <= bound, f"a WAL of {wal} bytes after {commits} commits"
    store.close()


def test_a_failed_commit_keeps_its_snapshots_for_the_next(tmp_path: Path) -> None:
    import sqlite3 as sqlite

    db = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(db, durable=True, lock_timeout=0)  # fail at once instead of waiting for the other
    other = sqlite.connect(db, isolation_level=None)

    @tool
    def grab_the_database() -> str:
        """Another writer takes the database while this call runs."""
        other.execute("BEGIN IMMEDIATE")
        return "taken"

    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("grab_the_database", {}, id="g1")])
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply, "done"]), tools=[grab_the_database], snapshot_store=store
    )
    with pytest.raises(StoreError, match="locked"):
        agent.run(USER)
    run_id = store.runs()[0].run_id
    assert store.latest(run_id).completed_tool_results == {}, "the finished call could not be committed"
    other.execute("ROLLBACK")
    store.close()  # commits what the failed commits kept
    reopened = SQLiteSnapshotStore(db)
    assert reopened.runs()[0].status == "failed"
    assert reopened.latest(run_id).completed_tool_results == {"g1": {"value": "taken"}}
    reopened.close()


@pytest.mark.parametrize("entries", [b"not json", b"[[1, 2]]", b'[[[], [[1, "x"]], {}, 1.5]]', b"[[[], [], 7, 1.5]]"])
def test_a_damaged_stored_snapshot_is_a_snapshot_error(tmp_path: Path, entries: bytes) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    agent(store).run(USER)
    run_id = store.runs()[0].run_id
    with closing(sqlite3.connect(tmp_path / "runs.db", isolation_level=None)) as db:  # as one with the file could
        db.execute("UPDATE snapshot_batches SET entries = ?, count = 1", (entries,))
    with pytest.raises(SnapshotError, match="damaged"):
        store.latest(run_id)
    with pytest.raises(SnapshotError, match="damaged"):
        store.history(run_id)
    store.close()


def test_sqlite_refuses_a_database_of_another_layout(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    with pytest.raises(SnapshotError, match="not a snapshot database"):
        SQLiteSnapshotStore(other)
    db = sqlite3.connect(other)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete", "the refused file was not changed"
    db.close()
    text = tmp_path / "notes.txt"
    text.write_text("not a database, but a long enough text to fill the sqlite header space " * 3)
    with pytest.raises(SnapshotError, match="not an SQLite database"):
        SQLiteSnapshotStore(text)
    fresh = SQLiteSnapshotStore(tmp_path / "fresh.db")
    fresh.close()
    reopened = SQLiteSnapshotStore(tmp_path / "fresh.db")  # its own layout opens again
    assert reopened.runs() == []
    reopened.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripted_conversations([add], max_replies=4, invalid_calls=False))
def test_every_durable_snapshot_of_a_run_with_hooks_and_confirmation_resumes_to_the_same_result(
    script: list[ChatMessage],
) -> None:
    from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy
    from agentfsm.testing import RecordingHook
    from tests.helpers import RuleUI

    hooks = {
        point: [RecordingHook(point)] for point in ("before_llm", "after_llm", "before_tool", "after_tool", "on_exit")
    }

    def make(store: SQLiteSnapshotStore | None = None, position: int = 0) -> Agent:
        return Agent(
            chat_generator=ScriptedChatGenerator(script, position=position),
            tools=[add],
            confirmation_strategies={"add": BlockingConfirmationStrategy(AlwaysAskPolicy(), RuleUI())},
            hooks=hooks,
            snapshot_store=store,
        )

    baseline = comparable_result(make().run(USER))
    store = SQLiteSnapshotStore(":memory:", durable=True)
    make(store).run(USER)
    run_id = store.runs()[0].run_id
    for info in store.history(run_id):
        snapshot = store.load(run_id, info.seq)
        decisions = rerun_in_doubt(snapshot)
        resumed = comparable_result(make(position=snapshot.step).run(snapshot=snapshot, fork=True, decisions=decisions))
        assert resumed == baseline, f"snapshot {info.seq} ({snapshot.phase.value}, stage {snapshot.stage})"
    store.close()


@pytest.mark.parametrize("use_async", [False, True])
def test_a_run_whose_commit_fails_before_tool_run_never_runs_the_tool(tmp_path: Path, use_async: bool) -> None:
    import asyncio

    from agentfsm import hook

    db = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(db, durable=True, lock_timeout=0)  # fail at once instead of waiting for the other
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)  # async runs hooks in threads

    @hook
    def grab_the_database(state: Any) -> None:
        """Another writer takes the database before the calls are checked."""
        other.execute("BEGIN IMMEDIATE")

    run = agent(store, hooks={"before_tool": [grab_the_database]})
    SIDE_EFFECTS.clear()
    with pytest.raises(StoreError, match="locked"):
        asyncio.run(run.run_async(USER)) if use_async else run.run(USER)
    assert SIDE_EFFECTS == [], "entering TOOL_RUN could not be committed: no tool ran"
    other.execute("ROLLBACK")
    other.close()
    store.close()


class FullDisk(SQLiteSnapshotStore):
    """A durable store whose disk fills up when a finished tool call is to be committed."""

    def observe(self, delta: RunDelta) -> None:
        """Fail on a finished call's delta (it has no transition), store the rest."""
        if delta.record is None and delta.fields is not None and delta.fields["completed_tool_results"]:
            raise OSError("disk full")
        super().observe(delta)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("concurrency", [1, 2])
def test_no_tool_starts_after_a_finished_call_could_not_be_committed(
    tmp_path: Path, use_async: bool, concurrency: int
) -> None:
    import asyncio

    started: list[int] = []

    @tool
    def note(n: int) -> int:
        """Note that call ``n`` started."""
        started.append(n)
        return n

    store = FullDisk(tmp_path / "runs.db", durable=True)
    script = [calls(*(call("note", f"n{i}", n=i) for i in range(3))), "done"]
    run = Agent(
        chat_generator=ScriptedChatGenerator(script), tools=[note], snapshot_store=store, tool_concurrency=concurrency
    )
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(run.run_async(USER)) if use_async else run.run(USER)
    # The first call to finish could not be committed: only the calls already under way may have started.
    assert 2 not in started
    if concurrency == 1:
        assert started == [0]
    store.close()


class ThreadsSeen(SQLiteSnapshotStore):
    """A durable store that notes the thread each change of a run is written in."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, durable=True)
        self.threads: set[str] = set()

    def observe(self, delta: RunDelta) -> None:
        """Note the thread, then store."""
        import threading

        self.threads.add(threading.current_thread().name)
        super().observe(delta)


def test_run_async_writes_to_its_store_off_the_event_loop(tmp_path: Path) -> None:
    import asyncio
    import threading

    store = ThreadsSeen(tmp_path / "runs.db")

    async def main() -> tuple[dict[str, Any], str]:
        return await agent(store).run_async(USER), threading.current_thread().name

    result, loop_thread = asyncio.run(main())
    assert result["last_message"].text == "done"
    assert store.threads and loop_thread not in store.threads
    [run] = store.runs()
    assert run.status == "done" and store.latest(run.run_id).phase is Phase.DONE
    store.close()


def test_a_snapshot_stored_under_another_run_is_refused(store: SnapshotStore, tmp_path: Path) -> None:
    """A file copied into another run's folder, or a row renamed, would resume the other run under this one's id."""
    first = pause(agent(store), Breakpoint(phase=Phase.LLM_CALL, step=1))
    second = pause(agent(store), Breakpoint(phase=Phase.LLM_CALL, step=1))
    if isinstance(store, JsonFileStore):
        theirs = next((tmp_path / "snapshots" / second.run_id).glob("0*.json"))
        (tmp_path / "snapshots" / first.run_id / "000001_0001_x.json").write_bytes(theirs.read_bytes())
        seq = 1
    else:
        with closing(sqlite3.connect(tmp_path / "runs.db", isolation_level=None)) as db:
            db.execute("UPDATE runs SET run_id = 'swap' WHERE run_id = ?", (first.run_id,))
            db.execute("UPDATE runs SET run_id = ? WHERE run_id = ?", (first.run_id, second.run_id))
        seq = 0
    with pytest.raises(SnapshotError, match=second.run_id):
        store.latest(first.run_id)
    with pytest.raises(SnapshotError, match="one of run"):
        store.load(first.run_id, seq)


def test_a_damaged_store_folder_is_a_snapshot_error_for_its_run(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path)
    first = pause(agent(store), Breakpoint(phase=Phase.LLM_CALL, step=1))
    (tmp_path / first.run_id / "run.json").unlink()
    (tmp_path / first.run_id / "run.json").mkdir()
    with pytest.raises(SnapshotError, match=r"run\.json"):
        store.claim(first.run_id, first.seq)
    assert store.runs() == [], "the listing leaves it out, and lists the others"


# -- a finished run's record ------------------------------------------------------------------------


def any_store(kind: str, tmp_path: Path) -> SnapshotStore:
    if kind == "json":
        return JsonFileStore(tmp_path / "snapshots")
    return SQLiteSnapshotStore(tmp_path / "runs.db", durable=kind == "sqlite durable")


@pytest.mark.parametrize("kind", ["json", "sqlite", "sqlite durable"])
def test_a_finished_run_is_kept_with_its_last_edge_and_forks_from_before_it(kind: str, tmp_path: Path) -> None:
    store = any_store(kind, tmp_path)  # a store of pauses keeps the runs that paused: this one, at step 1
    paused = pause(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    result = agent(store, position=1).run(snapshot=paused)
    [run] = store.runs()
    record = store.latest(run.run_id)
    assert (run.status, run.phase, run.exit_reason) == ("done", Phase.DONE, "text")
    assert (record.phase, record.exit_reason, record.seq) == (Phase.DONE, "text", run.snapshots - 1)
    assert record.trace == [r.to_dict() for r in result["trace"]], "the stored trace ends with EXIT_CHECK -> DONE"
    assert record.messages == [m.to_dict() for m in result["messages"]]
    with pytest.raises(StaleSnapshotError, match="is done; nothing ran"):
        agent(store, position=3).run(snapshot=record)
    # A fork of the record starts where the run stood before its last edge, and ends as it did.
    forked = agent(store, position=3).run(snapshot=record, fork=True)
    assert comparable_result(forked) == comparable_result(result)
    child = next(r for r in store.runs() if r.run_id != run.run_id)
    assert (child.parent_run_id, child.parent_seq, child.phase) == (run.run_id, record.seq, Phase.DONE)


@pytest.mark.parametrize("kind", ["json", "sqlite", "sqlite durable"])
def test_a_failed_run_is_kept_with_its_fail_edge_and_its_error(kind: str, tmp_path: Path) -> None:
    from tests.helpers import fail

    store = any_store(kind, tmp_path)
    script = [calls(call("fail", "x1", reason="the disk is full")), "never"]
    failing = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[fail],
        snapshot_store=store,
        raise_on_tool_invocation_failure=True,
    )
    with pytest.raises(BreakpointException):  # a store of pauses keeps the runs that paused
        failing.run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    with pytest.raises(Exception, match="the disk is full"):
        failing.run(snapshot=store.latest(store.runs()[0].run_id))
    [run] = store.runs()
    record = store.latest(run.run_id)
    assert (run.status, run.phase) == ("failed", Phase.FAILED)
    assert run.exit_reason == record.exit_reason and "RuntimeError: the disk is full" in (run.exit_reason or "")
    assert (record.trace[-1]["source"], record.trace[-1]["trigger"]) == (Phase.TOOL_RUN, "fail")
    # Resuming the failed run's record retries the work that failed, from where it failed.
    with pytest.raises(Exception, match="the disk is full"):
        failing.run(snapshot=record)
    again = store.latest(run.run_id)
    assert again.seq is not None and record.seq is not None and again.seq > record.seq and again.phase is Phase.FAILED


@pytest.mark.parametrize("kind", ["json", "sqlite", "sqlite durable"])
def test_a_run_cancelled_in_process_is_listed_paused_cancelled_and_resumes(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm import RunHandle
    from agentfsm.cli import main
    from agentfsm.errors import RunCancelled
    from agentfsm.pauses import Cancelled

    store = any_store(kind, tmp_path)
    handle = RunHandle()

    @tool
    def cancelling(label: str) -> str:
        """Cancel the run from inside it: it stops at its next transition."""
        handle.cancel()
        return label

    def cancellable(position: int = 0) -> Agent:
        script = [calls(call("cancelling", "c1", label="x")), "done"]
        return Agent(
            chat_generator=ScriptedChatGenerator(script, position=position), tools=[cancelling], snapshot_store=store
        )

    with pytest.raises(RunCancelled):
        cancellable().run(USER, cancel=handle)
    [run] = store.runs()
    assert (run.status, run.exit_reason, run.owner) == ("paused", "cancelled", None), "its cancel edge"
    snapshot = store.latest(run.run_id)
    assert isinstance(snapshot.pause, Cancelled)
    where = tmp_path / ("snapshots" if kind == "json" else "runs.db")
    assert main(["runs", "--store", str(where)]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.startswith(run.run_id) and " paused " in row and row.endswith("  cancelled"), row
    assert cancellable(position=1).run(snapshot=snapshot)["last_message"].text == "done"
    [run] = store.runs()
    assert (run.status, run.exit_reason) == ("done", "text")
