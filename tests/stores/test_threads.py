"""How the SQLite store keeps threads: what a turn writes, older layouts brought up to date, damage reported."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentfsm import Agent, ChatMessage
from agentfsm.errors import SnapshotError, StoreError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.threads import turn_messages


def stored_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COALESCE(SUM(LENGTH(entries)), 0) FROM snapshot_batches").fetchone()[0])


@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
def test_a_turn_writes_what_it_adds_however_long_the_thread(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path, durable=durable)
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["The same reply."] * 80), system_prompt="Be brief.", snapshot_store=store
    )
    written = []
    for turn in range(80):
        before = stored_bytes(path)
        agent.run([ChatMessage.from_user(f"Question {turn:03d}")], thread="chat")
        written.append(stored_bytes(path) - before)
    # The conversation grew forty-fold; what a turn writes did not (run ids and times differ in a digit or two).
    assert max(written[5:]) - min(written[5:]) <= 16, written
    with sqlite3.connect(path) as db:
        whole = db.execute("SELECT COUNT(*) FROM snapshot_batches WHERE full = 1").fetchone()[0]
    assert whole == 1, "only the thread's first run holds a whole conversation"
    fresh = SQLiteSnapshotStore(path)  # another reader, nothing kept in memory: the conversation read back whole
    head = fresh.latest(fresh.thread("chat").head_run_id)  # type: ignore[union-attr]
    assert len(head.messages) == 1 + 2 * 80 and head.messages[-2]["content"][0]["text"] == "Question 079"
    assert [m.text for m in turn_messages(fresh, fresh.thread_turns("chat")[40])] == ["Question 040", "The same reply."]


def test_a_layout_5_database_gets_the_thread_columns_and_table(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path)
    Agent(chat_generator=ScriptedChatGenerator(["old"]), snapshot_store=store).run(
        [ChatMessage.from_user("before threads")], thread="t"
    )
    run_id = store.thread("t").head_run_id  # type: ignore[union-attr]
    store.close()
    with sqlite3.connect(path) as db:  # the file as layout 5 wrote it
        db.executescript(
            "DROP TABLE run_texts; ALTER TABLE runs DROP COLUMN title; ALTER TABLE runs DROP COLUMN tools; "
            "ALTER TABLE runs DROP COLUMN waits; "
            "DROP TABLE threads; ALTER TABLE runs DROP COLUMN thread_id; ALTER TABLE runs DROP COLUMN base_run_id; "
            "ALTER TABLE runs DROP COLUMN base_seq; ALTER TABLE runs DROP COLUMN base_messages; PRAGMA user_version = 5;"
        )
    upgraded = SQLiteSnapshotStore(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 7
    assert upgraded.latest(run_id).messages[-1]["content"][0]["text"] == "old", "its runs read as before"
    assert upgraded.threads() == []
    agent = Agent(chat_generator=ScriptedChatGenerator(["new"]), snapshot_store=upgraded)
    assert agent.run([ChatMessage.from_user("a thread now")], thread="t")["last_message"].text == "new"
    assert upgraded.thread("t").turns == 1  # type: ignore[union-attr]


def test_a_thread_naming_a_run_that_is_not_stored_is_reported_as_damage(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path)
    agent = Agent(chat_generator=ScriptedChatGenerator(["one", "two"]), snapshot_store=store)
    agent.run([ChatMessage.from_user("a")], thread="t")
    agent.run([ChatMessage.from_user("b")], thread="t")
    first = store.thread_turns("t")[0].run_id
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM runs WHERE run_id = ?", (first,))
    with pytest.raises(StoreError, match="not stored"):
        store.thread_turns("t")
    with pytest.raises(SnapshotError, match="a thread's turn continued it"):
        SQLiteSnapshotStore(path).latest(store.thread("t").head_run_id)  # type: ignore[union-attr]
