"""One run, one timeline: a stored run resumes once, from its head; forks are explicit; no tool runs twice unasked."""

from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentfsm import (
    Agent,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    ConfigurationError,
    Phase,
    SnapshotError,
    StaleSnapshotError,
    tool,
)
from agentfsm.errors import DecisionError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import ToolExecutionDecision
from agentfsm.stores import JsonFileStore, SnapshotStore, SQLiteSnapshotStore
from agentfsm.testing import comparable_result
from tests.helpers import (
    CRASH_ON,
    KILL_SCRIPT,
    RESUME_SCHEMA,
    SIDE_EFFECTS,
    add,
    call,
    calls,
    flaky,
    remember,
    rerun_in_doubt,
)

ROOT = Path(__file__).resolve().parents[2]
USER = [ChatMessage.from_user("go")]
SCRIPT = [
    calls(call("add", "a1", a=1, b=2), call("add", "a2", a=3, b=4)),
    calls(call("remember", "r1", text="x")),
    "done",
]


def agent(store: SnapshotStore | None, position: int = 0, script: list[Any] = SCRIPT, **kwargs: Any) -> Agent:
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[add, remember, flaky],
        state_schema=RESUME_SCHEMA,
        snapshot_store=store,
        **kwargs,
    )


def paused(a: Agent, break_point: Breakpoint, **kwargs: Any) -> AgentSnapshot:
    with pytest.raises(BreakpointException) as info:
        a.run(**kwargs, break_point=break_point) if "snapshot" in kwargs else a.run(USER, break_point=break_point)
    return info.value.snapshot  # type: ignore[no-any-return]


@pytest.fixture(params=["sqlite durable", "sqlite", "json"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SnapshotStore:
    if request.param == "json":
        return JsonFileStore(tmp_path / "runs")
    return SQLiteSnapshotStore(tmp_path / "runs.db", durable=request.param == "sqlite durable")


def test_a_paused_snapshot_resumes_once(store: SnapshotStore) -> None:
    SIDE_EFFECTS.clear()
    snapshot = paused(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    assert snapshot.seq == store.latest(snapshot.run_id).seq, "the paused snapshot is the run's head"
    agent(store, position=1).run(snapshot=snapshot)
    effects = list(SIDE_EFFECTS)
    assert effects == ["add(1,2)", "add(3,4)", "remember(x)"]
    # A durable store's head moved on with the run; a store of pauses keeps the pause as the head of a done run.
    with pytest.raises(StaleSnapshotError, match=r"(is done|is not its newest).*; nothing ran") as stale:
        agent(store, position=1).run(snapshot=snapshot)
    assert (stale.value.run_id, stale.value.seq) == (snapshot.run_id, snapshot.seq)
    assert isinstance(stale.value, SnapshotError)
    assert effects == SIDE_EFFECTS, "the second resume ran nothing"
    assert store.runs()[0].status == "done"


def test_a_snapshot_the_run_went_on_from_is_stale(store: SnapshotStore) -> None:
    first = paused(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    second = paused(agent(store, position=1), Breakpoint(phase=Phase.TOOL_RUN, step=2), snapshot=first)
    assert second.seq is not None and first.seq is not None and second.seq > first.seq
    SIDE_EFFECTS.clear()
    with pytest.raises(StaleSnapshotError, match=f"Snapshot {first.seq} of run .* is not its newest") as stale:
        agent(store, position=1).run(snapshot=first)
    assert (stale.value.seq, stale.value.head) == (first.seq, second.seq) and SIDE_EFFECTS == []
    undated = first.model_copy(update={"seq": None})
    with pytest.raises(StaleSnapshotError):
        agent(store, position=1).run(snapshot=undated)
    assert agent(store, position=2).run(snapshot=second)["last_message"].text == "done"


def test_a_fork_starts_a_new_run_that_names_its_parent(store: SnapshotStore) -> None:
    first = paused(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    agent(store, position=1).run(snapshot=first)
    forked = agent(store, position=1).run(snapshot=first, fork=True)
    assert forked["last_message"].text == "done"
    runs = {r.run_id: r for r in store.runs()}
    [child] = [r for r in runs.values() if r.run_id != first.run_id]
    assert (child.parent_run_id, child.parent_seq, child.status) == (first.run_id, first.seq, "done")
    assert child.exit_reason == "text", "the store records how a run ended"
    assert runs[first.run_id].parent_run_id is None


def test_a_fork_may_change_state_and_is_still_checked(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    first = paused(agent(store), Breakpoint(phase=Phase.LLM_CALL, step=1))
    edited = first.model_copy(update={"state": {**first.state, "prefix": "edited: "}})
    result = agent(store, position=1).run(snapshot=edited, fork=True)
    assert result["notes"] == ["edited: x"]
    other = Agent(chat_generator=ScriptedChatGenerator(SCRIPT, position=1), tools=[add], snapshot_store=store)
    with pytest.raises(SnapshotError, match="configured differently"):
        other.run(snapshot=first, fork=True, strict=True)


def test_forks_from_every_snapshot_leave_the_parent_byte_identical(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(db, durable=True)
    baseline = comparable_result(agent(None).run(USER))
    agent(store).run(USER)
    [parent] = store.runs()

    def parent_rows() -> list[Any]:
        with sqlite3.connect(db) as reader:
            number = reader.execute("SELECT number FROM runs WHERE run_id = ?", (parent.run_id,)).fetchone()[0]
            run_row = reader.execute("SELECT * FROM runs WHERE number = ?", (number,)).fetchall()
            batches = reader.execute(
                "SELECT * FROM snapshot_batches WHERE key >> 32 = ? ORDER BY key", (number,)
            ).fetchall()
        return run_row + batches

    before = parent_rows()
    history = store.history(parent.run_id)
    for info in history:
        snapshot = store.load(parent.run_id, info.seq)
        forked = agent(store, position=snapshot.step).run(
            snapshot=snapshot, fork=True, decisions=rerun_in_doubt(snapshot)
        )
        assert comparable_result(forked) == baseline, f"fork from snapshot {info.seq} ({info.phase})"
    assert parent_rows() == before, "the parent's rows did not change"
    forks = [r for r in store.runs() if r.run_id != parent.run_id]
    assert sorted(r.parent_seq for r in forks) == [h.seq for h in history]  # type: ignore[type-var]
    assert all(r.parent_run_id == parent.run_id and r.status == "done" for r in forks)


RACER = """
import sys, time
from pathlib import Path
from agentfsm import Agent, StaleSnapshotError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import KILL_SCRIPT, logged_step

run_id, seq, gate = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
store = SQLiteSnapshotStore(sys.argv[1], durable=True)
snapshot = store.load(run_id, seq)  # the pause every racer resumes, however late it starts
agent = Agent(
    chat_generator=ScriptedChatGenerator(KILL_SCRIPT, position=snapshot.step), tools=[logged_step], snapshot_store=store
)
(gate / f"ready-{sys.argv[5]}").touch()
for _ in range(6000):  # until the test says go (every racer is ready), a minute at most
    if (gate / "go").exists():
        break
    time.sleep(0.01)
try:
    agent.run(snapshot=snapshot)
    print("ran")
except StaleSnapshotError as exc:
    print("stale", exc.run_id)
"""


def test_processes_racing_to_resume_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, log, gate = tmp_path / "runs.db", tmp_path / "log.txt", tmp_path / "gate"
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    from tests.helpers import logged_step, wait_until

    store = SQLiteSnapshotStore(db, durable=True)
    first = Agent(chat_generator=ScriptedChatGenerator(KILL_SCRIPT), tools=[logged_step], snapshot_store=store)
    snapshot = paused(first, Breakpoint(phase=Phase.TOOL_RUN, step=1))
    store.close()
    gate.mkdir()
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(db), snapshot.run_id, str(snapshot.seq), str(gate), str(number)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for number in range(8)
    ]
    try:
        # Every racer holds the snapshot and its agent before any of them may go.
        wait_until(lambda: len(list(gate.glob("ready-*"))) == 8, "the eight racers to be ready", seconds=120)
    finally:
        (gate / "go").touch()
    outcomes = [racer.communicate(timeout=120) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), [err for _, err in outcomes]
    said = sorted(out.split()[0] for out, _ in outcomes)
    assert said == ["ran"] + ["stale"] * 7, outcomes
    assert sorted(log.read_text().split()) == ["one", "two"], "the tools ran once (in parallel: in any order)"
    assert SQLiteSnapshotStore(db).runs()[0].status == "done"


KILLED = """
import sys
from agentfsm import Agent, ChatMessage
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import KILL_SCRIPT, logged_step

store = SQLiteSnapshotStore(sys.argv[1], durable=True, lease_seconds=float(sys.argv[2]))
agent = Agent(chat_generator=ScriptedChatGenerator(KILL_SCRIPT), tools=[logged_step], snapshot_store=store, tool_concurrency=1)
agent.run([ChatMessage.from_user("go")])
"""


def test_a_killed_worker_is_taken_over_once_its_lease_expires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import logged_step

    db, log = tmp_path / "runs.db", tmp_path / "log.txt"
    env = {**os.environ, "AGENTFSM_TEST_LOG": str(log), "AGENTFSM_TEST_KILL": "two"}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, str(db), "1.0"], cwd=ROOT, env=env, capture_output=True, timeout=60, check=False
    )
    assert killed.returncode == 9, killed.stderr
    store = SQLiteSnapshotStore(db, durable=True)
    [run] = store.runs()
    assert run.status == "active" and run.owner is not None, "the dead worker's claim is still there"
    dead = run.owner
    snapshot = store.latest(run.run_id)
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    resumed = Agent(
        chat_generator=ScriptedChatGenerator(KILL_SCRIPT, position=snapshot.step),
        tools=[logged_step],
        snapshot_store=store,
        tool_concurrency=1,
    )
    time.sleep(1.1)  # the claim expires: no take_over needed
    # "two" was under way when the worker died: whether it ran is unknown, and it runs again only when asked.
    with pytest.raises(BreakpointException, match=r"\['s2'\] \(logged_step\).*unknown"):
        resumed.run(snapshot=snapshot)
    assert log.read_text() == "one\n"
    [run] = store.runs()
    assert (run.status, run.owner, run.taken_over_from) == ("paused", None, dead)
    in_doubt = store.latest(run.run_id)
    assert in_doubt.break_point == {
        "type": "outcome_unknown",
        "tool_call_ids": ["s2"],
        "tool_names": ["logged_step"],
    }
    result = resumed.run(snapshot=in_doubt, decisions=rerun_in_doubt(in_doubt))
    assert log.read_text() == "one\ntwo\n", "the finished call did not run again"
    assert result["last_message"].text == "done"
    [run] = store.runs()
    assert (run.status, run.taken_over_from) == ("done", dead) and run.taken_over_by not in (None, dead)


def test_a_worker_whose_run_was_taken_over_writes_nothing_more(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    slow = SQLiteSnapshotStore(db, durable=True, lease_seconds=0.05)
    other = SQLiteSnapshotStore(db, durable=True)
    taken: list[int] = []

    @tool
    def stall(label: str) -> str:
        """Outlive the claim, while another process takes the run over."""
        [run] = other.runs()
        time.sleep(0.1)
        head = other.latest(run.run_id)
        other.claim(run.run_id, head.seq)  # the lease expired: no take_over needed
        taken.append(head.seq or 0)
        return label

    script = [calls(call("stall", "s1", label="x")), "done"]
    worker = Agent(chat_generator=ScriptedChatGenerator(script), tools=[stall], snapshot_store=slow)
    with pytest.raises(StaleSnapshotError, match="was taken over by"):
        worker.run(USER)
    [run] = other.runs()
    assert run.owner is not None and run.taken_over_from is not None and run.owner != run.taken_over_from
    assert len(other.history(run.run_id)) == taken[0] + 1, "nothing was written after the take-over"


def test_take_over_before_the_lease_expires(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    first = SQLiteSnapshotStore(db, durable=True)
    snapshot = paused(agent(first), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    first.claim(snapshot.run_id, snapshot.seq)  # a process claims the run, then dies
    second = SQLiteSnapshotStore(db, durable=True)
    with pytest.raises(StaleSnapshotError, match="is being run by"):
        agent(second, position=1).run(snapshot=snapshot)
    assert agent(second, position=1).run(snapshot=snapshot, take_over=True)["last_message"].text == "done"
    with pytest.raises(ConfigurationError, match=r"take_over=True.*snapshot store"):
        agent(None).run(snapshot=snapshot, take_over=True)


def test_a_json_store_claims_a_run_by_creating_its_claim_file(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path / "runs", lease_seconds=60)
    snapshot = paused(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    claim = tmp_path / "runs" / snapshot.run_id / "claim.json"
    claim.write_bytes(orjson.dumps({"owner": "elsewhere:1:x", "lease_until": time.time() + 60}))
    with pytest.raises(StaleSnapshotError, match="is being run by elsewhere:1:x"):
        agent(store, position=1).run(snapshot=snapshot)
    claim.write_bytes(orjson.dumps({"owner": "elsewhere:1:x", "lease_until": time.time() - 1}))
    assert agent(store, position=1).run(snapshot=snapshot)["last_message"].text == "done"
    [run] = store.runs()
    assert (run.status, run.taken_over_from, run.owner) == ("done", "elsewhere:1:x", None)
    assert run.taken_over_by is not None and run.taken_over_by != "elsewhere:1:x"
    assert not claim.exists()


def test_a_call_of_unknown_outcome_can_be_given_its_result(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    script = [calls(call("flaky", "f1", label="one"), call("flaky", "f2", label="two")), "done"]
    SIDE_EFFECTS.clear()
    CRASH_ON.add("two")
    with pytest.raises(KeyboardInterrupt):
        agent(store, script=script, tool_concurrency=1).run(USER)
    snapshot = store.latest(store.runs()[0].run_id)
    assert snapshot.started_tool_calls == ["f1", "f2"] and snapshot.outcome_unknown_calls() == {"f2": "flaky"}
    supplied = ToolExecutionDecision("flaky", False, "f2", feedback="TWO (checked by hand)")
    result = agent(store, script=script, position=1).run(snapshot=snapshot, decisions=[supplied])
    assert SIDE_EFFECTS == ["flaky(one)"], "f2 did not run again"
    results = [m.tool_call_result.result for m in result["messages"] if m.tool_call_result]
    assert results == ["ONE", "TWO (checked by hand)"]
    with pytest.raises(DecisionError, match="'f1' is decided already"):  # it is not in doubt: it ran
        agent(store, script=script, position=1).run(
            snapshot=snapshot, fork=True, decisions=[ToolExecutionDecision("flaky", True, "f1")]
        )


@tool(idempotent=True)
def lookup(key: str) -> str:
    """Read a value; running it twice does no harm."""
    if key in CRASH_ON:
        CRASH_ON.discard(key)
        raise KeyboardInterrupt(f"crash while looking {key} up")
    SIDE_EFFECTS.append(f"lookup({key})")
    return key.upper()


def test_an_idempotent_tool_runs_again_after_a_crash(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    script = [calls(call("lookup", "l1", key="a"), call("lookup", "l2", key="b")), "done"]
    make = lambda position=0: Agent(  # noqa: E731
        chat_generator=ScriptedChatGenerator(script, position=position), tools=[lookup], snapshot_store=store
    )
    SIDE_EFFECTS.clear()
    CRASH_ON.add("b")
    with pytest.raises(KeyboardInterrupt):
        make().run(USER)
    result = make(1).run(snapshot=store.latest(store.runs()[0].run_id))
    assert SIDE_EFFECTS == ["lookup(a)", "lookup(b)"] and result["last_message"].text == "done"
    assert lookup.to_dict()["data"]["idempotent"] is True


def test_stale_snapshot_error_pickles() -> None:
    error = StaleSnapshotError("stale", "run-1", 3, 5, "host:1:x")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.run_id, copy.seq, copy.head, copy.owner) == ("stale", "run-1", 3, 5, "host:1:x")


def test_a_layout_3_database_is_brought_up_to_date(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as old:
        old.executescript(
            "CREATE TABLE runs (number INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, status TEXT NOT NULL, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL);"
            "CREATE TABLE snapshot_batches (key INTEGER PRIMARY KEY, count INTEGER NOT NULL, phase TEXT NOT NULL, "
            "step INTEGER NOT NULL, full INTEGER NOT NULL, entries BLOB NOT NULL);"
            "PRAGMA user_version = 3;"
        )
    store = SQLiteSnapshotStore(db, durable=True)
    snapshot = paused(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    assert agent(store, position=1).run(snapshot=snapshot)["last_message"].text == "done"
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 7


PAYMENTS: dict[str, int] = {}


@tool
def pay(amount: int, idempotency_key: str) -> str:
    """Pay once per key, as a payment API would: the same key again changes nothing."""
    PAYMENTS.setdefault(idempotency_key, amount)
    if "crash" in CRASH_ON:
        CRASH_ON.discard("crash")
        raise KeyboardInterrupt("crash after the payment went through")
    return f"paid {PAYMENTS[idempotency_key]}"


def test_a_call_runs_again_with_the_same_idempotency_key(tmp_path: Path) -> None:
    assert "idempotency_key" not in pay.parameters["properties"], "the model does not see it"
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    script = [calls(call("pay", "p1", amount=5), call("pay", "p2", amount=7)), "paid"]
    make = lambda position=0: Agent(  # noqa: E731
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[pay],
        snapshot_store=store,
        tool_concurrency=1,
    )
    PAYMENTS.clear()
    CRASH_ON.add("crash")
    with pytest.raises(KeyboardInterrupt):
        make().run(USER)
    assert list(PAYMENTS.values()) == [5], "the first payment went through, its result was never recorded"
    snapshot = store.latest(store.runs()[0].run_id)
    result = make(1).run(snapshot=snapshot, decisions=rerun_in_doubt(snapshot))
    assert sorted(PAYMENTS.values()) == [5, 7], "run again with the same key: the payment service deduplicated it"
    assert [m.tool_call_result.result for m in result["messages"] if m.tool_call_result] == ["paid 5", "paid 7"]


def test_async_resumes_claim_the_run_too(tmp_path: Path) -> None:
    import asyncio

    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    snapshot = paused(agent(store), Breakpoint(phase=Phase.TOOL_RUN, step=1))

    async def both() -> list[Any]:
        first = await agent(store, position=1).run_async(snapshot=snapshot)
        try:
            await agent(store, position=1).run_async(snapshot=snapshot)
        except StaleSnapshotError as stale:
            return [first["last_message"].text, stale.run_id]
        return [first["last_message"].text, None]

    assert asyncio.run(both()) == ["done", snapshot.run_id]


def test_a_fork_without_a_store_is_a_new_run() -> None:
    snapshot = paused(agent(None), Breakpoint(phase=Phase.TOOL_RUN, step=1))
    with pytest.raises(BreakpointException) as again:
        agent(None, position=1).run(
            snapshot=snapshot, fork=True, break_point=Breakpoint(phase=Phase.EXIT_CHECK, step=1)
        )
    forked = again.value.snapshot
    assert forked.run_id != snapshot.run_id and forked.trace[: len(snapshot.trace)] == snapshot.trace
