"""Consumers of every run's events in this process, beside each run's own ``on_event`` handler.

``agentfsm.telemetry.instrument`` registers one. A run records events when it has a handler, logs,
or a process-wide consumer is registered when it starts; ``emitter_for`` asks each consumer for
the handler of that run and chains it with the log and the run's own handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun
    from agentfsm.events import EventHandler

#: Makes the handler of one run's events, given the run and its chat generator.
HandlerFactory = Callable[["AgentRun", Any], "EventHandler"]

#: The registered consumers, in the order they were registered (mutated in place: readers keep the list).
consumers: list[HandlerFactory] = []

#: The trace context (W3C ``traceparent``) of the span active in the caller, ``None`` without one:
#: a run started here and driven elsewhere (a durable run's workflow) joins the caller's trace.
#: ``agentfsm.telemetry.instrument`` sets it; each entry is asked in turn.
caller_contexts: list[Callable[[], dict[str, str] | None]] = []


def caller_trace_context() -> dict[str, str] | None:
    """The caller's trace context, from the first registered source that has one."""
    for source in caller_contexts:
        found = source()
        if found:
            return found
    return None
