"""OpenTelemetry from the event stream: spans and metrics with the SDK's in-memory exporter and reader,
one trace across pause, crash and processes, and OTLP/HTTP to a receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentfsm import Agent, AgentSnapshot, Breakpoint, ChatMessage, StreamingChunk, telemetry, tool
from agentfsm.agent import RunRequest
from agentfsm.demo import DEMO_QUESTION, demo_agent, demo_script
from agentfsm.errors import (
    BadRequestError,
    BreakpointException,
    HITLBreakpointException,
    ModelClientError,
    OutputValidationError,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from agentfsm.machine import Phase
from agentfsm.reconcile import Happened, InDoubtCall, Reconciled
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.tools import ProgressReporter
from tests.helpers import KILL_SCRIPT, call, calls, logged_step

ROOT = Path(__file__).resolve().parents[1]
QUESTION = [ChatMessage.from_user(DEMO_QUESTION)]


@dataclass
class Captured:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


def _instrument(include_content: bool = False) -> Captured:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    telemetry.instrument(tracer_provider, MeterProvider(metric_readers=[reader]), include_content=include_content)
    return Captured(exporter, reader)


@pytest.fixture
def otel() -> Iterator[Captured]:
    yield _instrument()
    telemetry.uninstrument()


@pytest.fixture
def otel_with_content() -> Iterator[Captured]:
    yield _instrument(include_content=True)
    telemetry.uninstrument()


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def only(spans: list[ReadableSpan], prefix: str) -> ReadableSpan:
    [span] = named(spans, prefix)
    return span


def used(tokens_in: int, tokens_out: int, reply: ChatMessage) -> ChatMessage:
    """``reply`` as a model that reports its usage gives it."""
    meta = {"usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out}, "model": "gpt-test-0425"}
    meta["finish_reason"] = "tool_calls" if reply.tool_calls else "stop"
    return ChatMessage.from_assistant(reply.text, meta=meta, tool_calls=reply.tool_calls)


def usage_script() -> list[Any]:
    return [
        used(10, 3, calls(call("add", "c1", a=1, b=2))),
        used(20, 5, ChatMessage.from_assistant("3")),
    ]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def check_run_spans(spans: list[ReadableSpan]) -> None:
    """One agent span; two model calls and one tool call under it; token counts on model-call spans only."""
    agent = only(spans, "invoke_agent")
    assert agent.name == "invoke_agent agent" and agent.kind is SpanKind.INTERNAL and agent.parent is None
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["agentfsm.exit_reason"] == "text" and agent.attributes["agentfsm.step"] == 2
    assert not [k for k in agent.attributes if k.startswith("gen_ai.usage")], "usage is never summed on the agent"
    chats = named(spans, "chat ")
    assert [s.kind for s in chats] == [SpanKind.CLIENT] * 2
    assert [(s.attributes or {})["gen_ai.usage.input_tokens"] for s in chats] == [10, 20]
    assert [(s.attributes or {})["gen_ai.usage.output_tokens"] for s in chats] == [3, 5]
    assert [(s.attributes or {})["gen_ai.response.finish_reasons"] for s in chats] == [("tool_calls",), ("stop",)]
    first = chats[0].attributes or {}
    assert first["gen_ai.provider.name"] == "agentfsm.scripted"
    assert first["gen_ai.response.model"] == "gpt-test-0425"
    tool_span = only(spans, "execute_tool")
    assert tool_span.name == "execute_tool add" and tool_span.kind is SpanKind.INTERNAL
    assert (tool_span.attributes or {})["gen_ai.tool.call.id"] == "c1"
    for child in [*chats, tool_span]:
        assert child.parent is not None and child.parent.span_id == agent.context.span_id
        assert child.context.trace_id == agent.context.trace_id
    edges = [e for e in agent.events if e.name == "agentfsm.transition"]
    assert [(e.attributes or {})["agentfsm.dest"] for e in edges][-1] == "DONE"
    assert "gen_ai.input.messages" not in first and "gen_ai.tool.call.arguments" not in (tool_span.attributes or {})


def test_a_run_is_an_agent_span_with_model_and_tool_spans(otel: Captured) -> None:
    Agent(chat_generator=ScriptedChatGenerator(usage_script()), tools=[add]).run([ChatMessage.from_user("1 + 2?")])
    check_run_spans(otel.finished())
    tokens = {(p.attributes["gen_ai.token.type"], p.sum) for p in otel.points("gen_ai.client.token.usage")}
    assert tokens == {("input", 30), ("output", 8)}
    assert [p.count for p in otel.points("gen_ai.client.operation.duration")] == [2]
    assert [p.attributes["gen_ai.tool.name"] for p in otel.points("gen_ai.execute_tool.duration")] == ["add"]
    assert [p.count for p in otel.points("gen_ai.invoke_agent.duration")] == [1]


def test_an_async_run_gives_the_same_spans(otel: Captured) -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(usage_script()), tools=[add])
    asyncio.run(agent.run_async([ChatMessage.from_user("1 + 2?")]))
    check_run_spans(otel.finished())


def test_a_streamed_run_gives_the_same_spans(otel: Captured) -> None:
    chunks: list[StreamingChunk] = []
    agent = Agent(chat_generator=ScriptedChatGenerator(usage_script()), tools=[add])
    agent.run([ChatMessage.from_user("1 + 2?")], streaming_callback=chunks.append)
    assert chunks
    check_run_spans(otel.finished())


def test_parallel_tool_calls_are_sibling_spans(otel: Captured) -> None:
    demo_agent(tool_concurrency=2).run(QUESTION)
    spans = otel.finished()
    agent = only(spans, "invoke_agent")
    weather = named(spans, "execute_tool get_weather")
    assert sorted((s.attributes or {})["gen_ai.tool.call.id"] for s in weather) == ["w1", "w2"]
    assert {s.parent.span_id for s in weather if s.parent} == {agent.context.span_id}


@tool
def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError("the tool broke")


def test_a_failing_tool_call_is_an_error_span(otel: Captured) -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("broken", "b1", x=1)), "sorry"]), tools=[broken])
    agent.run([ChatMessage.from_user("go")])
    failed = only(otel.finished(), "execute_tool")
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "RuntimeError"
    [point] = otel.points("gen_ai.execute_tool.duration")
    assert point.attributes["error.type"] == "RuntimeError"
    assert only(otel.finished(), "invoke_agent").status.status_code is StatusCode.UNSET  # the run went on


class Unreachable:
    def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        raise ModelClientError("the model server is down")


def test_a_model_failure_fails_the_model_and_agent_spans(otel: Captured) -> None:
    with pytest.raises(ModelClientError):
        Agent(chat_generator=Unreachable()).run([ChatMessage.from_user("hi")])
    spans = otel.finished()
    chat = only(spans, "chat")
    agent = only(spans, "invoke_agent")
    assert chat.name == "chat Unreachable" and (chat.attributes or {})["gen_ai.provider.name"] == "_OTHER"
    for span in (chat, agent):
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "ModelClientError"
    [point] = otel.points("gen_ai.client.operation.duration")
    assert point.attributes["error.type"] == "ModelClientError"


NUMBER = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class Refusing:
    """A model server answering 400 with a body that quotes the request."""

    def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        raise BadRequestError("The server answered 400: {'echo': 'the user's secret plan'}", status_code=400, body="")


@pytest.mark.parametrize("include_content", [False, True])
def test_error_messages_are_content_and_reach_span_statuses_only_when_asked(include_content: bool) -> None:
    captured = _instrument(include_content=include_content)
    try:
        with pytest.raises(BadRequestError):
            Agent(chat_generator=Refusing()).run([ChatMessage.from_user("the user's secret plan")])
        script = [calls(call("broken", "b1", x=1)), "the answer: the user's secret plan"]
        with pytest.raises(OutputValidationError):
            Agent(
                chat_generator=ScriptedChatGenerator(script), tools=[broken], output_type=NUMBER, output_retries=0
            ).run([ChatMessage.from_user("go")])
    finally:
        telemetry.uninstrument()
    failed = [s for s in captured.finished() if s.status.status_code is StatusCode.ERROR]
    assert {s.name.split()[0] for s in failed} == {"chat", "invoke_agent", "execute_tool"}
    descriptions = [s.status.description or "" for s in failed]
    quoted = [d for d in descriptions if "secret plan" in d or "the tool broke" in d]
    if include_content:
        assert len(quoted) == 3  # the model call's, and both runs'
    else:
        assert quoted == [] and set(descriptions) == {"BadRequestError", "OutputValidationError", "RuntimeError"}


def test_content_is_recorded_only_when_asked(otel_with_content: Captured) -> None:
    Agent(chat_generator=ScriptedChatGenerator(usage_script()), tools=[add]).run([ChatMessage.from_user("1 + 2?")])
    spans = otel_with_content.finished()
    first, second = named(spans, "chat")
    sent = json.loads((first.attributes or {})["gen_ai.input.messages"])  # type: ignore[arg-type]
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "1 + 2?"}]}]
    replied = json.loads((second.attributes or {})["gen_ai.output.messages"])  # type: ignore[arg-type]
    assert replied == [{"role": "assistant", "parts": [{"type": "text", "content": "3"}]}]
    tool_span = only(spans, "execute_tool")
    assert json.loads((tool_span.attributes or {})["gen_ai.tool.call.arguments"]) == {"a": 1, "b": 2}  # type: ignore[arg-type]
    assert (tool_span.attributes or {})["gen_ai.tool.call.result"] == "3"


@tool
def index(folder: str, report_progress: ProgressReporter) -> str:
    """Index a folder's files, reporting each."""
    for done in range(1, 4):
        report_progress(done, 3, f"indexed {folder}/secret-{done}.txt")
    return f"{folder} indexed"


def progress_agent() -> Agent:
    reply = calls(call("index", "i1", folder="alice"), call("index", "i2", folder="bob"))
    return Agent(chat_generator=ScriptedChatGenerator([reply, "done"]), tools=[index], tool_concurrency=2)


def progress_events(span: ReadableSpan) -> list[dict[str, Any]]:
    events = [e for e in span.events if e.name == "agentfsm.tool.progress"]
    assert span.start_time is not None and span.end_time is not None
    assert all(span.start_time <= e.timestamp <= span.end_time for e in events)
    return [dict(e.attributes or {}) for e in events]


@pytest.mark.parametrize("driver", ["run", "run_async"])
def test_each_progress_report_is_an_event_of_its_tool_span_without_its_message(otel: Captured, driver: str) -> None:
    agent = progress_agent()
    question = [ChatMessage.from_user("index both")]
    agent.run(question) if driver == "run" else asyncio.run(agent.run_async(question))
    spans = {(s.attributes or {})["gen_ai.tool.call.id"]: s for s in named(otel.finished(), "execute_tool index")}
    for key in ("i1", "i2"):
        assert progress_events(spans[key]) == [
            {"agentfsm.call": key, "agentfsm.tool.progress": float(done), "agentfsm.tool.progress.total": 3.0}
            for done in range(1, 4)
        ], "the message may name the user's data: recorded only with include_content"


def test_progress_messages_are_recorded_with_content(otel_with_content: Captured) -> None:
    progress_agent().run([ChatMessage.from_user("index both")])
    spans = {
        (s.attributes or {})["gen_ai.tool.call.id"]: s for s in named(otel_with_content.finished(), "execute_tool")
    }
    assert [e["agentfsm.tool.progress.message"] for e in progress_events(spans["i2"])] == [
        f"indexed bob/secret-{done}.txt" for done in range(1, 4)
    ]


def test_nothing_is_recorded_after_uninstrument(otel: Captured) -> None:
    telemetry.uninstrument()
    run = demo_agent().new_run(RunRequest(messages=QUESTION))
    assert not run.records_events, "nothing listens: the run records no event"
    demo_agent().run(QUESTION)
    assert otel.finished() == []


# -- one trace across pause, crash and processes ---------------------------------------------------------

EXPORT_TO_FILE = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from agentfsm import telemetry
from agentfsm.agent import RunRequest


class ToFile(SpanExporter):
    def export(self, spans):
        with open(sys.argv[1], "a") as out:
            for s in spans:
                parent = s.parent.span_id if s.parent else None
                line = {"name": s.name, "trace_id": s.context.trace_id, "span_id": s.context.span_id, "parent": parent}
                out.write(json.dumps({**line, "attributes": dict(s.attributes)}) + "\\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
telemetry.instrument(provider)
"""

RESUME_PROGRAM = (
    EXPORT_TO_FILE
    + """
from agentfsm import AgentSnapshot
from agentfsm.demo import demo_agent, demo_script
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision

snapshot = AgentSnapshot.from_file(sys.argv[2])
strategies = {"calculator": BreakpointConfirmationStrategy(sys.argv[3])}
later = demo_agent(ScriptedChatGenerator(demo_script(), position=2), confirmation_strategies=strategies)
later.run(snapshot=snapshot, decisions=[ToolExecutionDecision("calculator", True, "c1")])
"""
)


def exported(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_resumed_in_another_process_continues_its_trace(otel: Captured, tmp_path: Path) -> None:
    strategies = {"calculator": BreakpointConfirmationStrategy(str(tmp_path))}
    with pytest.raises(HITLBreakpointException) as paused:
        demo_agent(confirmation_strategies=strategies).run(QUESTION)
    first = only(otel.finished(), "invoke_agent")
    assert (first.attributes or {})["agentfsm.pause_reason"] == "confirmation"
    snapshot = AgentSnapshot.from_file(paused.value.snapshot_file_path or "")
    assert snapshot.trace_context and snapshot.trace_context["traceparent"].split("-")[1] == (
        f"{first.context.trace_id:032x}"
    )
    spans_file = tmp_path / "spans.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", RESUME_PROGRAM, str(spans_file), paused.value.snapshot_file_path or "", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    later = exported(spans_file)
    [resumed] = [s for s in later if s["name"].startswith("invoke_agent")]
    assert resumed["trace_id"] == first.context.trace_id and resumed["parent"] == first.context.span_id
    assert resumed["attributes"]["agentfsm.resumed"] is True
    assert resumed["attributes"]["agentfsm.exit_reason"] == "text"
    assert {s["trace_id"] for s in later} == {first.context.trace_id}
    assert [s["name"] for s in later if s["parent"] == resumed["span_id"]] == [
        "execute_tool calculator",
        "chat ScriptedChatGenerator",
    ]


KILLED_PROGRAM = (
    EXPORT_TO_FILE
    + """
from agentfsm import Agent, ChatMessage
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import KILL_SCRIPT, logged_step

store = SQLiteSnapshotStore(sys.argv[2], durable=True)
agent = Agent(chat_generator=ScriptedChatGenerator(KILL_SCRIPT), tools=[logged_step], snapshot_store=store, tool_concurrency=1)
agent.run([ChatMessage.from_user("go")])
"""
)


def test_a_run_resumed_after_its_process_was_killed_continues_its_trace(
    otel: Captured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, log, spans_file = tmp_path / "runs.db", tmp_path / "log.txt", tmp_path / "spans.jsonl"
    env = {**os.environ, "AGENTFSM_TEST_LOG": str(log), "AGENTFSM_TEST_KILL": "two"}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_PROGRAM, str(spans_file), str(db)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 9, done.stderr
    # The killed process's agent span never ended; the spans that did name it as their parent.
    before = exported(spans_file)
    assert [s["name"] for s in before] == ["chat ScriptedChatGenerator", "execute_tool logged_step"]
    killed_trace, killed_span = before[0]["trace_id"], before[0]["parent"]
    store = SQLiteSnapshotStore(db, durable=True)
    snapshot = store.latest(store.runs()[0].run_id)
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    agent = Agent(
        chat_generator=ScriptedChatGenerator(KILL_SCRIPT, position=snapshot.step),
        tools=[logged_step],
        snapshot_store=store,
        tool_concurrency=1,
    )
    decisions = [ToolExecutionDecision("logged_step", True, "s2")]
    agent.run(snapshot=snapshot, take_over=True, decisions=decisions)
    store.close()
    spans = otel.finished()
    resumed = only(spans, "invoke_agent")
    assert resumed.parent is not None and resumed.parent.is_remote
    assert (resumed.context.trace_id, resumed.parent.span_id) == (killed_trace, killed_span)
    assert {s.context.trace_id for s in spans} == {killed_trace}
    assert [s.name for s in named(spans, "execute_tool")] == ["execute_tool logged_step"], "s1 did not run again"


def test_a_resumed_segment_links_to_the_span_that_resumed_it(otel: Captured, tmp_path: Path) -> None:
    with pytest.raises(BreakpointException) as paused:
        demo_agent(confirmation_strategies={"calculator": BreakpointConfirmationStrategy("")}).run(QUESTION)
    tracer = TracerProvider().get_tracer("web")  # another provider: the caller's own trace
    later = demo_agent(ScriptedChatGenerator(demo_script(), position=2))
    with tracer.start_as_current_span("POST /decide") as request:
        later.run(snapshot=paused.value.snapshot, decisions=[ToolExecutionDecision("calculator", True, "c1")])
    first, resumed = named(otel.finished(), "invoke_agent")
    assert resumed.context.trace_id == first.context.trace_id
    assert [link.context.span_id for link in resumed.links] == [request.get_span_context().span_id]


# -- OTLP/HTTP to a collector ---------------------------------------------------------------------------


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: decodes each ``ExportTraceServiceRequest`` it is sent."""

    received: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.received.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(ExportTraceServiceResponse().SerializeToString())

    def log_message(self, format: str, *args: Any) -> None:
        pass


def value(attribute: Any) -> Any:
    """An OTLP ``AnyValue`` as Python."""
    kind = attribute.value.WhichOneof("value")
    if kind == "array_value":
        return [getattr(v, v.WhichOneof("value")) for v in attribute.value.array_value.values]
    return getattr(attribute.value, kind)


def test_spans_exported_over_otlp_http_reach_a_collector() -> None:
    Collector.received.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-bot"}))
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    telemetry.instrument(provider)
    try:
        Agent(chat_generator=ScriptedChatGenerator(usage_script()), tools=[add]).run([ChatMessage.from_user("1 + 2?")])
        provider.shutdown()  # flushes the batch
    finally:
        telemetry.uninstrument()
        server.shutdown()
        server.server_close()
    spans = {}
    for request in Collector.received:
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a) for a in resource_spans.resource.attributes}
            assert resource["service.name"] == "weather-bot"
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "agentfsm"
                for span in scope_spans.spans:
                    spans.setdefault(span.name, []).append(span)
    assert sorted(spans) == ["chat ScriptedChatGenerator", "execute_tool add", "invoke_agent agent"]
    [agent] = spans["invoke_agent agent"]
    assert agent.parent_span_id == b"" and agent.kind == Span.SpanKind.SPAN_KIND_INTERNAL
    chats = spans["chat ScriptedChatGenerator"]
    assert [c.kind for c in chats] == [Span.SpanKind.SPAN_KIND_CLIENT] * 2
    assert {c.parent_span_id for c in chats} == {agent.span_id} and {c.trace_id for c in chats} == {agent.trace_id}
    usage = [{a.key: value(a) for a in c.attributes if a.key.startswith("gen_ai.usage")} for c in chats]
    assert usage == [
        {"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 3},
        {"gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 5},
    ]
    [tool_span] = spans["execute_tool add"]
    assert {a.key: value(a) for a in tool_span.attributes}["gen_ai.tool.call.id"] == "c1"
    edges = [e for e in agent.events if e.name == "agentfsm.transition"]
    assert [{a.key: value(a) for a in e.attributes}["agentfsm.dest"] for e in edges][-1] == "DONE"


def test_a_forked_run_is_a_trace_of_its_own(otel: Captured) -> None:
    with pytest.raises(BreakpointException) as paused:
        demo_agent(confirmation_strategies={"calculator": BreakpointConfirmationStrategy("")}).run(QUESTION)
    branch = paused.value.snapshot.fork()
    assert branch.trace_context is None
    later = demo_agent(ScriptedChatGenerator(demo_script(), position=2))
    later.run(snapshot=branch, decisions=[ToolExecutionDecision("calculator", False, "c1", feedback="no")])
    original, forked = named(otel.finished(), "invoke_agent")
    assert forked.context.trace_id != original.context.trace_id and forked.parent is None
    assert (forked.attributes or {})["gen_ai.conversation.id"] == branch.run_id


def test_a_call_in_doubt_a_reconcile_function_settles_is_an_event_of_the_agent_span(
    otel_with_content: Captured,
) -> None:
    def found(call: InDoubtCall) -> Reconciled:
        return Happened(3)

    @tool(reconcile=found)
    def charge(a: int, b: int) -> int:
        """Not idempotent: a call in doubt is looked up."""
        return a + b

    def agent(position: int = 0) -> Agent:
        script = [calls(call("charge", "c1", a=1, b=2)), "done"]
        return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=[charge])

    with pytest.raises(BreakpointException) as paused:
        agent().run(QUESTION, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    crashed = paused.value.snapshot.model_copy(update={"break_point": None, "started_tool_calls": ["c1"]})
    otel_with_content.spans.clear()
    agent(1).run(snapshot=crashed)
    span = only(otel_with_content.finished(), "invoke_agent")
    [event] = [e for e in span.events if e.name == "agentfsm.reconciled"]
    assert dict(event.attributes or {}) == {
        "agentfsm.call": "c1",
        "agentfsm.tool": "charge",
        "agentfsm.reconciled": "happened",
    }
    assert not named(otel_with_content.finished(), "execute_tool")  # it did not run again
