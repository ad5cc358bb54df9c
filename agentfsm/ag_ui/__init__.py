"""An agent as an AG-UI endpoint: a chat front end streams its runs and answers its pauses.

``create_app(agent)`` is an ASGI application (Starlette) that serves any agent under the AG-UI
protocol (1.0: ``ag-ui-protocol``'s event types and encoder); ``serve(agent)`` runs it with
uvicorn on 127.0.0.1. A ``RunAgentInput`` is a run on its thread (``threadId``): its events
stream as AG-UI events (text messages from the model's streamed chunks, tool calls and their
results, a step per phase, the State as snapshot and deltas, the conversation as a snapshot); a
pause for approval ends the run with the interrupt outcome, one interrupt per call with the JSON
schema of its answer; the next input's ``resume[]`` answers them, as decisions, and the same run
goes on. See ``docs/ag-ui.md``.

What a request must be to be answered (``agentfsm._serving.guard``): for a loopback host name (or
``allowed_hosts``), from the endpoint's own origin when a browser says one (or ``allowed_origins``),
with the token when one is set, JSON of a bounded size.

The modules: ``app`` (``create_app``, ``serve`` and the handler), ``stream`` (agentfsm events as
AG-UI events), ``messages`` (conversations both ways), ``state`` (State as JSON and JSON Patch).
Needs the ``ag-ui`` extra: ``pip install 'agentfsm[ag-ui]'``.
"""

from agentfsm import _extras

with _extras.extra_needed("agentfsm.ag_ui", "ag-ui"):
    import ag_ui.core  # noqa: F401 - the protocol's own event types
    import starlette  # noqa: F401

from agentfsm._serving.threads import StoreThreads, ThreadHead, ThreadRuns
from agentfsm.ag_ui.app import AGUIEndpoint, create_app, serve
from agentfsm.ag_ui.stream import EventStream

__all__ = ["AGUIEndpoint", "EventStream", "StoreThreads", "ThreadHead", "ThreadRuns", "create_app", "serve"]
