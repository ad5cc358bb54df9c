"""Agents talking A2A: an agent served as an A2A server, and a remote A2A agent as a tool.

``create_app(agent, name=..., url=...)`` is an ASGI application (Starlette) that serves any agent
under A2A 1.0 through the official SDK (``a2a-sdk``): its card (a skill per tool), ``SendMessage``
and streaming, tasks whose states follow the run (``working``; ``input-required`` when it pauses,
its questions in the status message; ``completed``, ``failed``, ``canceled``); the context is the
thread. ``serve(agent)`` runs it with uvicorn on 127.0.0.1. ``A2AAgentTool(url, name)`` lets this
agent delegate to a remote one: the remote task follows the journal's rules, and a remote that
needs input pauses this run (``tool.relay``). See ``docs/a2a.md``.

The modules: ``app`` (``create_app``, ``serve``, the message check), ``executor`` (runs the agent
for the tasks), ``card``, ``parts`` (questions and answers in messages), ``remote`` (the client
side), ``tool`` (``A2AAgentTool`` and its relay). Needs the ``a2a`` extra: ``pip install 'agentfsm[a2a]'``.
"""

from agentfsm import _extras

with _extras.extra_needed("agentfsm.a2a", "a2a"):
    import a2a.server.routes  # noqa: F401 - the SDK's server side, with its HTTP routes
    import sse_starlette  # noqa: F401

from agentfsm._serving.threads import StoreThreads, ThreadHead, ThreadRuns
from agentfsm.a2a.app import create_app, serve
from agentfsm.a2a.card import agent_card
from agentfsm.a2a.executor import AgentTaskExecutor
from agentfsm.a2a.remote import RemoteAgent
from agentfsm.a2a.tool import RELAY_ANSWERS, A2AAgentTool, RemoteRelay

# In plain sorted order, as tests/test_exported_members.py checks every package's (ruff's is isort-style).
__all__ = [  # noqa: RUF022
    "A2AAgentTool",
    "AgentTaskExecutor",
    "RELAY_ANSWERS",
    "RemoteAgent",
    "RemoteRelay",
    "StoreThreads",
    "ThreadHead",
    "ThreadRuns",
    "agent_card",
    "create_app",
    "serve",
]
