"""OpenTelemetry traces and metrics of runs, read from their events (the GenAI semantic conventions).

``instrument()`` makes every run of the process a trace; ``uninstrument()`` stops it. Only the
OpenTelemetry API is needed (``pip install 'agentfsm[otel]'``); the SDK and the exporters are the
application's, set up as usual or passed as ``tracer_provider`` / ``meter_provider``.

What a run gives (docs/telemetry.md shows it):

- a span ``invoke_agent {agent name}`` (INTERNAL) for each segment of a run: from its start, or
  its resume, to its end or pause. The edges it takes are span events (``agentfsm.transition``),
  as are its hooks, decisions, resume and warnings (``agentfsm.warning``);
- a span ``chat {model}`` (CLIENT) per model call, with its token counts: token counts are on
  model-call spans only, never summed onto the agent span;
- a span ``execute_tool {tool name}`` (INTERNAL) per tool call; a failed call has status ERROR and
  ``error.type``. The edges of the call's machine beyond ``check`` and ``finish`` (asked, approved,
  rejected, in doubt...) are span events, and so is each progress report of the call
  (``agentfsm.tool.progress``: ``agentfsm.tool.progress``, ``agentfsm.tool.progress.total``, and the
  tool's ``agentfsm.tool.progress.message`` only with ``include_content``: it may name the user's data);
- the metrics ``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``,
  ``gen_ai.invoke_agent.duration`` and ``gen_ai.execute_tool.duration``.

One trace per run: the first segment's trace context is kept in the run's snapshots
(``AgentSnapshot.trace_context``), and every later segment (resumed after a pause, after a crash,
in another process or by another DBOS worker) starts its ``invoke_agent`` span as a child of the
first segment's span. A segment resumed under another active span (a web request deciding a
pause) links to that span.

Prompts, replies, tool arguments, results and progress messages, and the messages of errors (which
may quote them: an answer that did not fit, a server's 400 body), are recorded only with
``include_content=True``; a failed span's status says the error's type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from agentfsm._core import listeners
from agentfsm._extras import extra_needed
from agentfsm.events import (
    CallChanged,
    CallReconciled,
    DecisionTaken,
    Event,
    GuardrailChecked,
    HookRan,
    ModelEnded,
    ModelFailed,
    ModelStarted,
    PhaseChanged,
    RunEnded,
    RunPaused,
    RunResumed,
    RunStarted,
    RunWarning,
    ToolEnded,
    ToolProgress,
    ToolStarted,
)
from agentfsm.messages import ChatMessage

# The SDK and the exporters are the application's choice (e.g. opentelemetry-sdk): only the API is needed.
with extra_needed("agentfsm.telemetry", "otel"):
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun

__all__ = ["current_trace_context", "instrument", "uninstrument"]

#: The ``gen_ai.provider.name`` of agentfsm's chat generators (a generator may name its own in a
#: ``provider_name`` attribute); any other is ``_OTHER``.
_PROVIDERS = {
    "OpenAIChatGenerator": "openai",
    "AnthropicChatGenerator": "anthropic",
    "ScriptedChatGenerator": "agentfsm.scripted",
    "CassetteChatGenerator": "agentfsm.cassette",
}

#: The conventions' advised bucket boundaries: tokens, and seconds.
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
_SECOND_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]

#: The call machine's edges that every call takes and its ``execute_tool`` span shows (checked
#: before it starts, finished when it ends): not repeated as span events.
_SHOWN_BY_TOOL_SPANS = frozenset({"check", "finish"})

_PROPAGATOR = TraceContextTextMapPropagator()
_INTERNAL = SpanKind.INTERNAL


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    include_content: bool = False,
) -> None:
    """Trace every run of this process, and record its metrics, from now on (until ``uninstrument``).

    Args:
        tracer_provider: Where spans go; the global one (``opentelemetry.trace.set_tracer_provider``) by default.
        meter_provider: Where metrics go; the global one by default.
        include_content: Record the messages sent and received, tool arguments, tool results and
            the messages of tools' progress reports (``gen_ai.input.messages``, ``gen_ai.output.messages``,
            ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, ``agentfsm.tool.progress.message``).
            Off by default: they may hold personal data.

    Calling it again replaces the earlier settings. Runs already started keep theirs.
    """
    uninstrument()
    listeners.consumers.append(_Telemetry(tracer_provider, meter_provider, include_content).run_handler)
    listeners.caller_contexts.append(current_trace_context)


def uninstrument() -> None:
    """Stop tracing runs that start from now on; runs under way finish their spans."""
    listeners.consumers[:] = [
        c for c in listeners.consumers if not isinstance(getattr(c, "__self__", None), _Telemetry)
    ]
    listeners.caller_contexts[:] = [c for c in listeners.caller_contexts if c is not current_trace_context]


def current_trace_context() -> dict[str, str] | None:
    """The W3C trace context (``traceparent``, ``tracestate``) of the active span; ``None`` without a valid one."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def _provider_name(generator: Any) -> str:
    """The ``gen_ai.provider.name`` of a chat generator: its ``provider_name``, agentfsm's known ones, else ``_OTHER``."""
    named = getattr(generator, "provider_name", None)
    if isinstance(named, str) and named:
        return named
    return _PROVIDERS.get(type(generator).__name__, "_OTHER")


def _ns(at: float) -> int:
    """An event's ``at`` (seconds) as OpenTelemetry's nanoseconds."""
    return int(at * 1e9)


def _error_type(error: str) -> str:
    """The type name of an event's error text (``"<type>: <message>"``)."""
    return error.partition(":")[0]


def _json(value: Any) -> str:
    return orjson.dumps(value, default=repr, option=orjson.OPT_NON_STR_KEYS).decode()


def _messages_json(messages: Sequence[ChatMessage]) -> str:
    """Messages in the conventions' JSON form: ``[{"role": ..., "parts": [...]}]``."""
    described = []
    for message in messages:
        parts: list[dict[str, Any]] = [{"type": "text", "content": text} for text in message.texts]
        parts += [
            {"type": "tool_call", "id": c.id, "name": c.tool_name, "arguments": c.arguments} for c in message.tool_calls
        ]
        parts += [
            {"type": "tool_call_response", "id": r.origin.id, "response": r.result} for r in message.tool_call_results
        ]
        described.append({"role": message.role.value, "parts": parts})
    return _json(described)


class _Telemetry:
    """One ``instrument()`` call's settings, tracer and instruments: makes each run's handler."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
        include_content: bool,
    ) -> None:
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("agentfsm")
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("agentfsm")
        self.include_content = include_content
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_SECOND_BUCKETS,
        )
        self.agent_duration = meter.create_histogram(
            "gen_ai.invoke_agent.duration",
            unit="s",
            description="Duration of an agent invocation (one segment of a run).",
            explicit_bucket_boundaries_advisory=_SECOND_BUCKETS,
        )
        self.tool_duration = meter.create_histogram(
            "gen_ai.execute_tool.duration",
            unit="s",
            description="Duration of a tool execution.",
            explicit_bucket_boundaries_advisory=_SECOND_BUCKETS,
        )

    def run_handler(self, run: AgentRun, generator: Any) -> Callable[[Event], None]:
        """The handler that turns one run's events into spans and metrics."""
        return _RunTrace(self, run, generator)


class _RunTrace:
    """The spans and metrics of one segment of a run, built as its events come."""

    __slots__ = (
        "_agent",
        "_agent_name",
        "_base",
        "_chat",
        "_chat_sent",
        "_context",
        "_model",
        "_phase",
        "_reply",
        "_run",
        "_started",
        "_telemetry",
        "_tools",
    )

    def __init__(self, telemetry: _Telemetry, run: AgentRun, generator: Any) -> None:
        from agentfsm._core.emitting import model_name

        self._telemetry = telemetry
        self._run = run
        self._model = model_name(generator)
        #: The attributes every span and metric of the run's model calls carries.
        self._base = {"gen_ai.provider.name": _provider_name(generator), "gen_ai.request.model": self._model}
        self._agent_name = run.config.agent_name
        self._agent: Span | None = None
        self._context: otel_context.Context | None = None
        self._started = 0.0
        self._phase = ""
        self._chat: Span | None = None
        #: How many messages the model was sent (its replies follow them in the conversation).
        self._chat_sent = 0
        #: A model call that replied, its span left open until the replies are in the conversation
        #: (with ``include_content``): the span and when the call ended.
        self._reply: tuple[Span, int] | None = None
        #: The tool calls under way: their spans and when they started.
        self._tools: dict[str, tuple[Span, float]] = {}

    def __call__(self, event: Event) -> None:
        if self._reply is not None:
            self._end_reply()
        handle = _HANDLERS.get(type(event))
        if handle is not None:
            handle(self, event)

    # -- the run ---------------------------------------------------------------------------------------

    def _run_started(self, event: RunStarted) -> None:
        run = self._run
        stored = run.trace_context
        parent: otel_context.Context | None = None
        links: list[Link] = []
        if stored:
            # A later segment of the run: the child of its first segment's span, in its trace; the
            # span that resumed it (if any, in another trace) is linked.
            parent = _PROPAGATOR.extract(stored)
            caller = trace.get_current_span().get_span_context()
            first = trace.get_current_span(parent).get_span_context()
            if caller.is_valid and caller.trace_id != first.trace_id:
                links.append(Link(caller))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self._agent_name,
            "gen_ai.conversation.id": run.run_id,
            **self._base,
            "agentfsm.run_id": run.run_id,
            "agentfsm.resumed": event.resumed,
            "agentfsm.step": event.step,
        }
        span = self._telemetry.tracer.start_span(
            f"invoke_agent {self._agent_name}",
            context=parent,
            kind=_INTERNAL,
            attributes=attributes,
            links=links,
            start_time=_ns(event.at),
        )
        self._agent = span
        self._context = trace.set_span_in_context(span)
        self._started = event.at
        if not stored and span.get_span_context().is_valid:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=self._context)
            run.trace_context = carrier

    def _transition(self, event: PhaseChanged) -> None:
        self._phase = str(event.dest)
        if self._agent is not None:
            self._agent.add_event(
                "agentfsm.transition",
                {
                    "agentfsm.source": str(event.source),
                    "agentfsm.dest": self._phase,
                    "agentfsm.trigger": event.trigger,
                },
                _ns(event.at),
            )

    def _call_transition(self, event: CallChanged) -> None:
        if event.trigger in _SHOWN_BY_TOOL_SPANS:
            return
        open_call = self._tools.get(event.call)
        span = open_call[0] if open_call is not None else self._agent
        if span is not None:
            span.add_event(
                "agentfsm.call_transition",
                {
                    "agentfsm.call": event.call,
                    "gen_ai.tool.name": event.tool,
                    "agentfsm.source": str(event.source),
                    "agentfsm.dest": str(event.dest),
                    "agentfsm.trigger": event.trigger,
                },
                _ns(event.at),
            )

    def _hook(self, event: HookRan) -> None:
        if self._agent is not None:
            attributes = {"agentfsm.hook.point": event.point, "agentfsm.hook.name": event.hook}
            if event.error is not None:
                attributes["error.type"] = _error_type(event.error)
            self._agent.add_event("agentfsm.hook", attributes, _ns(event.at))

    def _guardrail(self, event: GuardrailChecked) -> None:
        if self._agent is not None:
            attributes: dict[str, Any] = {
                "agentfsm.guardrail.point": event.point,
                "agentfsm.guardrail.subject": event.subject,
                "agentfsm.guardrail.passed": list(event.passed),
                "agentfsm.guardrail.rewrites": [name for name, _ in event.rewrites],
            }
            if event.tripped is not None:
                attributes["agentfsm.guardrail.tripped"] = event.tripped
                attributes["agentfsm.guardrail.on_trip"] = event.on_trip
            self._agent.add_event("agentfsm.guardrail", attributes, _ns(event.at))

    def _decision(self, event: DecisionTaken) -> None:
        if self._agent is not None:
            attributes: dict[str, Any] = {
                "agentfsm.call": event.call,
                "agentfsm.decision.execute": bool(event.decision.get("execute")),
            }
            if self._telemetry.include_content and event.decision.get("feedback") is not None:
                attributes["agentfsm.decision.feedback"] = str(event.decision["feedback"])
            self._agent.add_event("agentfsm.decision", attributes, _ns(event.at))

    def _reconciled(self, event: CallReconciled) -> None:
        if self._agent is not None:
            attributes = {"agentfsm.call": event.call, "agentfsm.tool": event.tool, "agentfsm.reconciled": event.answer}
            if self._telemetry.include_content and event.reason is not None:
                attributes["agentfsm.reconciled.reason"] = event.reason
            self._agent.add_event("agentfsm.reconciled", attributes, _ns(event.at))

    def _error_status(self, error: str) -> Status:
        """A failed span's status: the error's type, and its message only with ``include_content``.

        An error's message may quote what a run holds: a model's answer that did not fit, a
        server's 400 body, a tool's result.
        """
        return Status(StatusCode.ERROR, error if self._telemetry.include_content else _error_type(error))

    def _warning(self, event: RunWarning) -> None:
        if self._agent is not None:
            attributes = {"agentfsm.warning": event.warning, "agentfsm.warning.message": event.message}
            self._agent.add_event("agentfsm.warning", attributes, _ns(event.at))

    def _resumed(self, event: RunResumed) -> None:
        if self._agent is not None:
            self._agent.add_event("agentfsm.resumed", {"agentfsm.phase": str(event.phase)}, _ns(event.at))

    def _paused(self, event: RunPaused) -> None:
        span = self._agent
        if span is None:
            return
        span.set_attribute("agentfsm.pause_reason", event.reason)
        if event.seq is not None:
            span.set_attribute("agentfsm.snapshot.seq", event.seq)
        self._end_agent(event, None)

    def _run_ended(self, event: RunEnded) -> None:
        span = self._agent
        if span is None:
            return
        if event.exit_reason is not None:
            span.set_attribute("agentfsm.exit_reason", event.exit_reason)
        error = None
        if event.error is not None:
            error = _error_type(event.error)
            span.set_attribute("error.type", error)
            span.set_status(self._error_status(event.error))
        self._end_agent(event, error)

    def _end_agent(self, event: Event, error: str | None) -> None:
        span = self._agent
        assert span is not None
        # What the run left open (a model call or tools cut short by the end) ends with it.
        if self._chat is not None:
            self._chat.end(_ns(event.at))
            self._chat = None
        for tool, _ in self._tools.values():
            tool.end(_ns(event.at))
        self._tools.clear()
        span.set_attribute("agentfsm.phase", self._phase)
        span.set_attribute("agentfsm.step", event.step)
        span.end(_ns(event.at))
        self._agent = None
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self._agent_name, **self._base}
        if error is not None:
            attributes["error.type"] = error
        self._telemetry.agent_duration.record(event.at - self._started, attributes)

    # -- model calls ----------------------------------------------------------------------------------

    def _model_started(self, event: ModelStarted) -> None:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", **self._base, "agentfsm.step": event.step}
        if self._telemetry.include_content:
            messages: list[ChatMessage] = self._run.state.data.get("messages") or []
            self._chat_sent = len(messages)
            attributes["gen_ai.input.messages"] = _messages_json(messages)
        self._chat = self._telemetry.tracer.start_span(
            f"chat {self._model}",
            context=self._context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=_ns(event.at),
        )

    def _model_ended(self, event: ModelEnded) -> None:
        span = self._chat
        if span is None:
            return
        self._chat = None
        usage = event.usage
        inputs = usage.get("input_tokens", usage.get("prompt_tokens"))
        outputs = usage.get("output_tokens", usage.get("completion_tokens"))
        attributes: dict[str, Any] = {"gen_ai.response.model": event.model}
        if event.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = event.finish_reasons
        if inputs is not None:
            attributes["gen_ai.usage.input_tokens"] = inputs
        if outputs is not None:
            attributes["gen_ai.usage.output_tokens"] = outputs
        span.set_attributes(attributes)
        metric = {"gen_ai.operation.name": "chat", **self._base, "gen_ai.response.model": event.model}
        telemetry = self._telemetry
        telemetry.operation_duration.record(event.duration_us / 1e6, metric)
        if inputs is not None:
            telemetry.token_usage.record(inputs, {**metric, "gen_ai.token.type": "input"})
        if outputs is not None:
            telemetry.token_usage.record(outputs, {**metric, "gen_ai.token.type": "output"})
        if telemetry.include_content:
            self._reply = (span, _ns(event.at))  # the replies join the conversation before the next event
        else:
            span.end(_ns(event.at))

    def _end_reply(self) -> None:
        """End the replied model call's span, its replies (now in the conversation) recorded on it."""
        assert self._reply is not None
        span, ended = self._reply
        self._reply = None
        messages: list[ChatMessage] = self._run.state.data.get("messages") or []
        span.set_attribute("gen_ai.output.messages", _messages_json(messages[self._chat_sent :]))
        span.end(ended)

    def _model_failed(self, event: ModelFailed) -> None:
        span = self._chat
        if span is None:
            return
        self._chat = None
        error = _error_type(event.error)
        span.set_attribute("error.type", error)
        span.set_status(self._error_status(event.error))
        span.end(_ns(event.at))
        metric = {"gen_ai.operation.name": "chat", **self._base, "error.type": error}
        self._telemetry.operation_duration.record(event.duration_us / 1e6, metric)

    # -- tool calls -----------------------------------------------------------------------------------

    def _tool_started(self, event: ToolStarted) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": event.call_id or event.call,
            "agentfsm.call": event.call,
            "agentfsm.step": event.step,
        }
        if self._telemetry.include_content:
            attributes["gen_ai.tool.call.arguments"] = _json(event.arguments)
        span = self._telemetry.tracer.start_span(
            f"execute_tool {event.tool}",
            context=self._context,
            kind=_INTERNAL,
            attributes=attributes,
            start_time=_ns(event.at),
        )
        self._tools[event.call] = (span, event.at)

    def _tool_progress(self, event: ToolProgress) -> None:
        open_call = self._tools.get(event.call)
        if open_call is None:
            return
        attributes: dict[str, Any] = {"agentfsm.call": event.call, "agentfsm.tool.progress": event.progress}
        if event.total is not None:
            attributes["agentfsm.tool.progress.total"] = event.total
        if self._telemetry.include_content and event.message is not None:
            attributes["agentfsm.tool.progress.message"] = event.message
        open_call[0].add_event("agentfsm.tool.progress", attributes, _ns(event.at))

    def _tool_ended(self, event: ToolEnded) -> None:
        open_call = self._tools.pop(event.call, None)
        if open_call is None:
            return
        span, started = open_call
        metric = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool}
        if event.error is not None:
            error = _error_type(event.error)
            span.set_attribute("error.type", error)
            span.set_status(self._error_status(event.error))
            metric["error.type"] = error
        elif self._telemetry.include_content:
            span.set_attribute("gen_ai.tool.call.result", _json(event.result))
        span.end(_ns(event.at))
        self._telemetry.tool_duration.record(event.at - started, metric)


#: Which method handles each kind of event (chunks and the others make no span of their own).
_HANDLERS: Mapping[type, Callable[[_RunTrace, Any], None]] = {
    RunStarted: _RunTrace._run_started,
    PhaseChanged: _RunTrace._transition,
    CallChanged: _RunTrace._call_transition,
    HookRan: _RunTrace._hook,
    DecisionTaken: _RunTrace._decision,
    CallReconciled: _RunTrace._reconciled,
    GuardrailChecked: _RunTrace._guardrail,
    RunResumed: _RunTrace._resumed,
    RunPaused: _RunTrace._paused,
    RunEnded: _RunTrace._run_ended,
    RunWarning: _RunTrace._warning,
    ModelStarted: _RunTrace._model_started,
    ModelEnded: _RunTrace._model_ended,
    ModelFailed: _RunTrace._model_failed,
    ToolStarted: _RunTrace._tool_started,
    ToolProgress: _RunTrace._tool_progress,
    ToolEnded: _RunTrace._tool_ended,
}
