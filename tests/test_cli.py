from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm import BreakpointException, ChatMessage, Phase
from agentfsm.breakpoints import Breakpoint
from agentfsm.demo import DEMO_QUESTION, demo_agent
from agentfsm.stores import SQLiteSnapshotStore

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


@pytest.fixture
def paused_file(tmp_path: Path) -> Path:
    with pytest.raises(BreakpointException) as info:
        demo_agent().run([ChatMessage.from_user(DEMO_QUESTION)], break_point=Breakpoint(phase=Phase.TOOL_RUN, step=2))
    return info.value.snapshot.to_file(tmp_path / "paused.json")  # type: ignore[no-any-return]


def test_diagram_to_stdout_and_files(tmp_path: Path, paused_file: Path) -> None:
    done = cli("diagram")
    assert done.returncode == 0 and done.stdout.startswith("---\ntitle: agentfsm machine")
    done = cli("diagram", "--agent", "agentfsm.demo:demo_agent", "--snapshot", str(paused_file), "--format", "dot")
    assert done.returncode == 0 and "paused here, step 2" in done.stdout
    out = tmp_path / "agent.svg"
    assert cli("diagram", "--agent", "agentfsm.demo:demo_agent", "--format", "svg", "-o", str(out)).returncode == 0
    assert out.read_bytes().startswith(b"<?xml")


def test_snapshot_show(paused_file: Path) -> None:
    done = cli("snapshot", "show", str(paused_file))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "paused       before TOOL_RUN at step 2" in out
    assert "break point  Breakpoint(visit_count=0, phase=TOOL_RUN, step=2)" in out
    assert 'c1: calculator({"expression":"26.5 - 21.0"})' in out
    assert "last 5 of 6 messages:" in out and "assistant:  [calls: calculator]" in out
    as_json = json.loads(cli("snapshot", "show", str(paused_file), "--json").stdout)
    assert as_json["phase"] == "TOOL_RUN"


def test_resume_a_snapshot_file(paused_file: Path) -> None:
    done = cli("resume", str(paused_file), "--agent", "tests.test_cli:resumable_demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Lisbon is 26.5 °C and Berlin 21.0 °C: Lisbon is 5.5 °C warmer."
    assert "(exit: text, 3 model calls)" in done.stderr


def resumable_demo() -> object:
    """The demo agent with its scripted model where the paused run left it (two replies used)."""
    agent = demo_agent()
    agent.chat_generator.position = 2  # type: ignore[attr-defined]
    return agent


def test_runs_and_resume_from_the_store(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(db, durable=True)
    agent = demo_agent(snapshot_store=store)
    with pytest.raises(BreakpointException) as info:
        agent.run([ChatMessage.from_user(DEMO_QUESTION)], break_point=Breakpoint(phase=Phase.TOOL_RUN, step=2))
    run_id = info.value.snapshot.run_id
    listing = cli("runs", "--db", str(db))
    assert listing.returncode == 0, listing.stderr
    assert run_id in listing.stdout and "paused" in listing.stdout
    rows = json.loads(cli("runs", "--db", str(db), "--json").stdout)
    assert rows[0]["run_id"] == run_id and rows[0]["status"] == "paused"
    done = cli("resume", run_id, "--db", str(db), "--agent", "tests.test_cli:resumable_demo")
    assert done.returncode == 0, done.stderr
    assert "5.5 °C warmer" in done.stdout
    # The run is done: resuming it again is refused, and nothing runs; a fork starts a new run.
    again = cli("resume", run_id, "--db", str(db), "--agent", "tests.test_cli:resumable_demo")
    assert again.returncode == 1 and f"Run {run_id!r} is done; nothing ran" in again.stderr, again.stderr
    paused_at = info.value.snapshot.seq
    fork = ("resume", run_id, "--db", str(db), "--seq", str(paused_at), "--fork")
    forked = cli(*fork, "--agent", "tests.test_cli:resumable_demo")
    assert forked.returncode == 0 and "5.5 °C warmer" in forked.stdout, forked.stderr
    assert f"forked from run {run_id} at snapshot {paused_at}" in forked.stderr
    rows = json.loads(cli("runs", "--db", str(db), "--json").stdout)
    child = next(r for r in rows if r["run_id"] != run_id)
    assert (child["parent_run_id"], child["parent_seq"], child["status"]) == (run_id, paused_at, "done")
    assert f"{run_id} #{paused_at}" in cli("runs", "--db", str(db)).stdout


def test_errors_follow_cli_conventions(tmp_path: Path) -> None:
    for args, message in [
        (("diagram", "--agent", "nocolon"), "takes module:attribute"),
        (("diagram", "--agent", "no_such_module:x"), "cannot import 'no_such_module'"),
        (("diagram", "--agent", "agentfsm.demo:nothing"), "has no attribute 'nothing'"),
        (("diagram", "--agent", "agentfsm.demo:DEMO_QUESTION"), "is a str, not an Agent"),
        (("snapshot", "show", str(tmp_path / "missing.json")), "Cannot read snapshot file"),
        (("runs", "--db", str(tmp_path / "none.db")), "no database at"),
        (("resume", "r", "--db", str(tmp_path / "none.db"), "--agent", "agentfsm.demo:demo_agent"), "no database at"),
        (("resume", "f.json", "--take-over", "--agent", "agentfsm.demo:demo_agent"), "give its database with --db"),
    ]:
        done = cli(*args)
        assert done.returncode == 1, args
        assert done.stderr.startswith("agentfsm: error: ") and message in done.stderr, done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"format_version": 99}')
    done = cli("snapshot", "show", str(bad))
    assert done.returncode == 1 and "Invalid agent snapshot" in done.stderr
    assert cli("diagram", "--format", "gif").returncode == 2
    for command in ("demo", "diagram", "snapshot", "resume", "runs"):
        assert cli(command, "--help").returncode == 0


def test_snapshot_show_renders_content_part_results() -> None:
    from agentfsm import ImageContent, TextContent, ToolCall
    from agentfsm.cli import _result_text

    parts = ChatMessage.from_tool([TextContent("chart"), ImageContent("AAAA")], ToolCall("c", {}, id="1"))
    assert _result_text(parts) == "chart [image]"
    assert _result_text(ChatMessage.from_user("no result")) == ""
