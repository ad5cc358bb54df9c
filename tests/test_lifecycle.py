"""The stored run's lifecycle table: checked when built, every edge taken by both stores, both stores alike."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import Agent, AgentSnapshot, ChatMessage, StaleSnapshotError, lifecycle, tool
from agentfsm.errors import MachineError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.lifecycle import LIFECYCLE, TRIGGER_CHECKS, Lifecycle, LifecycleEdge, Trigger
from agentfsm.pauses import RunStatus
from agentfsm.snapshot import now_iso
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore, json_files, sqlite
from tests.helpers import call, calls

S = RunStatus
Store = SQLiteSnapshotStore | JsonFileStore
KINDS = ("sqlite", "json")


@tool
def slow() -> str:
    """Outlast a third of a short lease: the commit of its result renews the claim."""
    time.sleep(0.02)
    return "slow"


def open_store(kind: str, where: Path, lease_seconds: float = 3600.0) -> Store:
    where.mkdir(parents=True, exist_ok=True)
    if kind == "json":
        return JsonFileStore(where / "runs", lease_seconds=lease_seconds)
    return SQLiteSnapshotStore(where / "runs.db", durable=True, lease_seconds=lease_seconds)


def snapshot(run_id: str = "r", cancelled: bool = False) -> AgentSnapshot:
    return AgentSnapshot.from_dict(
        {
            "run_id": run_id,
            "phase": "LLM_CALL",
            "step": 0,
            "messages": [],
            "state": {},
            "agent_fingerprint": "f",
            "created_at": now_iso(),
            "break_point": {"type": "cancelled"} if cancelled else None,
        }
    )


def head(store: Store, run_id: str = "r") -> int:
    return len(store.history(run_id)) - 1


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[tuple[str, S | None, S]]]:
    """The edges the stores take: (store kind, source, trigger and destination) of every ``move`` that returned."""
    seen: set[tuple[str, S | None, S]] = set()

    def recording(kind: str) -> Callable[..., lifecycle.StoredRun]:
        def move(run_id: str, run: lifecycle.StoredRun, request: lifecycle.Request) -> lifecycle.StoredRun:
            moved = lifecycle.move(run_id, run, request)
            assert moved.status is not None
            seen.add((f"{kind}:{request.trigger.value}", run.status, moved.status))
            return moved

        return move

    monkeypatch.setattr(sqlite, "move", recording("sqlite"))
    monkeypatch.setattr(json_files, "move", recording("json"))
    yield seen


def take_every_edge(kind: str, where: Path) -> None:
    """Drive a store (and a second one on the same file: another process) through every edge it takes."""
    this, other = open_store(kind, where), open_store(kind, where)
    brief = open_store(kind, where, lease_seconds=0.01)  # a process whose claim soon expires
    this.claim("new-claim", None)  # unknown --claim--> active
    this.claim("new-take", None, take_over=True)  # unknown --take_over--> active
    this.claim("fork", None, parent=("r", 0))  # unknown --fork--> active
    this.save(snapshot())  # unknown --save--> paused
    this.save(snapshot())  # paused --save--> paused
    this.claim("r", head(this))  # paused --claim--> active
    this.save(snapshot())  # active --pause--> paused
    this.claim("r", head(this), take_over=True)  # paused --take_over--> active
    this.release("r", S.FAILED, "RuntimeError: broken")  # active --fail--> failed
    this.claim("r", head(this))  # failed --claim--> active
    other.claim("r", head(this), take_over=True)  # active --take_over--> active
    other.save(snapshot(cancelled=True))  # active --cancel--> paused
    brief.claim("r", head(this))
    time.sleep(0.02)
    this.claim("r", head(this))  # active --claim--> active: the lease expired
    this.release("r", S.FAILED)
    this.save(snapshot())  # failed --save--> paused
    brief.claim("r", head(this))
    time.sleep(0.02)
    this.save(snapshot())  # active --save--> paused: the lease expired
    this.claim("r", head(this))
    this.release("r", S.FAILED)
    this.claim("r", head(this), take_over=True)  # failed --take_over--> active
    this.release("r", S.DONE, "text")  # active --finish--> done
    if isinstance(brief, SQLiteSnapshotStore):  # a store that commits while the run goes on renews its lease
        model = ScriptedChatGenerator([calls(call("slow", "s1")), "done"])
        Agent(chat_generator=model, tools=[slow], snapshot_store=brief).run([ChatMessage.from_user("go")])


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_takes_every_edge_of_the_lifecycle(kind: str, tmp_path: Path, taken: set[Any]) -> None:
    take_every_edge(kind, tmp_path)
    mine = {(trigger.removeprefix(f"{kind}:"), source, dest) for trigger, source, dest in taken}
    declared = {(e.trigger.value, e.source, e.dest) for e in LIFECYCLE}
    # A JSON store commits nothing while a run goes on: nothing renews its lease (its documented limit).
    expected = declared - ({("renew", S.ACTIVE, S.ACTIVE)} if kind == "json" else set())
    assert mine == expected


def test_a_done_run_moves_no_more(tmp_path: Path) -> None:
    for kind in KINDS:
        store = open_store(kind, tmp_path / kind)
        store.save(snapshot())
        store.claim("r", 0)
        store.release("r", S.DONE, "text")
        with pytest.raises(StaleSnapshotError, match=r"is done; nothing ran"):
            store.claim("r", 0, take_over=True)
        with pytest.raises(StaleSnapshotError, match=r"is done; nothing ran"):
            store.save(snapshot())
        [run] = store.runs()
        assert (run.status, run.exit_reason, run.owner) == ("done", "text", None)


# -- the table refuses a malformed declaration ------------------------------------------------------


@pytest.mark.parametrize(
    ("edges", "problem"),
    [
        (
            [*LIFECYCLE, LifecycleEdge(Trigger.PAUSE, S.ACTIVE, S.FAILED)],
            r"Two lifecycle edges leave active on 'pause'",
        ),
        ([*LIFECYCLE, LifecycleEdge(Trigger.CLAIM, S.DONE, S.ACTIVE)], r"leaves done, a terminal status; drop it"),
        ([e for e in LIFECYCLE if e.dest is not S.FAILED], r"\['failed'\] are never reached.*declare an edge"),
        ([e for e in LIFECYCLE if e.source is not S.FAILED], r"\['failed'\] have no way out; declare one"),
    ],
)
def test_a_malformed_lifecycle_is_refused_with_how_to_fix_it(edges: list[LifecycleEdge], problem: str) -> None:
    with pytest.raises(MachineError, match=problem):
        Lifecycle(edges, TRIGGER_CHECKS)


def test_a_trigger_without_declared_checks_is_refused() -> None:
    checks = {t: c for t, c in TRIGGER_CHECKS.items() if t is not Trigger.FORK}
    with pytest.raises(MachineError, match=r"'fork' has no checks declared: give it its entry in TRIGGER_CHECKS"):
        Lifecycle(LIFECYCLE, checks)


# -- both stores move runs alike --------------------------------------------------------------------

#: What one process asks of its store: (process, action, argument).
ACTIONS = st.tuples(
    st.sampled_from(["a", "b"]),
    st.sampled_from(["claim", "take_over", "fork", "save", "cancel", "pause", "finish", "fail"]),
    st.sampled_from([-1, 0, 1, None]),  # a claim's snapshot, relative to the head (None: it does not say)
)
#: Claim ids and times differ between two stores: what an outcome is compared without.
_VARYING = re.compile(r"[\w.-]+:\d+:[0-9a-f]{8}|\d{4}-\d\d-\d\dT[\d:.+]+")


def act(store: Store, action: str, offset: int | None, forks: list[int]) -> str:
    """Do ``action`` on run ``r``; its refusal, its claim ids and times left out (empty when it was done)."""
    seq = None if offset is None else head(store) + offset
    try:
        if action in ("claim", "take_over"):
            store.claim("r", seq, take_over=action == "take_over")
        elif action == "fork":
            forks.append(len(forks))
            store.claim(f"fork{len(forks)}", None, parent=("r", seq))
        elif action in ("save", "cancel"):
            store.save(snapshot(cancelled=action == "cancel"))
        else:
            status = {"pause": S.PAUSED, "finish": S.DONE, "fail": S.FAILED}[action]
            store.release("r", status, "text" if status is S.DONE else None)
    except StaleSnapshotError as exc:
        return f"{type(exc).__name__}: {_VARYING.sub('*', str(exc))} {(exc.seq, exc.head)}"
    return ""


def stored(store: Store) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r.run_id,
            r.status,
            r.exit_reason,
            r.snapshots,
            r.owner is None,
            r.taken_over_from is None,
            r.parent_run_id,
            r.parent_seq,
        )
        for r in store.runs()
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(ACTIONS, max_size=12))
def test_any_requests_give_the_same_statuses_and_refusals_on_both_stores(actions: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        processes = {kind: {p: open_store(kind, where / kind) for p in "ab"} for kind in KINDS}
        forks: dict[str, list[int]] = {kind: [] for kind in KINDS}
        for process, action, offset in actions:
            outcomes = {kind: act(processes[kind][process], action, offset, forks[kind]) for kind in KINDS}
            assert outcomes["sqlite"] == outcomes["json"], (process, action, offset)
            assert stored(processes["sqlite"]["a"]) == stored(processes["json"]["a"]), (process, action, offset)
        for kind in KINDS:
            store = processes[kind]["a"]
            if isinstance(store, SQLiteSnapshotStore):
                store.close()
