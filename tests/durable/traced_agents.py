"""A durable agent whose worker processes trace their runs to the file named by ``$AGENTFSM_TEST_SPANS``.

Importable by name, so that ``agentfsm worker --agent tests.durable.traced_agents:traced_killable``
runs it; each span ends up as one JSON line (name, trace and span ids, parent) as soon as it ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from agentfsm import telemetry
from agentfsm.durable import DurableAgent
from tests.durable.durable_agents import TurnModel, _agent, effect

#: The file each worker appends its finished spans to.
SPANS = "AGENTFSM_TEST_SPANS"


class ToFile(SpanExporter):
    """Appends each finished span to a file, one JSON object a line."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                parent = span.parent.span_id if span.parent else None
                context = span.get_span_context()
                line = {"name": span.name, "trace_id": context.trace_id, "span_id": context.span_id, "parent": parent}
                out.write(json.dumps(line) + "\n")
        return SpanExportResult.SUCCESS


if os.environ.get(SPANS):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ToFile(os.environ[SPANS])))
    telemetry.instrument(provider)

#: Three parallel calls, one slow: a worker can be killed while it runs.
traced_killable = DurableAgent(_agent(TurnModel(slow=True), [effect]), "traced_killable")
