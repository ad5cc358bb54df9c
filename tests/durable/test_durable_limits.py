"""Usage limits, loop detection and cancellation in durable runs: the same outcomes as in process."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, DBOSClient

from agentfsm import Agent, Breakpoint, BreakpointException, ChatMessage, LoopDetection, Phase, UsageLimits, tool
from agentfsm.durable import DurableAgent, DurableRun, cancel, find_run, launch, resume_cancelled
from agentfsm.errors import DurabilityError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import ToolExecutionDecision
from agentfsm.pauses import Cancelled, OutcomeUnknown
from agentfsm.testing import comparable_result
from tests.helpers import SIDE_EFFECTS, add, call, calls

STARTED, RELEASE = threading.Event(), threading.Event()


@tool
def slow_step(label: str) -> str:
    """Say it started, then wait for the test."""
    STARTED.set()
    RELEASE.wait(60)
    SIDE_EFFECTS.append(f"slow_step({label})")
    return label


class CountingModel:
    """Calls ``add`` three times, then answers: its reply depends on the conversation only (a workflow may replay it)."""

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        made = sum(1 for m in messages if m.tool_calls)
        if made < 3:
            return {"replies": [calls(call("add", f"c{made}", a=made, b=1))]}
        return {"replies": [ChatMessage.from_assistant("done")]}


def _agent() -> Agent:
    return Agent(chat_generator=CountingModel(), tools=[add], usage_limits=UsageLimits(requests=2))


class RepeatingModel:
    """Makes the same call with the same arguments, for ever."""

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        made = sum(1 for m in messages if m.tool_calls)
        return {"replies": [calls(call("add", f"r{made}", a=1, b=2))]}


limited = DurableAgent(_agent(), "limited")
slow = DurableAgent(
    Agent(
        chat_generator=ScriptedChatGenerator([calls(call("slow_step", "s1", label="a")), "done"]),
        tools=[slow_step],
    ),
    "slow",
)
timed = DurableAgent(
    Agent(
        chat_generator=ScriptedChatGenerator([calls(call("slow_step", "t1", label="t")), "done"]),
        tools=[slow_step],
        usage_limits=UsageLimits(wall_clock=3600),
    ),
    "timed",
)
looping = DurableAgent(
    Agent(chat_generator=RepeatingModel(), tools=[add], loop_detection=LoopDetection(repeats=3)), "looping"
)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest")
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


def test_a_durable_run_ends_at_its_limit_as_in_process(launched: str) -> None:
    result = limited.run([ChatMessage.from_user("go")], run_id="l1")
    assert result["exit_reason"] == "usage_limit:requests" and result["step_count"] == 2
    assert comparable_result(result) == comparable_result(_agent().run([ChatMessage.from_user("go")]))


def test_a_durable_run_paused_near_its_limit_keeps_its_counts(launched: str) -> None:
    with pytest.raises(BreakpointException) as paused:
        limited.run([ChatMessage.from_user("go")], run_id="l2", break_point=Breakpoint(phase=Phase.EXIT_CHECK, step=1))
    result = limited.run(snapshot=paused.value.snapshot)
    assert result["exit_reason"] == "usage_limit:requests" and result["step_count"] == 2


def test_a_durable_run_that_repeats_itself_ends_as_in_process(launched: str) -> None:
    result = looping.run([ChatMessage.from_user("go")], run_id="loop1")
    assert result["exit_reason"] == "loop_detected" and result["step_count"] == 3
    assert comparable_result(result) == comparable_result(looping.agent.run([ChatMessage.from_user("go")]))


def test_a_durable_run_cancelled_from_a_client_resumes_from_its_recorded_steps(launched: str) -> None:
    SIDE_EFFECTS.clear()
    STARTED.clear()
    RELEASE.clear()
    slow.start([ChatMessage.from_user("go")], run_id="c1")
    assert STARTED.wait(60)
    client = DBOSClient(system_database_url=launched)  # what another process uses
    try:
        assert cancel(client, "c1") == "c1"
        RELEASE.set()  # the call under way finishes; the workflow stops before its next step
        deadline = time.monotonic() + 60
        while find_run(client, "c1").status != "paused":  # it took its cancel edge
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(DurabilityError, match="only an active"):
            cancel(client, "c1")
    finally:
        client.destroy()
    workflow_id = resume_cancelled(DBOS, "c1")
    # The call was under way when the workflow was cancelled, and its result was not recorded: it is
    # in doubt (its tool is not idempotent), and the run waits for a decision on it.
    with pytest.raises(BreakpointException) as in_doubt:
        DurableRun(slow, "c1", workflow_id).result(timeout=60)
    assert isinstance(in_doubt.value.snapshot.pause, OutcomeUnknown)
    settled = ToolExecutionDecision("slow_step", False, "s1", feedback="a")
    result = slow.run(snapshot=in_doubt.value.snapshot, decisions=[settled])
    assert result["last_message"].text == "done"
    assert SIDE_EFFECTS == ["slow_step(a)"], "the call did not run again"


def test_a_durable_runs_wall_clock_counts_from_its_first_start_across_resume_cancelled(launched: str) -> None:
    STARTED.clear()
    RELEASE.clear()
    timed.start([ChatMessage.from_user("go")], run_id="w1")
    assert STARTED.wait(60)
    cancel(DBOS, "w1")
    RELEASE.set()
    deadline = time.monotonic() + 60
    while find_run(DBOS, "w1").status != "paused":  # it took its cancel edge
        assert time.monotonic() < deadline
        time.sleep(0.05)
    before_resume = time.time()
    workflow_id = resume_cancelled(DBOS, "w1")
    with pytest.raises(BreakpointException) as in_doubt:
        DurableRun(timed, "w1", workflow_id).result(timeout=60)
    started_at = in_doubt.value.snapshot.state["run_usage"]["started_at"]
    assert started_at < before_resume, "the replayed workflow reads the clock's start back from its first run"


def test_per_run_limits_and_handles_are_refused_with_what_to_use_instead() -> None:
    from agentfsm import RunHandle
    from agentfsm.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="usage_limits") as refused:
        limited.start([ChatMessage.from_user("go")], usage_limits=UsageLimits(requests=1))
    assert "Agent(usage_limits=" in str(refused.value)
    with pytest.raises(ConfigurationError, match=r"agentfsm\.durable\.cancel"):
        limited.start([ChatMessage.from_user("go")], cancel=RunHandle())


@tool(idempotent=True)
def released_step(label: str) -> str:
    """``slow_step``, for a tool that may run again: a call in doubt after a cancellation reruns by itself."""
    return str(slow_step.function(label))


def _resumable() -> Agent:
    script = [calls(call("released_step", "r1", label="r")), "done"]
    return Agent(chat_generator=ScriptedChatGenerator(script), tools=[released_step])


resumable = DurableAgent(_resumable(), "resumable")


def test_a_durable_cancel_takes_the_cancel_edge_lists_paused_and_resumes_to_the_same_end(launched: str) -> None:
    import subprocess
    import sys

    import orjson

    from agentfsm.durable import DurableRuns
    from agentfsm.web import create_app
    from tests.web.test_web import ASGIClient

    STARTED.clear()
    RELEASE.clear()
    SIDE_EFFECTS.clear()
    resumable.start([ChatMessage.from_user("go")], run_id="k1")
    assert STARTED.wait(60)
    client = DBOSClient(system_database_url=launched)  # what another process uses
    try:
        assert cancel(client, "k1") == "k1"
        RELEASE.set()
        deadline = time.monotonic() + 60
        while find_run(client, "k1").status != "paused":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # As in-process: the run took its cancel edge where it stood, and its record says so.
        record = find_run(client, "k1")
        assert (record.exit_reason, record.phase, record.workflow_id) == ("cancelled", Phase.TOOL_RUN, "k1/1")
        assert record.paused is not None and isinstance(record.paused.pause, Cancelled)
        assert record.paused.started_tool_calls == ["r1"], "the call under way: in doubt when resumed"
        listed = subprocess.run(
            [sys.executable, "-m", "agentfsm.cli", "runs", "--system-db", launched, "--json"],
            capture_output=True,
            check=True,
            timeout=60,
        )
        rows = orjson.loads(listed.stdout)
        assert [(r["run_id"], r["status"], r["exit_reason"]) for r in rows] == [("k1", "paused", "cancelled")]
        page = ASGIClient(create_app(DurableRuns(client, resumable)))
        try:
            listing = page.get("/").text
        finally:
            page.close()
        row = re.search(
            r"<td class='status paused'>paused</td><td>TOOL_RUN</td><td class='num'>1</td><td>[^<]*</td>(.*?)</tr>",
            listing,
        )
        assert row is not None and row.group(1).startswith("<td>cancelled</td>"), listing
    finally:
        client.destroy()
    result = resumable.resume("k1").result(timeout=60)
    expected = _resumable().run([ChatMessage.from_user("go")])

    def ending(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in comparable_result(r).items() if k != "trace"}

    assert ending(result) == ending(expected), "the same end as an uncancelled run"
    assert find_run(DBOS, "k1").status == "done"
