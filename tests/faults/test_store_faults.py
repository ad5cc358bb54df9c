"""Every write of a run, failed before it happens, failed after it happened, or stalled: the run ends as it would have.

The writes are those an uninterrupted run makes, recorded first (``recorded_writes``): a write the
stores start making is covered without a change here. Each fault hits one write of a run that
charges a card (not idempotent), reads the weather (idempotent), sends a mail a strategy approves
and refunds once a person approved (``tests.faults.world``). The run is then taken to its end by
``world.finish`` (the operator), in the process that saw the fault or in another one
(``tests.faults.worker``; the first process stops at the fault: its later writes all fail), and
must end as the uninterrupted run did, each effect that is not idempotent once, with the journal
check (``check_journal``) finding nothing. A stall is the write waiting while another worker takes
the run over and ends it: the stalled write is refused, and nothing the stalled process does after
it reaches a tool.
"""

from __future__ import annotations

import collections
import functools
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm.errors import StaleSnapshotError
from agentfsm.serialization import dump_json, load_json
from agentfsm.stores import SnapshotStore
from agentfsm.testing import check_journal
from tests.faults import world
from tests.faults.layer import Fault, FaultyJsonFileStore, FaultySQLiteStore, Plan, Write
from tests.faults.seeds import reproduce, seeded
from tests.faults.worker import store_of

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("sqlite", "json")
#: The tools whose effect counts once, whatever the faults.
ONCE = ("charge", "send", "refund")

#: Resumes a run in some process: (kind, directory, run id) -> the run's summary once it ended.
Finisher = Callable[[str, Path, str], dict[str, Any]]


def faulty_store(kind: str, directory: Path, plan: Plan) -> SnapshotStore:
    """The store of ``kind`` in ``directory``, its writes going through ``plan``."""
    if kind == "sqlite":
        return FaultySQLiteStore(directory / "runs.db", plan, durable=True)
    return FaultyJsonFileStore(directory / "json", plan, durable=True)


@functools.cache
def uninterrupted(kind: str) -> tuple[tuple[Write, ...], dict[str, Any]]:
    """The writes an uninterrupted run makes in a store of ``kind``, and how it ends."""
    saved = os.environ.get(world.EFFECTS)
    with tempfile.TemporaryDirectory() as directory:
        os.environ[world.EFFECTS] = str(Path(directory) / "effects.jsonl")
        try:
            plan = Plan()
            _, result = world.finish(lambda: faulty_store(kind, Path(directory), plan), None)
        finally:
            if saved is None:
                del os.environ[world.EFFECTS]
            else:
                os.environ[world.EFFECTS] = saved
    assert result is not None
    return tuple(plan.writes), world.summary(result)


def recorded_writes(kind: str) -> tuple[Write, ...]:
    return uninterrupted(kind)[0]


def cases(*faults: Fault) -> list[Any]:
    """(kind, write number, fault) for every write an uninterrupted run makes, each named ``sqlite-#3-call-after``."""
    found = []
    for kind in KINDS:
        writes = recorded_writes(kind)
        for write in writes:
            for fault in faults:
                if kind == "json" and fault is Fault.STALL:
                    continue  # a JsonFileStore's writes hold the run's lock: nobody can come between (see below)
                found.append(pytest.param(kind, write.number, fault, id=f"{kind}-#{write.number}-{write.kind}-{fault}"))
    return found


def check_ended_alike(kind: str, directory: Path, summary: dict[str, Any] | None) -> None:
    """The run ended as the uninterrupted one, each effect that is not idempotent once, and the journal holds."""
    log = world.effect_log()
    counts = collections.Counter(e.tool_name for e in log.effects())
    assert {name: counts[name] for name in ONCE} == dict.fromkeys(ONCE, 1), counts
    assert counts["lookup"] >= 1
    assert summary == uninterrupted(kind)[1]
    report = check_journal(store_of(kind, str(directory)), log, idempotent=world.IDEMPOTENT, finished=True)
    assert report.ok, report.text()


@pytest.fixture(autouse=True)
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(world.EFFECTS, str(tmp_path / "effects.jsonl"))


@pytest.fixture(scope="module")
def other_process() -> Iterator[Finisher]:
    """One process for the whole module that resumes runs (``tests.faults.worker``)."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.worker"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert worker.stdin is not None and worker.stdout is not None

    def finish(kind: str, directory: Path, run_id: str) -> dict[str, Any]:
        request = {"kind": kind, "dir": str(directory), "run_id": run_id, "effects": os.environ[world.EFFECTS]}
        worker.stdin.write(dump_json(request) + b"\n")  # type: ignore[union-attr]
        worker.stdin.flush()  # type: ignore[union-attr]
        line = worker.stdout.readline()  # type: ignore[union-attr]
        assert line, f"the worker process ended (exit code {worker.poll()})"
        answer = load_json(line)
        assert "error" not in answer, answer["error"]
        # Another run only when this one left no snapshot (nothing ran): it started again.
        assert answer["run_id"] == run_id or not store_of(kind, str(directory)).history(run_id)
        return answer["summary"]  # type: ignore[no-any-return]

    yield finish
    worker.stdin.close()
    worker.wait(timeout=60)
    worker.stdout.close()


def in_this_process(kind: str, directory: Path, run_id: str) -> dict[str, Any]:
    """``Finisher`` in this process, with a store of its own (another worker's connection and claims)."""
    store = store_of(kind, str(directory))
    _, result = world.finish(lambda: store, run_id)
    assert result is not None
    return world.summary(result)


@pytest.mark.parametrize(("kind", "number", "fault"), cases(Fault.BEFORE, Fault.AFTER))
def test_a_failed_write_then_resumed_in_the_same_process(kind: str, number: int, fault: Fault, tmp_path: Path) -> None:
    plan = Plan({number: fault})
    failures: list[BaseException] = []
    _, result = world.finish(lambda: faulty_store(kind, tmp_path, plan), None, failures=failures)
    assert [(w.number, f) for w, f in plan.hit] == [(number, fault)], f"schedule: {plan.schedule()}"
    assert result is not None
    check_ended_alike(kind, tmp_path, world.summary(result))


@pytest.mark.parametrize(("kind", "number", "fault"), cases(Fault.BEFORE, Fault.AFTER))
def test_a_failed_write_then_resumed_in_a_new_process(
    kind: str, number: int, fault: Fault, tmp_path: Path, other_process: Finisher
) -> None:
    plan = Plan({number: fault}, stop_after_fault=True)
    run_id, result = world.finish(lambda: faulty_store(kind, tmp_path, plan), None, until_failure=True)
    assert [(w.number, f) for w, f in plan.hit] == [(number, fault)], f"schedule: {plan.schedule()}"
    if result is None:  # the process stopped at the fault (its later writes failed): another one ends the run
        assert run_id is not None or plan.hit[0][0].number == 0, "a write after the first one left nothing stored"
        summary = other_process(kind, tmp_path, run_id) if run_id is not None else None
        if summary is None:  # the run left nothing in the store: it starts again
            _, again = world.finish(lambda: store_of(kind, str(tmp_path)), None)
            assert again is not None
            summary = world.summary(again)
    else:  # the fault did not stop it (a write that happened is a write)
        summary = world.summary(result)
    check_ended_alike(kind, tmp_path, summary)


@pytest.mark.parametrize("where", ["same", "new"])
@pytest.mark.parametrize(("kind", "number", "fault"), cases(Fault.STALL))
def test_a_stalled_write_while_another_worker_takes_the_run_over(
    kind: str, number: int, fault: Fault, where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    finisher: Finisher = request.getfixturevalue("other_process") if where == "new" else in_this_process
    taken: list[tuple[dict[str, Any], int]] = []

    def take_over(write: Write) -> None:
        if not store_of(kind, str(tmp_path)).history(write.run_id):
            return  # nothing stored yet: there is no run to take over
        taken.append((finisher(kind, tmp_path, write.run_id), len(world.effect_log().effects())))

    plan = Plan({number: fault}, on_stall=take_over)
    failures: list[BaseException] = []
    _, result = world.finish(lambda: faulty_store(kind, tmp_path, plan), None, failures=failures, until_failure=True)
    assert [(w.number, f) for w, f in plan.hit] == [(number, fault)]
    if not taken:  # the stall held nobody up: the run went on
        assert result is not None and not failures
        check_ended_alike(kind, tmp_path, world.summary(result))
        return
    summary, effects_then = taken[0]
    # The stalled write was refused (its claim was taken over), and it did nothing more.
    assert result is None and isinstance(failures[0], StaleSnapshotError), failures
    assert len(world.effect_log().effects()) == effects_then, "the stalled process ran a tool after it woke"
    check_ended_alike(kind, tmp_path, summary)


@seeded(6)
def test_a_seeded_schedule_of_failed_writes(seed: int, tmp_path: Path, other_process: Finisher) -> None:
    """One to three writes fail, each before or after it happened, chosen by the seed, in either store.

    The run is resumed after each failure in the process that saw it or, once its first write
    failed, in another (this one stops there). It ends as the uninterrupted run did.
    """
    rng = random.Random(seed)
    kind = rng.choice(KINDS)
    span = len(recorded_writes(kind)) * 3 // 2  # a failed write adds writes: the run's are more than these
    elsewhere = rng.random() < 0.5
    faults = {n: rng.choice((Fault.BEFORE, Fault.AFTER)) for n in rng.sample(range(span), rng.randint(1, 3))}
    plan = Plan(faults, stop_after_fault=elsewhere)
    schedule = f"{kind}, {plan.schedule()}, resumed {'in another process' if elsewhere else 'here'}"
    try:
        run_id, result = world.finish(lambda: faulty_store(kind, tmp_path, plan), None, until_failure=elsewhere)
        assert {w.number: f for w, f in plan.hit}.items() <= faults.items()
        if result is None:
            summary = other_process(kind, tmp_path, run_id) if run_id is not None else None
            if summary is None:  # the run left nothing in the store: it starts again
                _, again = world.finish(lambda: store_of(kind, str(tmp_path)), None)
                assert again is not None
                summary = world.summary(again)
        else:
            summary = world.summary(result)
        check_ended_alike(kind, tmp_path, summary)
    except AssertionError as error:
        raise AssertionError(f"{reproduce(seed, schedule)}\n{error}") from error


def test_the_journal_check_catches_a_store_that_drops_a_call_result(tmp_path: Path) -> None:
    writes = recorded_writes("sqlite")
    dropped = next(w.number for w in writes if w.kind == "call")
    plan = Plan({dropped: Fault.DROP})
    world.finish(lambda: faulty_store("sqlite", tmp_path, plan), None)
    report = check_journal(store_of("sqlite", str(tmp_path)), world.effect_log(), idempotent=world.IDEMPOTENT)
    assert not report.ok
    assert [p.rule for p in report.problems] == ["timeline_gap"], report.text()
