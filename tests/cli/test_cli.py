from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import pytest

from agentfsm import Agent, BreakpointException, ChatMessage, Phase, ToolCall, tool
from agentfsm.breakpoints import Breakpoint
from agentfsm.demo import DEMO_QUESTION, demo_agent
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


def cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``agentfsm ARGS`` in a process of its own: for the entry point, DBOS, and deciding from elsewhere."""
    return subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *args], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )


#: Most tests run the command's ``main`` in this process (see ``run_cli``).
cli = run_cli


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
    done = cli("resume", str(paused_file), "--agent", "tests.cli.test_cli:resumable_demo")
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
    listing = cli("runs", "--store", str(db))
    assert listing.returncode == 0, listing.stderr
    assert run_id in listing.stdout and "paused" in listing.stdout
    rows = json.loads(cli("runs", "--store", str(db), "--json").stdout)
    assert rows[0]["run_id"] == run_id and rows[0]["status"] == "paused"
    done = cli("resume", run_id, "--store", str(db), "--agent", "tests.cli.test_cli:resumable_demo")
    assert done.returncode == 0, done.stderr
    assert "5.5 °C warmer" in done.stdout
    # The run is done: resuming it again is refused, and nothing runs; a fork starts a new run.
    again = cli("resume", run_id, "--store", str(db), "--agent", "tests.cli.test_cli:resumable_demo")
    assert again.returncode == 1 and f"Run {run_id!r} is done; nothing ran" in again.stderr, again.stderr
    paused_at = info.value.snapshot.seq
    fork = ("resume", run_id, "--store", str(db), "--seq", str(paused_at), "--fork")
    forked = cli(*fork, "--agent", "tests.cli.test_cli:resumable_demo")
    assert forked.returncode == 0 and "5.5 °C warmer" in forked.stdout, forked.stderr
    assert f"forked from run {run_id} at snapshot {paused_at}" in forked.stderr
    rows = json.loads(cli("runs", "--store", str(db), "--json").stdout)
    child = next(r for r in rows if r["run_id"] != run_id)
    assert (child["parent_run_id"], child["parent_seq"], child["status"]) == (run_id, paused_at, "done")
    assert f"{run_id} #{paused_at}" in cli("runs", "--store", str(db)).stdout


def test_errors_follow_cli_conventions(tmp_path: Path) -> None:
    a_snapshot = tmp_path / "paused.json"
    a_snapshot.write_text('{"format_version": 3}')
    for args, message in [
        (("snapshot", "show", "r1"), "a run id? give --store PATH or --system-db URL"),
        (("resume", "r1", "--agent", "agentfsm.demo:demo_agent"), "a run id? give --store PATH)"),
        (("runs", "--store", str(a_snapshot)), "is a snapshot file, not a store: resume it with agentfsm resume"),
        (("snapshot", "show", str(a_snapshot), "--agent", "nosuch:thing"), "--agent is for --system-db runs"),
        (
            ("decide", "r1", "--system-db", "sqlite:///x.db", "--agent", "a:b", "--approve-all"),
            "--agent is for --store",
        ),
        (("diagram", "--agent", "nocolon"), "takes module:attribute"),
        (("diagram", "--agent", "no_such_module:x"), "cannot import 'no_such_module'"),
        (("diagram", "--agent", "agentfsm.demo:nothing"), "has no attribute 'nothing'"),
        (("diagram", "--agent", "agentfsm.demo:DEMO_QUESTION"), "is a str, not an Agent"),
        (("snapshot", "show", str(tmp_path / "missing.json")), "no snapshot file"),
        (("runs", "--store", str(tmp_path / "none.db")), "no store at"),
        (("resume", "r", "--store", str(tmp_path / "none.db"), "--agent", "agentfsm.demo:demo_agent"), "no store at"),
        (("resume", "f.json", "--take-over", "--agent", "agentfsm.demo:demo_agent"), "give its store with --store"),
        (("snapshot", "show", "f.json", "--seq", "1"), "give its store with --store PATH or --system-db"),
        (("diagram", "--store", str(tmp_path)), "--run RUN_ID"),
    ]:
        done = cli(*args)
        assert done.returncode == 1, args
        assert done.stderr.startswith("agentfsm: error: ") and message in done.stderr, done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"format_version": 99}')
    done = cli_process("snapshot", "show", str(bad))  # the entry point's own exit code and stream
    assert done.returncode == 1 and done.stderr.startswith("agentfsm: error: Invalid agent snapshot"), done.stderr
    assert cli("diagram", "--format", "gif").returncode == 2
    for command in ("demo", "diagram", "snapshot", "resume", "decide", "runs", "serve", "worker"):
        assert cli(command, "--help").returncode == 0


def test_snapshot_show_renders_content_part_results() -> None:
    from agentfsm import ImageContent, TextContent, ToolCall
    from agentfsm.cli import _result_text

    parts = ChatMessage.from_tool([TextContent("chart"), ImageContent("AAAA")], ToolCall("c", {}, id="1"))
    assert _result_text(parts) == "chart [image]"
    assert _result_text(ChatMessage.from_user("no result")) == ""


# -- one language: --store everywhere, one verb for decisions, snapshots from stores, one-line errors -----


@tool
def pay(to: Annotated[str, "Who is paid"], amount: Annotated[int, "How much, in euros"]) -> str:
    """Send a payment."""
    return f"paid {amount} to {to}"


def paying_agent(snapshot_store: object = None, position: int = 1) -> Agent:
    """Two payments, each waiting for a person's decision; by default the model where a paused run left it."""
    calls = [
        ToolCall("pay", {"to": "ann", "amount": 30}, id="p1"),
        ToolCall("pay", {"to": "bob", "amount": 9000}, id="p2"),
    ]
    model = ScriptedChatGenerator(
        [ChatMessage.from_assistant(tool_calls=calls), "Paid Ann; the payment to Bob was refused."], position=position
    )
    return Agent(
        chat_generator=model,
        tools=[pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(tempfile.gettempdir())},
        snapshot_store=snapshot_store,  # type: ignore[arg-type]
    )


def paused_payments(store: object) -> str:
    with pytest.raises(HITLBreakpointException) as info:
        paying_agent(store, position=0).run([ChatMessage.from_user("Pay Ann 30 and Bob 9000.")])
    return info.value.snapshot.run_id  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["sqlite", "json"])
def test_decide_a_paused_run_of_a_snapshot_store(tmp_path: Path, kind: str) -> None:
    where = tmp_path / "runs.db" if kind == "sqlite" else tmp_path / "runs"
    store = SQLiteSnapshotStore(where, durable=True) if kind == "sqlite" else JsonFileStore(where)
    run_id = paused_payments(store)
    getattr(store, "close", lambda: None)()
    agent = ("--agent", "tests.cli.test_cli:paying_agent")
    undecided = cli("decide", run_id, "--store", str(where), *agent)
    assert undecided.returncode == 1 and "p1, p2" in undecided.stderr and "--approve-all" in undecided.stderr
    no_agent = cli("decide", run_id, "--store", str(where), "--approve-all")
    assert no_agent.returncode == 1 and "--agent MODULE:ATTR" in no_agent.stderr
    shown = cli("snapshot", "show", run_id, "--store", str(where))
    assert shown.returncode == 0, shown.stderr
    assert 'p2: pay({"to":"bob","amount":9000}) (waiting for a decision)' in shown.stdout
    decided = cli("decide", run_id, "--store", str(where), *agent, "--approve", "p1", "--reject", "p2:over the limit")
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.strip() == "Paid Ann; the payment to Bob was refused."
    rows = json.loads(cli("runs", "--store", str(where), "--json").stdout)
    assert [(r["run_id"], r["status"]) for r in rows] == [(run_id, "done")]
    if kind == "sqlite":  # a durable store keeps where the run ended; a JSON store keeps its pauses
        final = json.loads(cli("snapshot", "show", run_id, "--store", str(where), "--json").stdout)
        results = json.dumps([m for m in final["messages"] if m["role"] == "tool"])
        assert "paid 30 to ann" in results and "over the limit" in results and "9000 to bob" not in results
    # The first snapshot is still there, by its number; a number the run does not have is an error.
    first = cli("snapshot", "show", run_id, "--store", str(where), "--seq", "0", "--json")
    assert first.returncode == 0 and json.loads(first.stdout)["seq"] == 0, first.stderr
    missing = cli("snapshot", "show", run_id, "--store", str(where), "--seq", "99")
    assert missing.returncode == 1 and missing.stderr.startswith("agentfsm: error: ")


@pytest.mark.parametrize("kind", ["sqlite", "json"])
def test_a_run_decided_from_another_process_ends_in_done_with_its_last_edge(tmp_path: Path, kind: str) -> None:
    where = tmp_path / "runs.db" if kind == "sqlite" else tmp_path / "runs"
    store = SQLiteSnapshotStore(where, durable=True) if kind == "sqlite" else JsonFileStore(where)
    run_id = paused_payments(store)
    getattr(store, "close", lambda: None)()
    agent = ("--agent", "tests.cli.test_cli:paying_agent")
    decided = cli_process("decide", run_id, "--store", str(where), *agent, "--approve-all")
    assert decided.returncode == 0, decided.stderr
    [row] = json.loads(cli("runs", "--store", str(where), "--json").stdout)
    assert (row["status"], row["phase"], row["exit_reason"]) == ("done", "DONE", "text")
    shown = cli("snapshot", "show", run_id, "--store", str(where))
    assert shown.returncode == 0 and "ended        in DONE at step 2 (" in shown.stdout, shown.stderr
    final = json.loads(cli("snapshot", "show", run_id, "--store", str(where), "--json").stdout)
    assert (final["trace"][-1]["source"], final["trace"][-1]["dest"]) == ("EXIT_CHECK", "DONE")
    drawn = cli("diagram", "--store", str(where), "--run", run_id, *agent)
    assert drawn.returncode == 0, drawn.stderr
    assert "note left of DONE : ended here, step 2 - text" in drawn.stdout and "class DONE current" in drawn.stdout
    assert "EXIT_CHECK --> DONE : 1 exit [text reply] \u00d71" in drawn.stdout, "its last edge, taken once"


def test_decide_approve_all_and_the_former_db_option(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(db, durable=True)
    run_id = paused_payments(store)
    store.close()
    drawn = cli("diagram", "--db", str(db), "--run", run_id, "--agent", "tests.cli.test_cli:paying_agent")
    assert drawn.returncode == 0 and "classDef current" in drawn.stdout, drawn.stderr
    decided = cli("decide", run_id, "--db", str(db), "--agent", "tests.cli.test_cli:paying_agent", "--approve-all")
    assert decided.returncode == 0, decided.stderr
    final = json.loads(cli("snapshot", "show", run_id, "--db", str(db), "--json").stdout)
    assert "9000 to bob" in json.dumps(final["messages"])
    for command in ("runs", "snapshot show", "resume", "decide", "diagram", "serve"):
        helped = cli(*command.split(), "--help").stdout
        assert "--store" in helped and "--db" not in helped, command


def test_version() -> None:
    done = cli_process("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"agentfsm {version('agentfsm')}"


def test_a_missing_extra_is_one_line_with_the_fix() -> None:
    blocked = "import sys; sys.modules['dbos'] = None; from agentfsm.cli import main; sys.exit(main(sys.argv[1:]))"
    args = [sys.executable, "-c", blocked, "runs", "--system-db", "sqlite:///runs.db"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "pip install 'agentfsm[dbos]'" in done.stderr, done.stderr
    debugged = subprocess.run([*args, "--debug"], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert debugged.returncode == 1 and "Traceback" in debugged.stderr


def test_an_unreachable_database_is_one_line_with_the_url(tmp_path: Path) -> None:
    # A port nothing listens on: the socket is bound, never listened on, while the command runs.
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        port = blocker.getsockname()[1]
        url = f"postgresql://agent:secret@127.0.0.1:{port}/runs"
        done = cli_process("runs", "--system-db", url)
        debugged = cli_process("runs", "--system-db", url, "--debug")
        worker = cli_process("worker", "--agent", "tests.durable.durable_agents:confirmed", "--system-db", url)
        # A password in the query, and one with an unencoded @ that the driver splits into a host.
        in_query = cli_process("runs", "--system-db", f"postgresql://agent@127.0.0.1:{port}/runs?password=hunter2")
        split = cli_process("runs", "--system-db", f"postgresql://agent:pa@ssword@127.0.0.1:{port}/runs")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"cannot reach the database postgresql://agent:***@127.0.0.1:{port}/runs" in done.stderr
    assert "secret" not in done.stderr
    assert in_query.returncode == 1 and "password=***" in in_query.stderr and "hunter2" not in in_query.stderr
    assert split.returncode == 1 and "agent:***@" in split.stderr, split.stderr
    assert "ssword" not in split.stderr and "pa@" not in split.stderr, split.stderr
    assert debugged.returncode == 1 and "Traceback" in debugged.stderr
    # A worker launches DBOS, which logs its failure with a traceback: held back, said in one line.
    assert worker.returncode == 1 and worker.stderr.count("\n") == 1 and "cannot reach the database" in worker.stderr
    missing_dir = f"sqlite:///{tmp_path}/no/such/dir/runs.db"
    done = cli_process("decide", "r1", "--system-db", missing_dir, "--approve-all")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and missing_dir in done.stderr, done.stderr


def test_a_system_db_that_is_no_dbos_database_is_said_so(tmp_path: Path) -> None:
    typo = tmp_path / "typo.sqlite"
    done = cli_process("runs", "--system-db", f"sqlite:///{typo}")
    assert done.returncode == 1 and "no DBOS system database" in done.stderr and str(typo) in done.stderr, done.stderr
    assert not typo.exists(), "looking for runs creates no database"
    store = tmp_path / "runs.db"
    SQLiteSnapshotStore(store).close()  # an SQLite file, but a snapshot store's
    done = cli_process("runs", "--system-db", f"sqlite:///{store}")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "not a DBOS system database" in done.stderr and "cannot reach" not in done.stderr, done.stderr


def test_a_run_that_pauses_again_says_how_to_go_on(tmp_path: Path) -> None:
    where = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(where, durable=True)
    run_id = paused_payments(store)
    store.close()
    agent = ("--agent", "tests.cli.test_cli:paying_agent")
    # New arguments are checked against the tool before the run goes on, as on the review page.
    unfit = cli("decide", run_id, "--store", str(where), *agent, "--approve", "p1", "--modify", 'p2:{"to": "bob"}')
    assert unfit.returncode == 1 and "'amount'" in unfit.stderr, unfit.stderr
    half = cli("decide", run_id, "--store", str(where), *agent, "--approve", "p1")
    assert half.returncode == 3, half.stderr  # paused again: no answer yet, and no error
    assert "error" not in half.stderr and "waits for a decision on p2" in half.stderr, half.stderr
    assert f"agentfsm decide {run_id} --store {where} --agent tests.cli.test_cli:paying_agent" in half.stderr
    rest = cli("decide", run_id, "--store", str(where), *agent, "--reject", "p2:over the limit")
    assert rest.returncode == 0 and rest.stdout.strip() == "Paid Ann; the payment to Bob was refused.", rest.stderr


def test_resume_a_file_that_pauses_again_then_approve_all(tmp_path: Path) -> None:
    with pytest.raises(HITLBreakpointException) as info:
        paying_agent(position=0).run([ChatMessage.from_user("Pay Ann 30 and Bob 9000.")])
    paused = info.value.snapshot.to_file(tmp_path / "paused.json")
    agent = ("--agent", "tests.cli.test_cli:paying_agent")
    half = cli("resume", str(paused), *agent, "--reject", "p2:no")
    assert half.returncode == 3 and "waits for a decision on p1" in half.stderr, half.stderr
    again = half.stderr.split("go on with: agentfsm resume ")[1].split(" --agent")[0]
    done = cli("resume", again, *agent, "--approve-all")
    assert done.returncode == 0 and done.stdout.strip() == "Paid Ann; the payment to Bob was refused.", done.stderr


def test_each_call_gets_one_decision_and_id_less_calls_answer_to_their_number() -> None:
    from agentfsm.cli import CLIError, decisions_from_args

    with pytest.raises(HITLBreakpointException) as info:
        paying_agent(position=0).run([ChatMessage.from_user("Pay Ann 30 and Bob 9000.")])
    snapshot = info.value.snapshot
    with pytest.raises(CLIError, match="'p1' is named twice"):
        decisions_from_args(snapshot, ["p1"], ["p1:no"], [])
    # A snapshot written before every call got an id knows its calls as "#0", "#1"...
    data = snapshot.to_dict()
    data["pending_tool_calls"] = [{**c, "id": None} for c in data["pending_tool_calls"]]
    old = type(snapshot).from_dict(data)
    assert sorted(old.pending_calls_by_key()) == ["#0", "#1"]
    decisions = decisions_from_args(old, ["0"], ["#1:no"], [])
    assert [d.tool_call_id for d in decisions] == ["#0", "#1"]
    with pytest.raises(CLIError, match="named twice"):
        decisions_from_args(old, ["0"], ["#0:no"], [])


def test_threads_lists_a_stores_threads_and_reads_one_back_turn_by_turn(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteSnapshotStore(path)
    agent = Agent(chat_generator=ScriptedChatGenerator(["Hello.", "Goodbye."]), snapshot_store=store)
    agent.run([ChatMessage.from_user("Hi!")], thread="chat")
    agent.run([ChatMessage.from_user("Bye!")], thread="chat")
    store.fork_thread("chat", store.thread_turns("chat")[0].run_id, new_thread_id="other")
    listing = cli("threads", "--store", str(path))
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:3] == ["thread", "turns", "status"]
    assert any(line.split()[:3] == ["chat", "2", "done"] for line in lines)
    assert any(line.split()[0] == "other" and line.rstrip().endswith("chat") for line in lines)
    rows = json.loads(cli("threads", "--store", str(path), "chat", "--json").stdout)
    assert [[m["text"] for m in row["messages"]] for row in rows] == [["Hi!", "Hello."], ["Bye!", "Goodbye."]]
    shown = cli("threads", "--store", str(path), "chat").stdout
    assert "turn 2" in shown and "assistant Goodbye." in shown
    missing = cli("threads", "--store", str(path), "nope")
    assert missing.returncode == 1 and "no thread 'nope'" in missing.stderr
