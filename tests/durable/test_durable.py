"""Durable runs on DBOS: the same agent as workflows, crash recovery in real processes, SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from dbos import DBOS, DBOSClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import Agent, ChatMessage, State, hook, tool
from agentfsm.durable import DurableAgent, DurableRun, decide, find_run, launch
from agentfsm.errors import (
    DecisionError,
    DurabilityError,
    HITLBreakpointException,
    SnapshotError,
    StaleSnapshotError,
    ToolInvocationError,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import ToolExecutionDecision
from agentfsm.machine import Phase
from agentfsm.testing import HOOK_CALLS, EffectLog, check_journal, comparable_result, hook_sets, scripted_conversations
from tests.durable import durable_agents
from tests.durable.durable_agents import ATTEMPTS, BLOCK, EFFECTS, JOURNAL, TurnModel, effect
from tests.helpers import RESUME_SCHEMA, add, call, remember, run_cli
from tests.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60

# -- agents run in this process (registered with DBOS before it launches) -----------------------------

RELEASE = threading.Event()


@tool(idempotent=True)
def wait_for_release(label: str) -> str:
    """Wait until the test releases it."""
    RELEASE.wait(TIMEOUT)
    return label.upper()


@tool
def broken(label: str) -> str:
    """Always raises."""
    raise RuntimeError(f"broken {label}")


class WaitingModel(TurnModel):
    """``TurnModel`` whose first reply also calls ``wait_for_release``."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        output = super().run(messages, tools)
        reply = output["replies"][0]
        if reply.tool_calls:
            n = messages[-1].text
            extra = call("wait_for_release", f"call-{n}-w", label=f"{n}-w")
            output = {"replies": [ChatMessage.from_assistant(tool_calls=[*reply.tool_calls, extra])]}
        return output


def _local(model: Any, tools: list[Any], **kwargs: Any) -> Agent:
    return Agent(chat_generator=model, tools=tools, tool_concurrency=4, **kwargs)


class Answering:
    """Answers at once, calling no tool."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("no tool needed")]}


plain = DurableAgent(_local(TurnModel(), [effect]), "plain")
answering = DurableAgent(Agent(chat_generator=Answering()), "answering")
waiting = DurableAgent(_local(WaitingModel(), [effect, wait_for_release]), "waiting")
failing = DurableAgent(_local(TurnModel(tool="broken"), [broken], raise_on_tool_invocation_failure=True), "failing")


@hook
def note_step(state: State) -> None:
    """Note each model call in State."""
    state.set("notes", [f"before model call {state.get('step_count') + 1}"])


starting = DurableAgent(
    Agent(chat_generator=TurnModel(), tools=[effect], state_schema=RESUME_SCHEMA, hooks={"before_run": [note_step]}),
    "starting",
)
stateful = DurableAgent(
    Agent(
        chat_generator=TurnModel(tool="remember", argument="text"),
        tools=[remember],
        state_schema=RESUME_SCHEMA,
        hooks={"before_llm": [note_step]},
    ),
    "stateful",
)


@pytest.fixture
def launched_without_queues(tmp_path: Path) -> Iterator[str]:
    """DBOS launched in this process, listening to no queue (no thread of it draws random numbers while hypothesis does)."""
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest", queues={})
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[str]:
    """DBOS launched in this process on a fresh SQLite system database."""
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest")
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


USER = [ChatMessage.from_user("go")]


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage.from_user(text)]


def step_names(workflow_id: str, db: Any = DBOS) -> list[tuple[int, str]]:
    return [(s["function_id"], s["function_name"]) for s in db.list_workflow_steps(workflow_id)]


# -- in one process ------------------------------------------------------------------------------------------


def test_a_durable_run_gives_the_in_process_result_with_one_step_per_model_and_tool_call(launched: str) -> None:
    result = plain.run(user("1"), run_id="r1")
    expected = plain.agent.run(user("1"))
    assert comparable_result(result) == comparable_result(expected)
    assert result["last_message"].text == "done: 1-A, 1-B"
    # The tools are idempotent: no journal step. Two parallel calls: two steps, ids drawn in call order.
    assert step_names("r1") == [(1, "model"), (2, "tool"), (3, "tool"), (4, "model")]
    # The run's record: done, with the result kept as data.
    assert plain.result("r1")["last_message"].text == "done: 1-A, 1-B"
    # Its snapshot: the finished run's record, its last edge taken, as a snapshot store keeps it.
    final = plain.snapshot("r1")
    assert (final.phase, final.exit_reason, len(final.messages)) == (Phase.DONE, "text", 5)
    assert [(r["source"], r["dest"]) for r in final.trace][-1] == ("EXIT_CHECK", "DONE")


def test_a_durable_run_that_calls_no_tool_counts_none(launched: str) -> None:
    result = answering.run(user("1"), run_id="n1")
    assert {"messages", "last_message", "step_count", "tool_call_counts", "exit_reason", "trace"} <= set(result)
    assert (result["tool_call_counts"], result["step_count"], result["last_message"].text) == ({}, 1, "no tool needed")
    assert answering.result("n1")["tool_call_counts"] == {}
    assert plain.run(user("2"), run_id="n2")["tool_call_counts"] == {"effect": 2}


async def test_run_async_runs_the_workflow_off_the_event_loop(launched: str) -> None:
    result = await plain.run_async(user("1"), run_id="a1")
    assert result["last_message"].text == "done: 1-A, 1-B"
    with pytest.raises(HITLBreakpointException) as paused:
        await durable_agents.confirmed.run_async(user("2"), run_id="a2")
    decisions = [ToolExecutionDecision("effect", True, "call-2-a"), ToolExecutionDecision("effect", True, "call-2-b")]
    done = await durable_agents.confirmed.run_async(snapshot=paused.value.snapshot, decisions=decisions)
    assert done["last_message"].text == "done: 2-A, 2-B"


def test_options_that_hold_objects_of_this_process_are_refused(launched: str) -> None:
    with pytest.raises(ValueError, match=r"\['hook_context', 'streaming_callback'\]"):
        plain.run(user("1"), hook_context={"user": 1}, streaming_callback=print)


def test_the_step_sequence_is_the_same_with_cold_and_warm_caches(launched: str) -> None:
    """Nothing adds a step when a cache is warm: the second run has the first one's steps."""
    plain.run(user("1"), run_id="cold")
    plain.run(user("1"), run_id="warm")
    assert step_names("cold") == step_names("warm")


def test_hooks_and_state_run_as_steps_and_resume_from_their_record(launched: str) -> None:
    result = stateful.run(user("2"), run_id="s1", notes=["start"], prefix="p:")
    expected = stateful.agent.run(user("2"), notes=["start"], prefix="p:")
    assert result["notes"] == ["start", "before model call 1", "p:2-a", "p:2-b", "before model call 2"]
    assert comparable_result(result) == comparable_result(expected)
    names = [name for _, name in step_names("s1")]
    assert names.count("hooks:before_llm") == result["step_count"]


def test_a_failed_run_raises_its_error(launched: str) -> None:
    with pytest.raises(ToolInvocationError, match="RuntimeError: broken 3-a"):
        failing.run(user("3"), run_id="f1")
    # The failed run's record: its tools ran (their results recorded), their results were being taken in.
    snapshot = failing.snapshot("f1")
    assert snapshot.phase is Phase.FAILED and "broken 3-a" in (snapshot.exit_reason or "")
    retried = snapshot.reopened()  # where it failed: resuming its record retries from there
    assert retried.phase is Phase.TOOL_RUN and sorted(retried.completed_tool_results) == ["call-3-a", "call-3-b"]
    record = find_run(DBOS, "f1")
    assert record.status == "failed" and "broken 3-a" in str(record.error)


def test_the_snapshot_of_a_running_run_is_derived_from_its_checkpoints(launched: str) -> None:
    RELEASE.clear()
    handle = waiting.start(user("4"), run_id="w1")
    deadline = time.monotonic() + TIMEOUT
    while [n for _, n in step_names("w1")].count("tool") < 2:  # the two quick calls are recorded
        assert time.monotonic() < deadline
        time.sleep(0.02)
    snapshot = waiting.snapshot("w1")
    assert snapshot.phase is Phase.TOOL_RUN
    assert sorted(snapshot.completed_tool_results) == ["call-4-a", "call-4-b"]
    assert "call-4-w" in snapshot.started_tool_calls
    RELEASE.set()
    assert handle.result(timeout=TIMEOUT)["last_message"].text == "done: 4-A, 4-B, 4-W"


def test_a_run_waiting_for_a_decision_is_a_finished_workflow_and_a_decision_continues_it(launched: str) -> None:
    confirmed = durable_agents.confirmed
    with pytest.raises(HITLBreakpointException) as paused:
        confirmed.run(user("5"), run_id="h1")
    snapshot = paused.value.snapshot
    assert snapshot is not None and snapshot.phase is Phase.CONFIRM and snapshot.seq == 0
    assert DBOS.retrieve_workflow("h1").get_status().status == "SUCCESS"  # nothing waits in memory
    decisions = [
        ToolExecutionDecision("effect", True, "call-5-a"),
        ToolExecutionDecision("effect", False, "call-5-b", feedback="not this one"),
    ]
    result = confirmed.run(snapshot=snapshot, decisions=decisions)
    assert result["last_message"].text.startswith("done: 5-A, ")
    assert "not this one" in result["last_message"].text
    # The same pause again: refused, nothing runs.
    with pytest.raises(StaleSnapshotError, match="moved on"):
        confirmed.run(snapshot=snapshot, decisions=decisions)


def test_a_durable_run_paused_by_its_tools_questions_is_answered_by_id_and_goes_on(launched: str) -> None:
    from agentfsm.errors import AnswerError, InputBreakpointException
    from agentfsm.interrupts import InputAnswer

    asking = durable_agents.asking
    with pytest.raises(InputBreakpointException) as paused:
        asking.run(user("8"), run_id="q1")
    questions = {q.question: q.id for q in paused.value.questions}
    assert sorted(questions) == ["Which account pays 8-a?", "Which account pays 8-b?"]
    assert DBOS.retrieve_workflow("q1").get_status().status == "SUCCESS", "the wait is the record, no process"
    a, b = questions["Which account pays 8-a?"], questions["Which account pays 8-b?"]
    with pytest.raises(AnswerError):
        asking.resume("q1", [InputAnswer(a, "bitcoin"), InputAnswer(b, "savings")])  # not in the schema
    # Answered in the other order, by id: each call reads its own answer.
    result = asking.run(
        snapshot=paused.value.snapshot, decisions=[InputAnswer(b, "checking"), InputAnswer(a, "savings")]
    )
    assert result["last_message"].text == "done: 8-a from savings, 8-b from checking"
    with pytest.raises(StaleSnapshotError, match="moved on"):
        asking.run(snapshot=paused.value.snapshot, decisions=[InputAnswer(a, "savings"), InputAnswer(b, "savings")])


def test_decisions_that_do_not_fit_are_refused_before_anything_runs(launched: str) -> None:
    confirmed = durable_agents.confirmed
    with pytest.raises(HITLBreakpointException):
        confirmed.run(user("6"), run_id="h2")
    with pytest.raises(DecisionError, match="No pending tool call 'call-9'"):
        confirmed.resume("h2", [ToolExecutionDecision("effect", True, "call-9")])
    with pytest.raises(DecisionError, match="is a effect call, not add"):
        confirmed.resume("h2", [ToolExecutionDecision("add", True, "call-6-a")])
    with pytest.raises(DurabilityError, match="No durable run 'nobody'"):
        confirmed.resume("nobody", [])
    plain.run(user("7"), run_id="done-run")
    with pytest.raises(DecisionError, match="is done, not paused"):
        plain.resume("done-run", [ToolExecutionDecision("effect", True, "call-7-a")])
    # The run still waits, and goes on with decisions that fit.
    # Decided through the Python API a process without the agent uses (a DBOSClient underneath).
    continued = decide(
        launched,
        "h2",
        [ToolExecutionDecision("effect", True, "call-6-a"), ToolExecutionDecision("effect", True, "call-6-b")],
    )
    assert continued == "h2/1"
    handle = DurableRun(confirmed, "h2", continued)
    assert handle.result(timeout=TIMEOUT)["last_message"].text == "done: 6-A, 6-B"
    with pytest.raises(DecisionError, match="is done, not paused"):
        confirmed.resume("h2", [ToolExecutionDecision("effect", True, "call-6-a")])


def test_of_simultaneous_decisions_on_one_pause_exactly_one_continues_the_run(launched: str) -> None:
    from agentfsm.durable import continue_run

    confirmed = durable_agents.confirmed
    with pytest.raises(HITLBreakpointException):
        confirmed.run(user("6"), run_id="race")
    decisions = [ToolExecutionDecision("effect", True, "call-6-a"), ToolExecutionDecision("effect", True, "call-6-b")]
    start = threading.Barrier(6)
    outcomes: list[str] = []

    def decide() -> None:
        start.wait()
        try:
            outcomes.append(continue_run(DBOS, "race", decisions))
        except (StaleSnapshotError, DecisionError) as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=decide) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("race/1") == 1, outcomes
    assert DBOS.retrieve_workflow("race/1").get_result()["done"]["exit_reason"] == "text"


def test_run_ids_are_unique(launched: str) -> None:
    plain.run(user("1"), run_id="same")
    with pytest.raises(DurabilityError, match="exists already"):
        plain.start(user("1"), run_id="same")
    with pytest.raises(Exception, match="must not be empty or end in"):
        plain.start(user("1"), run_id="x/2")


def test_a_durable_run_never_starts_without_a_launched_dbos() -> None:
    with pytest.raises(DurabilityError, match="DBOS is not launched"):
        plain.start(user("1"))
    with pytest.raises(DurabilityError, match="DBOS is not launched"):
        plain.run(user("1"))


def test_the_launched_flag_is_read_where_dbos_keeps_it(launched: str) -> None:
    """DBOS has no public "is launched" flag: agentfsm reads its private one, and this fails when DBOS moves it."""
    import dbos._dbos as dbos_core

    from agentfsm.durable.executor import dbos_launched

    assert dbos_core._dbos_global_instance is not None and dbos_core._dbos_global_instance._launched is True
    assert dbos_launched()


def test_durable_agents_refuse_what_they_cannot_keep() -> None:
    from agentfsm.stores import SQLiteSnapshotStore

    with pytest.raises(ValueError, match="without a snapshot_store"):
        DurableAgent(_local(TurnModel(), [effect], snapshot_store=SQLiteSnapshotStore(":memory:")), "stored")
    with pytest.raises(ValueError, match="name must be"):
        DurableAgent(_local(TurnModel(), [effect]), "no spaces")


# -- worker processes ------------------------------------------------------------------------------------------


class Worker:
    """``agentfsm worker`` in its own process; what it prints goes to a file next to the test's."""

    def __init__(
        self, url: str, agent: str, executor_id: str, env: dict[str, str], concurrency: int = 4, drain: int = 0
    ) -> None:
        command = [sys.executable, "-m", "agentfsm.cli", "worker", "--agent", agent, "--system-db", url]
        command += ["--executor-id", executor_id, "--concurrency", str(concurrency), "--drain", str(drain)]
        self.log = Path(env[ATTEMPTS]).with_name(f"worker-{executor_id}-{time.monotonic_ns()}.log")
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        # It says so once DBOS is launched.
        _wait(lambda: "running" in self.log.read_text() or self.process.poll() is not None, "the worker")
        assert self.process.poll() is None, self.log.read_text()

    def kill(self) -> None:
        """``kill -9``."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(TIMEOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        ATTEMPTS: str(tmp_path / "attempts.log"),
        EFFECTS: str(tmp_path / "effects.sqlite"),
        JOURNAL: str(tmp_path / "journal.jsonl"),
        BLOCK: str(tmp_path / "block"),
        "PYTHONPATH": str(ROOT),
    }


def _attempts(tmp_path: Path) -> Counter[str]:
    path = tmp_path / "attempts.log"
    return Counter(line.split()[0] for line in path.read_text().splitlines()) if path.exists() else Counter()


def _effects(tmp_path: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(tmp_path / "effects.sqlite") as db:
        return sorted(label for (label,) in db.execute("SELECT label FROM effects"))


def journal_holds(
    client: DBOSClient, durable: DurableAgent, tmp_path: Path, run_ids: Collection[str] | None = None
) -> None:
    """The journal check over the runs of the system database (``run_ids``: these) and the effects their tools had."""
    from agentfsm.durable import DurableRuns

    log = EffectLog(tmp_path / "journal.jsonl")
    report = check_journal(DurableRuns(client, durable), log, idempotent={"effect"}, run_ids=run_ids, finished=True)
    report.raise_for_problems()


def _wait(condition: Any, what: str, seconds: float = TIMEOUT) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(params=["sqlite", "postgres"])
def system_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh DBOS system database: a SQLite file, or a database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.url(f"t{time.monotonic_ns()}")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The command run in this process: the worker it talks to through the database is a process of its own."""
    return run_cli(*args)


def kill_during_the_slow_call(worker: Worker, client: DBOSClient, tmp_path: Path, run_id: str, slow: str) -> None:
    """``kill -9`` the worker while the run's slow call runs, once its two quick calls are recorded."""
    _wait(lambda: [n for _, n in step_names(run_id, client)].count("tool") == 2, "two recorded calls")
    _wait(lambda: _attempts(tmp_path)[slow] == 1, "the slow call")
    worker.kill()


def test_a_worker_killed_mid_tool_run_is_recovered_without_repeating_finished_calls(
    system_db: str, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    (tmp_path / "block").touch()
    worker = Worker(system_db, "tests.durable.durable_agents:killable", "w1", env)
    client = DBOSClient(system_database_url=system_db)
    try:
        handle = durable_agents.killable.start(user("7"), run_id="k1", client=client)
        kill_during_the_slow_call(worker, client, tmp_path, "k1", "7-slow")
        # Where the run stands now, from its checkpoints: two calls done, the slow one started.
        snapshot = durable_agents.killable.snapshot("k1", client)
        assert snapshot.phase is Phase.TOOL_RUN
        assert sorted(snapshot.completed_tool_results) == ["call-7-a", "call-7-b"]
        assert "call-7-slow" in snapshot.started_tool_calls
        listed = orjson.loads(_cli("runs", "--system-db", system_db, "--json").stdout)
        assert [(r["run_id"], r["status"]) for r in listed] == [("k1", "active")]
        (tmp_path / "block").unlink()
        worker = Worker(system_db, "tests.durable.durable_agents:killable", "w1", env)  # the same worker, restarted
        result = handle.result(timeout=TIMEOUT)
        journal_holds(client, durable_agents.killable, tmp_path)
    finally:
        worker.stop()
        client.destroy()
    expected = durable_agents.killable.agent.run(user("7"))
    assert comparable_result(result) == comparable_result(expected)
    # Finished calls ran once; the call in flight ran again (its tool is idempotent), its effect once.
    assert _attempts(tmp_path) == {"7-a": 1, "7-b": 1, "7-slow": 2}
    assert _effects(tmp_path) == ["7-a", "7-b", "7-slow"]


def test_a_call_in_doubt_of_a_tool_that_is_not_idempotent_waits_for_a_decision_from_another_process(
    system_db: str, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    (tmp_path / "block").touch()
    worker = Worker(system_db, "tests.durable.durable_agents:killable_once", "w1", env)
    client = DBOSClient(system_database_url=system_db)
    try:
        handle = durable_agents.killable_once.start(user("8"), run_id="k2", client=client)
        kill_during_the_slow_call(worker, client, tmp_path, "k2", "8-slow")
        (tmp_path / "block").unlink()
        worker = Worker(system_db, "tests.durable.durable_agents:killable_once", "w1", env)
        with pytest.raises(Exception, match="outcome is unknown") as paused:
            handle.result(timeout=TIMEOUT)
        snapshot = paused.value.snapshot  # type: ignore[attr-defined]
        assert snapshot.outcome_unknown_calls() == {"call-8-slow": "once"}
        assert _attempts(tmp_path) == {"8-a": 1, "8-b": 1, "8-slow": 1}  # nothing ran again unasked
        # A person decides from another process: run it again.
        approved = _cli("approve", "k2", "--system-db", system_db, "--approve", "call-8-slow")
        assert approved.returncode == 0, approved.stderr
        assert "continues as workflow k2/1" in approved.stdout
        client.retrieve_workflow("k2/1").get_result(polling_interval_sec=0.05)  # a worker ran it
        result = durable_agents.killable_once.result("k2", client)
        again = _cli("approve", "k2", "--system-db", system_db)
        assert again.returncode == 1 and "not paused" in again.stderr
        journal_holds(client, durable_agents.killable_once, tmp_path)
    finally:
        worker.stop()
        client.destroy()
    expected = durable_agents.killable_once.agent.run(user("8"))
    assert comparable_result(result) == comparable_result(expected)
    assert _attempts(tmp_path) == {"8-a": 1, "8-b": 1, "8-slow": 2}


def test_a_call_in_doubt_whose_effect_its_reconcile_function_finds_is_settled_without_running_again(
    tmp_path: Path,
) -> None:
    system_db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    env = _env(tmp_path)
    (tmp_path / "block").touch()
    worker = Worker(system_db, "tests.durable.durable_agents:killable_reconciled", "w1", env)
    client = DBOSClient(system_database_url=system_db)
    try:
        handle = durable_agents.killable_reconciled.start(user("9"), run_id="r1", client=client)
        kill_during_the_slow_call(worker, client, tmp_path, "r1", "9-slow")  # its effect is done, its step is not
        (tmp_path / "block").unlink()
        worker = Worker(system_db, "tests.durable.durable_agents:killable_reconciled", "w1", env)
        result = handle.result(timeout=TIMEOUT)
        steps = [n for _, n in step_names("r1", client)]
    finally:
        worker.stop()
        client.destroy()
    assert "reconcile" in steps
    got = comparable_result(result)
    assert [r for r in got["trace"] if r[3] == "reconciled"] == [(1, "TOOL_RUN", "TOOL_RUN", "reconciled")]
    # The uninterrupted run's result, but the edge the crash added.
    got["trace"] = [r for r in got["trace"] if r[3] != "reconciled"]
    assert got == comparable_result(durable_agents.killable_reconciled.agent.run(user("9")))
    # The slow call's effect was found: it did not run again, and nobody was asked.
    assert _attempts(tmp_path) == {"9-a": 1, "9-b": 1, "9-slow": 1}
    assert _effects(tmp_path) == ["9-a", "9-b", "9-slow"]


def test_a_run_cancelled_from_another_process_is_paused_resumes_and_ends_in_done(
    system_db: str, tmp_path: Path
) -> None:
    """On SQLite and PostgreSQL, a worker in its own process: the cancel edge, the listing, the resume, the end."""
    from agentfsm.durable import cancel

    env = _env(tmp_path)
    (tmp_path / "block").touch()
    worker = Worker(system_db, "tests.durable.durable_agents:killable", "w1", env)
    client = DBOSClient(system_database_url=system_db)
    try:
        durable_agents.killable.start(user("20"), run_id="x1", client=client)
        _wait(lambda: [n for _, n in step_names("x1", client)].count("tool") == 2, "two recorded calls")
        _wait(lambda: _attempts(tmp_path)["20-slow"] == 1, "the slow call")
        assert cancel(client, "x1") == "x1"
        (tmp_path / "block").unlink()  # the slow call finishes; its result cannot be recorded any more
        _wait(lambda: find_run(client, "x1").status == "paused", "the cancel edge")
        [row] = orjson.loads(_cli("runs", "--system-db", system_db, "--json").stdout)
        assert (row["status"], row["phase"], row["exit_reason"]) == ("paused", "TOOL_RUN", "cancelled")
        resumed = _cli("resume", "x1", "--system-db", system_db)
        assert resumed.returncode == 0 and "continues as workflow x1/2" in resumed.stdout, resumed.stderr
        client.retrieve_workflow("x1/2").get_result(polling_interval_sec=0.05)  # the worker ran it
        result = durable_agents.killable.result("x1", client)
        # The worker finished it: its record ends in DONE, with its last edge.
        [row] = orjson.loads(_cli("runs", "--system-db", system_db, "--json").stdout)
        assert (row["status"], row["phase"], row["exit_reason"]) == ("done", "DONE", "text")
        shown = _cli("snapshot", "show", "x1", "--system-db", system_db)
        assert "ended        in DONE at step 2" in shown.stdout, shown.stderr
        journal_holds(client, durable_agents.killable, tmp_path)
    finally:
        worker.stop()
        client.destroy()
    expected = durable_agents.killable.agent.run(user("20"))
    assert comparable_result(result) == comparable_result(expected), "the same end as an uncancelled run"
    # The finished calls ran once; the one under way ran again (its tool is idempotent), its effect once.
    assert _attempts(tmp_path) == {"20-a": 1, "20-b": 1, "20-slow": 2}
    assert _effects(tmp_path) == ["20-a", "20-b", "20-slow"]


def test_a_worker_with_another_agent_configuration_refuses_the_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    worker = Worker(url, "tests.durable.durable_reconfigured:parallel", "w1", _env(tmp_path))
    client = DBOSClient(system_database_url=url)
    try:
        handle = durable_agents.parallel.start(user("9"), run_id="c1", client=client)
        with pytest.raises(SnapshotError, match="configured differently"):
            handle.result(timeout=TIMEOUT)
        assert step_names("c1", client) == []  # nothing ran
    finally:
        worker.stop()
        client.destroy()


def test_three_workers_share_one_postgresql_and_a_killed_one_loses_no_run_and_repeats_no_call(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.url(f"many{time.monotonic_ns()}")
    env = _env(tmp_path)
    runs = 200
    # Each worker takes at most 4 runs at once from the queue.
    workers = {name: Worker(url, "tests.durable.durable_agents:parallel", name, env) for name in ("w1", "w2", "w3")}
    client = DBOSClient(system_database_url=url)
    try:
        handles = [durable_agents.parallel.start(user(str(i)), run_id=f"p{i}", client=client) for i in range(runs)]

        def finished() -> int:
            return len(client.list_workflows(status="SUCCESS", load_input=False, load_output=False))

        def under_way(worker: str) -> list[str]:
            found = client.list_workflows(status="PENDING", executor_id=worker, load_input=False, load_output=False)
            return [s.workflow_id for s in found]

        _wait(lambda: finished() >= runs // 3 and under_way("w2"), "a third of the runs")
        workers["w2"].kill()  # mid-way, with runs of its own under way
        killed_at, stranded = finished(), under_way("w2")
        workers["w2"] = Worker(url, "tests.durable.durable_agents:parallel", "w2", env)  # restarted: it recovers them
        results = [handle.result(timeout=TIMEOUT) for handle in handles]
        executors = Counter(s.executor_id for s in client.list_workflows(load_input=False, load_output=False))
        # The runs w2 was running when it died, and a few it was not (each run is read from the database).
        journal_holds(client, durable_agents.parallel, tmp_path, {*stranded, "p0", "p1", "p2", "p3"})
    finally:
        for worker in workers.values():
            worker.stop()
        client.destroy()
    assert killed_at < runs and stranded  # runs were under way in the killed worker: it finished them
    assert all(results[int(run_id[1:])]["exit_reason"] == "text" for run_id in stranded)
    assert [r["last_message"].text for r in results] == [f"done: {i}-A, {i}-B" for i in range(runs)]
    assert set(executors) == {"w1", "w2", "w3"}, executors  # the queue spread the runs
    # Every call's effect exactly once; a call ran twice only if it was under way in w2 when it died.
    labels = [f"{i}-{x}" for i in range(runs) for x in "ab"]
    assert _effects(tmp_path) == sorted(labels)
    attempts = _attempts(tmp_path)
    assert set(attempts) == set(labels)
    again = {label: n for label, n in attempts.items() if n > 1}
    assert all(n == 2 for n in again.values()) and len(again) <= 4 * 2, again


def _resident(pid: int) -> tuple[int, int]:
    """A process's resident memory (kB) and thread count, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])


def _settled(pid: int) -> tuple[int, int]:
    """``_resident`` once the process has settled: its thread count the same for a second (a minute at most).

    A worker says it is running once DBOS is launched; its threads start around then, on a busy
    machine later than on an idle one. Measured settled, two workers compare alike.
    """
    samples = [_resident(pid)]
    deadline = time.monotonic() + TIMEOUT
    while len(samples) < 5 or len({threads for _, threads in samples[-5:]}) > 1:
        assert time.monotonic() < deadline, f"the worker's threads never settled: {samples}"
        time.sleep(0.25)
        samples.append(_resident(pid))
    return samples[-1]


def test_thousands_of_runs_waiting_for_a_decision_are_rows_not_processes_or_memory(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    import psycopg

    url = postgres.url(f"paused{time.monotonic_ns()}")
    env = _env(tmp_path)
    runs = 1_000  # 10,000 concurrent runs are a benchmark's (bench/run.py), not the suite's minutes
    idle = Worker(url, "tests.durable.durable_agents:confirmed", "w1", env)
    baseline = _settled(idle.process.pid)
    idle.stop()
    workers = [
        Worker(url, "tests.durable.durable_agents:confirmed", name, env, concurrency=32) for name in ("w1", "w2")
    ]
    client = DBOSClient(system_database_url=url)
    try:
        with ThreadPoolExecutor(4) as pool:  # a web app's request threads, say
            list(
                pool.map(
                    lambda i: durable_agents.confirmed.start(user(str(i)), run_id=f"h{i}", client=client), range(runs)
                )
            )
        _wait(
            lambda: len(client.list_workflows(status="SUCCESS", load_input=False, load_output=False)) == runs,
            "every run to pause",
            seconds=10 * TIMEOUT,  # thousands of runs: on a busy 2-core machine, a minute or more
        )
        assert client.list_workflows(status=["PENDING", "ENQUEUED"], load_input=False, load_output=False) == []
        for worker in workers:
            worker.stop()
        # A worker started now holds nothing for the waiting runs: no workflow to recover, no thread, no memory.
        workers = [Worker(url, "tests.durable.durable_agents:confirmed", "w1", env)]
        rss, threads = _settled(workers[0].process.pid)
        # (DBOS's own threads come and go: a few either way; a thread or coroutine per run would be 1,000.)
        assert threads <= baseline[1] + 3, (threads, baseline)
        assert rss < baseline[0] * 1.2, (rss, baseline)
        # The cost is rows: one per run, and one per step (its model call and its confirmation).
        with psycopg.connect(url) as db:
            counts = [
                db.execute(f"SELECT count(*) FROM dbos.{t}").fetchone()[0]
                for t in ("workflow_status", "operation_outputs")
            ]  # type: ignore[index]
        assert counts == [runs, 2 * runs]
        # Days later, from another process: a decision, and the run goes on.
        for i in (0, 567, runs - 1):
            assert _cli("approve", f"h{i}", "--system-db", url).returncode == 0
        for i in (0, 567, runs - 1):
            assert (
                durable_agents.confirmed.outcome(
                    client.retrieve_workflow(f"h{i}/1").get_result(polling_interval_sec=0.05), f"h{i}/1"
                )["last_message"].text
                == f"done: {i}-A, {i}-B"
            )
    finally:
        for worker in workers:
            worker.stop()
        client.destroy()


def test_a_database_lost_during_a_step_is_waited_for_and_the_call_is_not_repeated(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.url(f"lost{time.monotonic_ns()}")
    env = _env(tmp_path)
    (tmp_path / "block").touch()
    worker = Worker(url, "tests.durable.durable_agents:killable", "w1", env)
    client = DBOSClient(system_database_url=url)
    try:
        handle = durable_agents.killable.start(user("3"), run_id="l1", client=client)
        _wait(lambda: _attempts(tmp_path)["3-slow"] == 1, "the slow call")
        postgres.stop()  # every connection cut while the call runs
        (tmp_path / "block").unlink()  # the call finishes; its result cannot be recorded yet
        _wait(lambda: "3-slow" in _effects(tmp_path), "the slow call to finish while the database is down")
        postgres.start()
        result = handle.result(timeout=TIMEOUT)
        journal_holds(client, durable_agents.killable, tmp_path)
    finally:
        worker.stop()
        client.destroy()
    assert result["last_message"].text == "done: 3-A, 3-B, 3-SLOW"
    assert _attempts(tmp_path) == {"3-a": 1, "3-b": 1, "3-slow": 1}


# -- the same views as a snapshot store's: the review page, the diagram, the runs list ------------------------


def test_the_review_page_shows_durable_runs_and_sends_decisions_to_the_queue(launched: str) -> None:
    from agentfsm.durable import DurableRuns
    from agentfsm.web import create_app
    from tests.web.test_web import ASGIClient, csrf_and_seq

    confirmed = durable_agents.confirmed
    with pytest.raises(HITLBreakpointException):
        confirmed.run(user("11"), run_id="page-waiting")
    plain.run(user("12"), run_id="page-done")
    runs = DurableRuns(DBOS, confirmed)
    client = ASGIClient(create_app(runs, confirmed.agent, resume=runs.decide))
    try:
        listing = client.get("/").text
        assert "page-waiting" in listing and "waiting for approval" in listing
        assert "page-done" in listing and "<td class='status done'>done</td>" in listing and "<td>text</td>" in listing
        done = client.get("/runs/page-done").text
        assert "done: 12-A, 12-B" in done and "phase DONE" in done
        page = client.get("/runs/page-waiting").text
        assert "call-11-a" in page and "call-11-b" in page
        form = {
            **csrf_and_seq(page),
            "action:call-11-a": "approve",
            "action:call-11-b": "reject",
            "feedback:call-11-b": "no",
        }
        sent = client.post("/runs/page-waiting/decide", data=form)
        assert sent.status_code == 303, sent.text
        result = DBOS.retrieve_workflow("page-waiting/1").get_result()  # a worker of the queue ran it: here
        assert result["done"]["exit_reason"] == "text"
        again = client.post("/runs/page-waiting/decide", data=form)
        assert again.status_code == 409  # that pause is decided
        history = runs.history("page-waiting")
        assert [(i.seq, i.phase) for i in history] == [(0, Phase.CONFIRM), (1, Phase.DONE)]
        assert runs.load("page-waiting", 0).phase is Phase.CONFIRM
    finally:
        client.close()


def test_the_command_line_draws_and_lists_durable_runs(launched: str, tmp_path: Path) -> None:
    confirmed = durable_agents.confirmed
    with pytest.raises(HITLBreakpointException):
        confirmed.run(user("13"), run_id="drawn")
    drawn = _cli(
        "diagram", "--system-db", launched, "--run", "drawn", "--agent", "tests.durable.durable_agents:confirmed"
    )
    assert drawn.returncode == 0, drawn.stderr
    assert "CONFIRM" in drawn.stdout and "classDef current" in drawn.stdout
    listed = _cli("runs", "--system-db", launched)
    assert listed.returncode == 0 and "drawn" in listed.stdout and "paused" in listed.stdout
    missing = _cli("diagram", "--system-db", launched)
    assert missing.returncode == 1 and "--run RUN_ID" in missing.stderr
    # The review page over them, as `agentfsm serve` starts it.
    import httpx

    from tests.postgres import free_port

    port = free_port()
    command = [
        "serve",
        "--system-db",
        launched,
        "--agent",
        "tests.durable.durable_agents:confirmed",
        "--port",
        str(port),
    ]
    server = subprocess.Popen([sys.executable, "-m", "agentfsm.cli", *command], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        page: httpx.Response | None = None
        deadline = time.monotonic() + TIMEOUT
        while page is None and time.monotonic() < deadline:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/runs/drawn")
            except httpx.ConnectError:
                time.sleep(0.1)
        assert page is not None and page.status_code == 200
        assert "waiting for approval" in page.text and "call-13-a" in page.text
    finally:
        server.terminate()
        server.wait(TIMEOUT)


@pytest.mark.parametrize(
    ("durable", "state"), [(plain, {}), (stateful, {"notes": [], "prefix": "p:"})], ids=["tools", "hooks and State"]
)
def test_the_snapshot_derived_after_any_step_resumes_to_the_uninterrupted_result(
    launched: str, durable: DurableAgent, state: dict[str, Any]
) -> None:
    """Cut a finished run's record after each of its steps: the snapshot derived there resumes to the same result."""
    from agentfsm.durable.driver import drive_durable
    from agentfsm.durable.steps import EndOfRecord, RecordedSteps
    from tests.helpers import rerun_in_doubt

    result = durable.run(user("5"), run_id="whole", **state)
    steps = DBOS.list_workflow_steps("whole")
    request = find_run(DBOS, "whole").request
    for cut in range(len(steps)):
        run = durable._run_for(request)
        with pytest.raises(EndOfRecord):
            drive_durable(run, durable.agent.chat_generator, RecordedSteps("whole", steps[:cut]))
        snapshot = run.make_snapshot()
        resumed = durable.agent.run(snapshot=snapshot, decisions=rerun_in_doubt(snapshot))
        assert comparable_result(resumed) == comparable_result(result), f"cut after {cut} steps"


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(script=scripted_conversations([add], max_replies=4), hooks=hook_sets(max_per_point=1), cut=st.integers(0, 40))
def test_durable_runs_make_the_in_process_decisions_and_resume_from_any_step(
    launched_without_queues: str, script: list[ChatMessage], hooks: dict[str, list[Any]], cut: int
) -> None:
    """Generated conversations and hooks: the same result durable as in-process, each hook once; and the
    snapshot derived from the record cut after any step resumes, in-process, to that result."""
    from agentfsm.durable.driver import drive_durable, snapshot_where
    from agentfsm.durable.steps import EndOfRecord, RecordedSteps
    from tests.helpers import rerun_in_doubt

    def agent(position: int = 0) -> Agent:
        return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=[add], hooks=hooks)

    HOOK_CALLS.clear()
    expected = agent().run(USER)
    hooks_in_process = list(HOOK_CALLS)
    HOOK_CALLS.clear()
    run_id = f"generated-{uuid.uuid4().hex[:12]}"
    durable = DurableAgent(agent(), run_id)  # registered after launch: this process runs it
    result = durable.run(USER, run_id=run_id)
    assert comparable_result(result) == comparable_result(expected)
    assert hooks_in_process == HOOK_CALLS
    steps = DBOS.list_workflow_steps(run_id)
    run = durable._run_for(find_run(DBOS, run_id).request)
    try:
        drive_durable(run, durable.agent.chat_generator, RecordedSteps(run_id, steps[: cut % (len(steps) + 1)]))
    except EndOfRecord:
        if run.phase is Phase.IDLE:  # cut before its first phase: no snapshot, a recovered workflow starts over
            return
        snapshot = snapshot_where(run, 0)
        # Cut in DONE (its after_run hooks not recorded): the finished run's record, which a fork goes on from.
        again = agent(position=snapshot.step)
        resumed = again.run(snapshot=snapshot, decisions=rerun_in_doubt(snapshot), fork=snapshot.ended)
        assert comparable_result(resumed) == comparable_result(expected)


def test_a_queued_run_no_worker_took_stands_before_its_first_step(launched_without_queues: str) -> None:
    handle = plain.start(user("1"), run_id="queued", queued=True)  # this process listens to no queue
    assert find_run(DBOS, "queued").status == "active"
    with pytest.raises(DurabilityError, match=r"0.2 s.*queued is ENQUEUED"):
        handle.result(timeout=0.2)
    snapshot = plain.snapshot("queued")
    assert (snapshot.phase, snapshot.step, len(snapshot.messages)) == (Phase.LLM_CALL, 0, 1)
    # With a before_run hook, its first phase is IDLE's work: no snapshot yet, as in a snapshot store.
    starting.start(user("1"), run_id="queued-hooked", queued=True)
    with pytest.raises(SnapshotError, match=r"not started.*queued-hooked is ENQUEUED"):
        starting.snapshot("queued-hooked")


def test_workers_hosting_different_agents_share_the_queue(tmp_path: Path) -> None:
    """DBOS versions an application by its registered workflows: a worker with other agents must still take these runs."""
    from examples.durable_clerk import durable as clerk

    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    worker = Worker(url, "examples.durable_clerk:durable", "clerk-worker", _env(tmp_path))
    launch(url, executor_id="app", queues={})  # this process registers many more durable agents
    try:
        handle = clerk.start(user("balance ann"), run_id="mixed", queued=True)
        assert handle.result(timeout=TIMEOUT)["last_message"].text == "Done: ann: 120 EUR."
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)
        worker.stop()


def test_a_stopped_worker_lets_the_runs_under_way_finish(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    env = _env(tmp_path)
    (tmp_path / "block").touch()
    worker = Worker(url, "tests.durable.durable_agents:killable", "w1", env, drain=30)
    client = DBOSClient(system_database_url=url)
    try:
        handle = durable_agents.killable.start(user("4"), run_id="drained", client=client)
        _wait(lambda: _attempts(tmp_path)["4-slow"] == 1, "the slow call")
        worker.process.send_signal(signal.SIGTERM)  # a redeploy: the worker stops taking runs
        time.sleep(0.5)
        assert worker.process.poll() is None  # it waits for the run under way
        (tmp_path / "block").unlink()
        assert worker.process.wait(TIMEOUT) == 0
        assert handle.result(timeout=TIMEOUT)["last_message"].text == "done: 4-A, 4-B, 4-SLOW"
    finally:
        worker.stop()
        client.destroy()
    assert _attempts(tmp_path) == {"4-a": 1, "4-b": 1, "4-slow": 1}


def test_a_process_that_gives_no_limit_leaves_the_queues_limit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    worker = Worker(url, "tests.durable.durable_agents:parallel", "w1", _env(tmp_path), concurrency=3)
    launch(url, executor_id="app")  # the agentfsm queue, no limit given
    try:
        queue = DBOS.retrieve_queue("agentfsm")
        assert queue is not None and queue.worker_concurrency == 3
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)
        worker.stop()


class MixedModel(TurnModel):
    """``TurnModel`` whose first reply calls ``effect`` (idempotent) and ``once`` (not)."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        output = super().run(messages, tools)
        if output["replies"][0].tool_calls:
            n = messages[-1].text
            calls = [call("effect", f"call-{n}-a", label=f"{n}-a"), call("once", f"call-{n}-b", label=f"{n}-b")]
            output = {"replies": [ChatMessage.from_assistant(tool_calls=calls)]}
        return output


def test_a_crash_mid_tool_run_takes_the_same_call_edges_durable_and_in_process(
    launched_without_queues: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calls journaled before a crash, their outputs lost, go in doubt by the same rule on both paths."""
    from agentfsm import Breakpoint, BreakpointException
    from agentfsm._core.runtime import AgentRun
    from tests.durable.durable_agents import once

    moves: list[tuple[str, str]] = []
    move_call = AgentRun.move_call

    def recording(run: AgentRun, pending: Any, trigger: str) -> None:
        moves.append((pending.key, trigger))
        move_call(run, pending, trigger)

    monkeypatch.setattr(AgentRun, "move_call", recording)
    agent = Agent(chat_generator=MixedModel(), tools=[effect, once])
    durable = DurableAgent(agent, f"mixed-{uuid.uuid4().hex[:8]}")  # registered after launch: this process runs it
    durable.run(user("5"), run_id="mixed")
    steps = DBOS.list_workflow_steps("mixed")
    [journal] = [s["function_id"] for s in steps if s["function_name"] == "tools_started"]
    moves.clear()
    # The workflow again, its journal kept and the outputs of the tool steps after it lost: as after a crash.
    output = DBOS.fork_workflow("mixed", journal + 1).get_result()
    assert "paused" in output
    durable_moves = list(moves)

    with pytest.raises(BreakpointException) as paused:
        agent.run(user("5"), break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    crashed = paused.value.snapshot.model_copy(
        update={"break_point": None, "started_tool_calls": ["call-5-a", "call-5-b"]}
    )
    moves.clear()
    with pytest.raises(BreakpointException):
        agent.run(snapshot=crashed)
    assert moves == durable_moves
    assert ("call-5-a", "rerun") in moves and ("call-5-b", "in_doubt") in moves
