"""A worker stopped with SIGSTOP past its lease while another takes its run over, then continued with SIGCONT.

The stalled worker is a real process (``tests.faults.worker``) running a run of ``tests.faults.world``
on a durable SQLite store with a short lease. The seed picks where it stalls: in a tool, once the
tool's effect happened and before the run wrote its result, or in a model call, before the run wrote
the reply. The test stops the process there (``SIGSTOP``), lets the lease pass, takes the run over
from this process and ends it, then continues the stalled one (``SIGCONT``): its next write is refused
by the fencing check (``StaleSnapshotError``, which it logs), nothing it does after waking reaches the
store or a tool, it goes on to end another run, and every effect counted once (``check_journal``).
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm.serialization import dump_json, load_json
from agentfsm.testing import EffectLog
from tests.faults import world
from tests.faults.seeds import reproduce, seeded
from tests.faults.test_store_faults import ONCE, check_ended_alike, in_this_process, uninterrupted
from tests.faults.worker import store_of

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
#: The stalled worker's lease: short, so that it passes while the worker is stopped.
LEASE = 0.5
#: Where a worker may stall (``world.STALL``): a tool once its effect happened, or the model's second reply.
POINTS = ("charge", "lookup", "send", "refund", "reply2", "reply3")


class StoppableWorker:
    """``python -m tests.faults.worker`` in its own process, its log in a file; answers read within a bound."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with log.open("w") as file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.worker"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=file,
            )

    def ask(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(dump_json(request) + b"\n")
        self.process.stdin.flush()

    def answer(self, what: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT)
        assert ready, f"the worker gave no answer within {TIMEOUT} s for {what}; its log:\n{self.log.read_text()}"
        line = self.process.stdout.readline()
        assert line, f"the worker ended (exit code {self.process.poll()}); its log:\n{self.log.read_text()}"
        answer: dict[str, Any] = load_json(line)
        assert "error" not in answer, answer["error"]
        return answer

    def signal(self, number: signal.Signals) -> None:
        os.kill(self.process.pid, number)

    def close(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(TIMEOUT)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoppableWorker]:
    """One worker for the module: each test stalls it once, and it goes on with the next test's runs."""
    started = StoppableWorker(tmp_path_factory.mktemp("worker") / "worker.log")
    yield started
    started.close()


@pytest.fixture(autouse=True)
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(world.EFFECTS, str(tmp_path / "effects.jsonl"))


def _wait_for(path: Path, what: str, worker: StoppableWorker) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert worker.process.poll() is None, f"the worker ended before {what}; its log:\n{worker.log.read_text()}"
        assert time.monotonic() < deadline, f"timed out after {TIMEOUT} s waiting for {what}"
        time.sleep(0.01)


def _stored(directory: Path) -> tuple[Any, ...]:
    """What the store holds of its runs: each run's record and its number of snapshots."""
    store = store_of("sqlite", str(directory))
    return tuple((r.run_id, r.status, r.owner, r.snapshots, r.taken_over_by) for r in store.runs())


@seeded(2)
def test_a_worker_stopped_past_its_lease_is_fenced_when_it_wakes(
    seed: int, tmp_path: Path, worker: StoppableWorker
) -> None:
    point = random.Random(seed).choice(POINTS)
    schedule = f"sqlite, the worker stopped at {point}, past its lease of {LEASE} s"
    try:
        _stalled_and_fenced(point, tmp_path, worker)
    except AssertionError as error:
        raise AssertionError(f"{reproduce(seed, schedule)}\n{error}") from error


def _stalled_and_fenced(point: str, tmp_path: Path, worker: StoppableWorker) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    effects = os.environ[world.EFFECTS]
    stall = f"{point} {tmp_path}"
    logged = len(worker.log.read_text())
    request = {"kind": "sqlite", "dir": str(runs), "run_id": None, "effects": effects}
    worker.ask({**request, "stall": stall, "lease_seconds": LEASE, "until_failure": True})
    _wait_for(tmp_path / "stalled", f"the worker to reach {point}", worker)
    worker.signal(signal.SIGSTOP)
    # Past its lease (the claim below takes the run over either way, and says from whom).
    time.sleep(LEASE * 1.5)
    [stalled] = store_of("sqlite", str(runs)).runs()
    summary = in_this_process("sqlite", runs, stalled.run_id)
    [taken] = store_of("sqlite", str(runs)).runs()
    assert taken.taken_over_from == stalled.owner is not None, (stalled, taken)
    before, done = _stored(runs), len(world.effect_log().effects())

    (tmp_path / "go").touch()
    worker.signal(signal.SIGCONT)
    answer = worker.answer("the stalled run")
    # Its next write was refused by the fencing check, with the typed error, and it said so.
    assert answer["summary"] is None, answer
    assert [f.split(":")[0] for f in answer["failures"]] == ["StaleSnapshotError"], answer
    assert "was taken over by" in answer["failures"][0], answer
    assert "was taken over by" in worker.log.read_text()[logged:], "the refusal was not logged"
    # Nothing it did after waking reached a tool or the store.
    assert len(world.effect_log().effects()) == done, "the stalled worker ran a tool after it woke"
    assert _stored(runs) == before, "the stalled worker wrote to the store after it woke"
    check_ended_alike("sqlite", runs, summary)

    # It goes on with other runs.
    other = tmp_path / "other"
    other.mkdir()
    worker.ask({**request, "dir": str(other), "effects": str(tmp_path / "other.jsonl")})
    assert worker.answer("another run")["summary"] == uninterrupted("sqlite")[1]
    assert {e.tool_name for e in EffectLog(tmp_path / "other.jsonl").effects()} >= set(ONCE)
