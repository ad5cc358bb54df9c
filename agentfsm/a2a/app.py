"""``create_app``: an agent as an A2A server (JSON-RPC, on Starlette), and ``serve`` to run it with uvicorn.

The app serves the agent card at ``/.well-known/agent-card.json`` and A2A's JSON-RPC methods at
``/`` (``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``ListTasks``, ``CancelTask``,
``SubscribeToTask``), through ``a2a-sdk``'s request handler and routes, with
``AgentTaskExecutor`` running the agent. A request that is not A2A JSON-RPC is the protocol's
error answer (parse error, invalid request, invalid params), and so is a message the agent cannot
read (no text or data part, a file part, not from the user): nothing runs. The request checks
(``agentfsm._serving.guard``) come first; the card is open, every call needs the token when one
is set, and the card says so.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.events import Event as A2AEvent
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import Message, Role, SendMessageRequest, Task
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import InvalidParamsError
from starlette.applications import Starlette

from agentfsm._serving.guard import MAX_BODY_BYTES, EndpointChecks, check_listening
from agentfsm._serving.threads import ThreadRuns
from agentfsm.a2a.card import agent_card
from agentfsm.a2a.executor import AgentTaskExecutor

if TYPE_CHECKING:
    from agentfsm.agent import Agent


def check_message(message: Message) -> None:
    """Refuse a message the agent cannot read, before any task is made for it.

    Raises:
        InvalidParamsError: the message is not the user's, has no part, or has a part that is
            neither text nor data (the JSON-RPC answer is ``-32602``).
    """
    if message.role != Role.ROLE_USER:
        raise InvalidParamsError(message="The agent reads messages from the user (role ROLE_USER).")
    if not message.parts:
        raise InvalidParamsError(message="The message has no part: send its text (or data).")
    for part in message.parts:
        if not (part.HasField("text") or part.HasField("data")):
            raise InvalidParamsError(message="The agent reads text and data parts only; nothing ran.")


class CheckedRequestHandler(DefaultRequestHandler):
    """``a2a-sdk``'s request handler, which first checks that the agent can read the message (``check_message``)."""

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        """Check the message, then send it."""
        check_message(params.message)
        answer: Message | Task = await super().on_message_send(params, context)
        return answer

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent, None]:
        """Check the message, then stream its task's events."""
        check_message(params.message)
        async for event in super().on_message_send_stream(params, context):
            yield event


def create_app(
    agent: Agent,
    *,
    name: str = "agent",
    description: str | None = None,
    url: str = "http://127.0.0.1:8000",
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    max_body_bytes: int = MAX_BODY_BYTES,
    task_store: TaskStore | None = None,
    expose_errors: bool = False,
    threads: ThreadRuns | None = None,
) -> Starlette:
    """``agent`` as an A2A server whose card names it ``name`` and says it is at ``url``.

    ``description``: the card's (the agent's system prompt's first line by default). ``token``:
    every call must carry ``Authorization: Bearer <token>``. ``allowed_hosts``: names it answers
    to besides loopback. ``task_store``: where tasks are kept (``a2a-sdk``'s; in memory by
    default). ``expose_errors``: a failed task's message tells its error (by default its type only).

    Raises:
        ConfigurationError: the agent has no snapshot store (paused runs wait there), or an allowed
            host is not one.
    """
    hosts = tuple(allowed_hosts)
    EndpointChecks(Starlette(), allowed_hosts=hosts)  # refused now, not at the first request
    prompt = (agent.system_prompt or "").strip().splitlines()
    described = description or (prompt[0] if prompt else f"The agentfsm agent {name}.")
    card = agent_card(agent, name=name, description=described, url=url, token=token is not None)
    executor = AgentTaskExecutor(agent, threads, expose_errors=expose_errors)
    handler = CheckedRequestHandler(executor, task_store or InMemoryTaskStore(), card)
    routes: list[Any] = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    app = Starlette(routes=routes)
    app.router.redirect_slashes = False
    app.add_middleware(
        EndpointChecks,
        token=token,
        allowed_hosts=hosts,
        max_body_bytes=max_body_bytes,
        open_paths=(AGENT_CARD_WELL_KNOWN_PATH,),
    )
    return app


def serve(agent: Agent, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Serve ``agent`` as an A2A server with uvicorn until interrupted; ``options`` are ``create_app``'s.

    The card's ``url`` is ``http://host:port`` unless ``options`` give one.

    Raises:
        ConfigurationError: ``host`` is beyond loopback without a ``token``, or every address
            without ``allowed_hosts``.
    """
    import uvicorn

    check_listening(host, options.get("token"), options.get("allowed_hosts", ()))
    options.setdefault("url", f"http://{host}:{port}")
    uvicorn.run(create_app(agent, **options), host=host, port=port, log_level="warning")
