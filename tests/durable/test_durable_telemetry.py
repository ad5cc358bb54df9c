"""A durable run's spans: one trace across the workflows of its segments, and the caller's trace kept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbos import DBOS, DBOSClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfsm import ChatMessage, telemetry
from agentfsm.durable import DurableAgent, launch, list_runs
from agentfsm.errors import HITLBreakpointException
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from tests.durable.durable_agents import TurnModel, _agent, effect
from tests.durable.test_durable import Worker, _env, kill_during_the_slow_call
from tests.durable.traced_agents import SPANS, traced_killable

traced = DurableAgent(
    _agent(TurnModel(), [effect], confirmation_strategies={"effect": BreakpointConfirmationStrategy("")}),
    "traced",
)


@pytest.fixture
def spans(tmp_path: Path) -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    """DBOS launched on a fresh SQLite system database, and runs traced to an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(provider)
    launch(f"sqlite:///{tmp_path / 'dbos.sqlite'}", executor_id="pytest")
    yield exporter, provider
    DBOS.destroy(workflow_completion_timeout_sec=0)
    telemetry.uninstrument()


def test_a_paused_durable_run_continued_by_a_new_workflow_stays_one_trace(
    spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, _ = spans
    with pytest.raises(HITLBreakpointException) as paused:
        traced.run([ChatMessage.from_user("1")], run_id="t1")
    assert paused.value.snapshot.trace_context, "the paused snapshot holds the run's trace context"
    decisions = [ToolExecutionDecision("effect", True, "call-1-a"), ToolExecutionDecision("effect", True, "call-1-b")]
    result = traced.run(snapshot=paused.value.snapshot, decisions=decisions)
    assert result["last_message"].text == "done: 1-A, 1-B"
    finished = exporter.get_finished_spans()
    first, continued = [s for s in finished if s.name == "invoke_agent traced"]
    assert continued.parent is not None and continued.parent.span_id == first.context.span_id
    assert {s.context.trace_id for s in finished} == {first.context.trace_id}
    assert sorted(s.name for s in finished if s.parent and s.parent.span_id == continued.context.span_id) == [
        "chat TurnModel",
        "execute_tool effect",
        "execute_tool effect",
    ]
    assert [r.status for r in list_runs(DBOS)] == ["done"]


def test_a_durable_run_joins_the_trace_of_the_span_that_started_it(
    spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = spans
    with provider.get_tracer("app").start_as_current_span("POST /runs") as request:
        handle = traced.start([ChatMessage.from_user("2")], run_id="t2")
    # The workflow's request carries the caller's trace: a worker that recovers it joins it too.
    assert list_runs(DBOS)[0].request["trace_context"]["traceparent"].split("-")[2] == (
        f"{request.get_span_context().span_id:016x}"
    )
    with pytest.raises(HITLBreakpointException):
        handle.result(timeout=30)
    [agent_span] = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent traced"]
    assert agent_span.parent is not None and agent_span.parent.span_id == request.get_span_context().span_id


def test_a_durable_run_recovered_after_its_worker_was_killed_stays_in_the_trace_that_started_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    spans_file = tmp_path / "spans.jsonl"
    env = {**_env(tmp_path), SPANS: str(spans_file)}
    (tmp_path / "block").touch()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(provider)
    worker = Worker(url, "tests.durable.traced_agents:traced_killable", "w1", env)
    client = DBOSClient(system_database_url=url)
    try:
        with provider.get_tracer("app").start_as_current_span("POST /runs") as request:
            handle = traced_killable.start([ChatMessage.from_user("7")], run_id="k1", client=client)
        kill_during_the_slow_call(worker, client, tmp_path, "k1", "7-slow")
        (tmp_path / "block").unlink()
        worker = Worker(url, "tests.durable.traced_agents:traced_killable", "w1", env)  # restarted: it recovers k1
        result = handle.result(timeout=60)
    finally:
        worker.stop()
        client.destroy()
        telemetry.uninstrument()
    assert result["last_message"].text == "done: 7-A, 7-B, 7-SLOW"
    caller = request.get_span_context()
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    assert {s["trace_id"] for s in spans} == {caller.trace_id}, "both workers' spans are in the caller's trace"
    # The killed worker's agent span never ended; the recovered run's is the caller's child too.
    [recovered] = [s for s in spans if s["name"] == "invoke_agent traced_killable"]
    assert recovered["parent"] == caller.span_id
    killed = {s["parent"] for s in spans if s["name"] != recovered["name"] and s["parent"] != recovered["span_id"]}
    assert len(killed) == 1 and killed != {caller.span_id}
    # The two calls that finished before the kill are the first worker's (the kill comes once their
    # steps are recorded, so the worker may die before it ends the second one's span); the one in
    # flight ran again under the recovered run's span.
    first_worker = sorted(s["name"] for s in spans if s["parent"] in killed)
    assert first_worker[0] == "chat TurnModel" and first_worker[1:] in (
        ["execute_tool effect"] * 2,
        ["execute_tool effect"],
    )
    # Only that call: the two whose steps the recovered workflow found recorded give no events again.
    assert [s["name"] for s in spans if s["parent"] == recovered["span_id"]].count("execute_tool effect") == 1
