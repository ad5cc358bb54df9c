"""Stores damaged, locked or shared from outside: each problem is a typed error for the run it touches, never a hang."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentfsm import AgentSnapshot, SnapshotError, StoreError
from agentfsm.snapshot import now_iso
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore

ROOT = Path(__file__).resolve().parents[2]


def snapshot(run_id: str, text: str = "hello", step: int = 1) -> AgentSnapshot:
    """A snapshot of run ``run_id`` whose conversation is one user message, ``text``."""
    message = {"role": "user", "content": [{"text": text}]}
    fields = {"run_id": run_id, "phase": "LLM_CALL", "step": step, "messages": [message], "state": {}}
    return AgentSnapshot.model_validate({**fields, "agent_fingerprint": "f", "created_at": now_iso()})


def within(action: Callable[[], Any], seconds: float = 60) -> Any:
    """What ``action()`` returns or raises, in a thread that must end within ``seconds`` (a hang fails the test)."""
    outcome: list[Any] = []

    def act() -> None:
        try:
            outcome.append(("returned", action()))
        except BaseException as exc:
            outcome.append(("raised", exc))

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still waiting after {seconds} s"
    kind, value = outcome[0]
    if kind == "raised":
        raise value
    return value


# -- two processes writing one folder of JSON files ----------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from agentfsm.stores import JsonFileStore
from tests.stores.test_damaged_stores import snapshot

store, go, name = JsonFileStore(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
(Path(sys.argv[1]).parent / f"ready-{name}").touch()
while not go.exists():
    time.sleep(0.001)
for step in range(30):
    print(store.save(snapshot("shared", f"{name} {step}", step)).seq, flush=True)
"""


def test_two_processes_saving_into_one_json_store_never_share_a_number_or_lose_a_snapshot(tmp_path: Path) -> None:
    directory, go = tmp_path / "store", tmp_path / "go"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(directory), str(go), name],
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for name in ("a", "b")
    ]
    try:
        for name in "ab":
            within(lambda n=name: _wait_for(tmp_path / f"ready-{n}"))
        go.touch()  # both are ready: they write at the same time
        numbers = [int(line) for w in writers for line in w.communicate(timeout=120)[0].split()]
    finally:
        for w in writers:
            w.kill()
    assert sorted(numbers) == list(range(60)), "each save got a number of its own"
    store = JsonFileStore(directory)
    texts = [store.load("shared", seq).messages[0]["content"][0]["text"] for seq in range(60)]
    assert sorted(texts) == sorted(f"{n} {s}" for n in "ab" for s in range(30)), "no snapshot overwrote another"


def _wait_for(path: Path) -> None:
    while not path.exists():
        threading.Event().wait(0.01)


# -- a folder of JSON files that holds what it should not ------------------------------------------------


def test_a_fifo_named_like_a_snapshot_is_refused_for_its_run_and_never_waited_for(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path)
    store.save(snapshot("good"))
    store.save(snapshot("bad"))
    fifo = tmp_path / "bad" / "000001_0002_LLM_CALL.json"
    os.mkfifo(fifo)  # reading it would wait for a writer for ever
    with pytest.raises(SnapshotError, match="not a regular file"):
        within(lambda: store.latest("bad"))
    assert [r.run_id for r in within(store.runs)] == ["good"], "the other runs are listed"
    assert within(lambda: store.latest("good")).run_id == "good"
    os.mkfifo(tmp_path / "good" / "claim.json")
    with pytest.raises(SnapshotError, match="not a regular file"):
        within(lambda: store.claim("good", 0))


def test_a_run_json_with_an_unknown_field_is_refused_for_its_run_only(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path)
    store.save(snapshot("good"))
    store.save(snapshot("bad"))
    (tmp_path / "bad" / "run.json").write_text('{"status": "paused", "surprise": 1}')
    assert [r.run_id for r in store.runs()] == ["good"]
    with pytest.raises(SnapshotError, match=r"'surprise' is not one of its fields"):
        store.claim("bad", 0)


# -- an SQLite file damaged, changed or held by someone else ----------------------------------------------


def test_a_corrupted_page_is_a_store_error_for_its_run_only(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path)
    store.save(snapshot("good"))
    store.save(snapshot("bad", "MARKER" * 5000))  # its snapshot fills several overflow pages
    store.close()
    data = bytearray(path.read_bytes())
    middle = (data.find(b"MARKERMARKER") + data.rfind(b"MARKERMARKER")) // 2
    data[middle // 4096 * 4096 : middle // 4096 * 4096 + 4096] = b"\xff" * 4096
    path.write_bytes(bytes(data))
    store = SQLiteSnapshotStore(path)
    with pytest.raises(StoreError, match="malformed"):
        store.latest("bad")
    with pytest.raises(StoreError, match="malformed"):
        store.history("bad")
    assert sorted(r.run_id for r in store.runs()) == ["bad", "good"]
    assert store.latest("good").run_id == "good"
    store.close()


@pytest.mark.parametrize(("table", "column"), [("runs", "exit_reason"), ("snapshot_batches", "full")])
def test_a_missing_column_is_refused_when_the_store_opens(tmp_path: Path, table: str, column: str) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path)
    store.save(snapshot("run"))
    store.close()
    with sqlite3.connect(path) as db:
        db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    with pytest.raises(StoreError, match=rf"table {table} has no column {column}"):
        SQLiteSnapshotStore(path)


def test_a_database_locked_past_its_timeout_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path, lock_timeout=0.2)
    store.save(snapshot("run"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing, and not letting go
    try:
        with pytest.raises(StoreError, match="locked"):
            within(lambda: store.save(snapshot("other")))
        assert store.latest("run").run_id == "run", "what is committed is read meanwhile"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.save(snapshot("other"))  # once the other process let go
    store.close()


@pytest.mark.parametrize("run_id", ["run-\ud800", "run-\udcff"])
def test_a_run_id_with_a_lone_surrogate_is_refused_typed_by_both_stores(tmp_path: Path, run_id: str) -> None:
    # Such an id comes from outside: a URL of the review page, a folder whose name is not UTF-8.
    sqlite_store, json_store = SQLiteSnapshotStore(tmp_path / "runs.db"), JsonFileStore(tmp_path / "files")
    sqlite_store.save(snapshot("good"))
    json_store.save(snapshot("good"))
    for act in (lambda: sqlite_store.claim(run_id, None), lambda: sqlite_store.latest(run_id)):
        with pytest.raises(StoreError, match="lone surrogate"):
            act()
    for act in (lambda: sqlite_store.history(run_id), lambda: json_store.latest(run_id)):
        with pytest.raises(SnapshotError):
            act()
    if "\ud800" in run_id:  # no file name holds it (\udcff is the byte 0xff of a name that is not UTF-8)
        with pytest.raises(SnapshotError, match="cannot name a folder"):
            json_store.claim(run_id, None)
    assert [r.run_id for r in sqlite_store.runs()] == ["good"]
    sqlite_store.close()


def test_a_run_folder_whose_name_is_not_utf8_is_read_or_refused_for_its_run_only(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path)
    store.save(snapshot("good"))
    foreign = os.fsdecode(b"run-\xff")
    (tmp_path / foreign).mkdir()
    (tmp_path / foreign / "000000_0001_LLM_CALL.json").write_bytes(
        (tmp_path / "good" / "000000_0001_LLM_CALL.json").read_bytes()
    )
    assert sorted(r.run_id for r in store.runs()) == ["good", foreign]
    with pytest.raises(SnapshotError, match="is one of run 'good'"):
        store.latest(foreign)  # the snapshot in it is another run's
