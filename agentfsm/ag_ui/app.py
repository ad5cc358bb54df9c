"""``create_app``: an agent as an AG-UI endpoint (an ASGI app on Starlette), and ``serve`` to run it with uvicorn.

One route, ``POST /`` (``path``), takes a ``RunAgentInput`` and answers with the run as a stream
of AG-UI events (``agentfsm.ag_ui.stream``), encoded by the protocol package's ``EventEncoder``.
What the input asks for depends on where its thread (``threadId``) stands (``ThreadRuns``):

- a thread whose run waits for answers takes them in ``resume[]``: every open interrupt answered
  (``agentfsm._serving.questions``), the run resumes from its snapshot in the agent's snapshot
  store with those decisions (``agent.iter_async(snapshot=..., decisions=...)``: the same
  single-use, argument-bound check as every other path) and goes on in the same agentfsm run;
- any other thread starts a new run on the input's ``messages`` (the client sends the whole
  conversation) and the declared State keys of its ``state``. With threads the agent's store holds
  (``StoreThreads``, the default for such a store) the run is the thread's next turn, on the user
  messages that end the input: the store holds the conversation before them.

An input that is not a ``RunAgentInput`` is a ``422`` JSON error and nothing runs. An input that
does not fit its thread (answers to nothing, a waiting thread without them, an answer that does
not fit its schema, a second run on a thread that has one going on) is a stream of one
``RUN_ERROR`` and nothing runs; a run that fails ends its stream with ``RUN_ERROR``: the stream
itself never breaks. The request checks (``agentfsm._serving.guard``) come first.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ag_ui.core import BaseEvent, RunAgentInput, RunFinishedCancelledOutcome, RunFinishedEvent
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentfsm._serving.guard import MAX_BODY_BYTES, EndpointChecks, check_listening
from agentfsm._serving.questions import Question, Reply, decide, questions_of
from agentfsm._serving.served import ServedAgent
from agentfsm._serving.threads import ThreadHead, ThreadRuns
from agentfsm.ag_ui.messages import call_id, to_chat_messages
from agentfsm.ag_ui.stream import EventStream
from agentfsm.errors import (
    DecisionError,
    ProtocolRequestError,
    SnapshotError,
    ToolArgumentsError,
)
from agentfsm.events import Event, RunPaused, RunStarted
from agentfsm.logs import logger
from agentfsm.machine import TERMINAL_PHASES
from agentfsm.messages import ChatMessage, ChatRole, StreamingChunk, ToolCall
from agentfsm.pauses import Cancelled

if TYPE_CHECKING:
    from agentfsm.agent import Agent
    from agentfsm.snapshot import AgentSnapshot

#: Errors that say the input does not fit the thread's run (raised before the run does anything).
REQUEST_ERRORS = (ProtocolRequestError, DecisionError, SnapshotError, ToolArgumentsError)


@dataclass
class Plan:
    """What an input asks the endpoint to do: the options of ``iter_async``, and the state the client holds."""

    options: dict[str, Any] = field(default_factory=dict)
    base_state: Any = None
    #: The paused run's id and its snapshot, when the input resumes one.
    resumed: AgentSnapshot | None = None
    #: The input abandons the paused run (a breakpoint's interrupt cancelled): nothing runs.
    abandon: bool = False


class AGUIEndpoint(ServedAgent):
    """The endpoint's handler: reads a ``RunAgentInput``, runs or resumes the thread's run, streams its events."""

    ENDPOINT = "An AG-UI endpoint"

    async def handle(self, request: Request) -> Response:
        """``POST``: the run as an event stream; a ``422`` JSON error for an input that is not a ``RunAgentInput``."""
        body = await request.body()
        try:
            run_input = RunAgentInput.model_validate_json(body)
        except ValidationError as exc:
            problems = [
                {"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors(include_url=False, include_input=False)
            ][:20]
            return JSONResponse(
                {"error": "The request is not a RunAgentInput; nothing ran.", "problems": problems}, status_code=422
            )
        encoder = EventEncoder(accept=request.headers.get("accept") or "text/event-stream")
        return StreamingResponse(
            self.events(run_input, encoder),
            media_type=encoder.get_content_type(),
            headers={"Cache-Control": "no-store"},
        )

    def questions(self, snapshot: AgentSnapshot) -> list[Question]:
        """The open questions of a paused run of this agent."""
        return questions_of(snapshot, self.tools)

    def plan(self, run_input: RunAgentInput) -> Plan:
        """What ``run_input`` asks for, given where its thread stands; reads the store (call it off the event loop).

        Raises:
            ProtocolRequestError: the input does not fit the thread (see the module's docstring).
        """
        head = self.threads.head(run_input.thread_id)
        replies = [Reply(r.interrupt_id, r.status, r.payload) for r in run_input.resume or []]
        if head is not None and head.paused:
            store = self.agent.snapshot_store
            assert store is not None
            snapshot = store.latest(head.run_id)
            if snapshot.phase in TERMINAL_PHASES:  # it went on and ended elsewhere: the store refuses to resume it
                return Plan({"snapshot": snapshot}, snapshot.state, snapshot)
            asked = self.questions(snapshot)
            if asked:
                if not replies:
                    raise ProtocolRequestError(
                        f"Thread {run_input.thread_id!r} waits for answers to its interrupts "
                        f"{[q.id for q in asked]}: send them in resume[]. Nothing ran."
                    )
                resumption = decide(asked, replies, self.tools)
                options = {"snapshot": snapshot, "decisions": resumption.decisions}
                return Plan(options, snapshot.state, snapshot, abandon=not resumption.go_on)
        if replies:
            raise ProtocolRequestError(
                f"Thread {run_input.thread_id!r} waits for no answers: resume[] answers nothing. Nothing ran."
            )
        messages = to_chat_messages(run_input.messages)
        thread: dict[str, Any] = {}
        if self.threads.in_store:  # the run is the thread's next turn: its store holds the conversation so far
            thread = {"thread": run_input.thread_id}
            if head is not None:
                messages = new_messages(messages)
        if not messages:
            raise ProtocolRequestError("The input has no message the agent can read. Nothing ran.")
        declared = self.agent.state_schema
        given = run_input.state if isinstance(run_input.state, dict) else {}
        state = {k: v for k, v in given.items() if k in declared}
        return Plan({"messages": messages, **thread, **state}, run_input.state)

    async def _relay(self, chunk: StreamingChunk) -> None:
        """The run's streaming callback (so that the model streams): the agent's own gets each chunk too."""
        own = self.agent.streaming_callback
        if own is not None:
            pending = own(chunk)
            if inspect.isawaitable(pending):
                await pending

    async def events(self, run_input: RunAgentInput, encoder: EventEncoder) -> AsyncIterator[str]:
        """The run's AG-UI events, encoded; a ``RUN_ERROR`` for what goes wrong, as the last event."""
        thread = run_input.thread_id
        stream = EventStream(thread, run_input.run_id, base_state=None, declared=(), questions=self.questions)
        failed = False

        def encode(event: BaseEvent) -> str:
            return encoder.encode(event)

        try:
            with self.threads.running(thread):
                plan = await run_in_threadpool(self.plan, run_input)
                stream = EventStream(
                    thread,
                    run_input.run_id,
                    base_state=plan.base_state,
                    declared=self.agent.state_schema,
                    questions=self.questions,
                    expose_errors=self.expose_errors,
                    announced=announced_calls(plan.resumed),
                )
                if plan.abandon and plan.resumed is not None:
                    self.threads.moved(thread, ThreadHead(plan.resumed.run_id, paused=False))
                    stream.agent_run_id = plan.resumed.run_id
                    yield encode(stream.started(resumed=False))
                    ended = RunFinishedEvent(
                        thread_id=thread, run_id=run_input.run_id, outcome=RunFinishedCancelledOutcome()
                    )
                    yield encode(ended)
                    return
                options = dict(plan.options)
                messages = options.pop("messages", None)
                run = cast("AsyncGenerator[Event, None]", self.agent.iter_async(messages, self._relay, **options))
                async with contextlib.aclosing(run) as events:
                    async for event in events:
                        if isinstance(event, RunStarted):
                            self.threads.moved(thread, ThreadHead(event.run_id, paused=False))
                        elif isinstance(event, RunPaused):
                            waits = not isinstance(event.snapshot.pause, Cancelled) and bool(
                                self.questions(event.snapshot)
                            )
                            self.threads.moved(thread, ThreadHead(event.run_id, paused=waits))
                        elif event.kind == "run_ended" and event.error is not None:
                            failed = True
                        for out in stream.translate(event):
                            yield encode(out)
        except REQUEST_ERRORS as exc:
            if not failed:
                yield encode(stream.error(str(exc), type(exc).__name__))
        except Exception as exc:
            if not failed:  # a failed run's RUN_ERROR went out with its run_ended; this is the error itself
                logger.warning("AG-UI run failed", thread=thread, error=type(exc).__name__)
                message = str(exc) if self.expose_errors else None
                yield encode(stream.error(message or f"The run failed ({type(exc).__name__}).", type(exc).__name__))


def new_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """What a client adds to a thread its store holds: the user's messages after the conversation's last other one.

    A client sends the whole conversation each time; the thread's earlier turns are in the store already.
    """
    start = len(messages)
    while start > 0 and messages[start - 1].role is ChatRole.USER:
        start -= 1
    return messages[start:]


def announced_calls(snapshot: AgentSnapshot | None) -> list[str]:
    """The ids of the calls a paused run's client was told of: those the run waits on (none for a new run)."""
    if snapshot is None:
        return []
    return [call_id(ToolCall.from_dict(c), i) for i, c in enumerate(snapshot.pending_tool_calls)]


def create_app(
    agent: Agent,
    *,
    path: str = "/",
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    max_body_bytes: int = MAX_BODY_BYTES,
    expose_errors: bool = False,
    threads: ThreadRuns | None = None,
) -> Starlette:
    """``agent`` as an AG-UI endpoint at ``path`` (``POST``), behind the request checks.

    ``token``: every request must carry ``Authorization: Bearer <token>``. ``allowed_hosts``: names
    it answers to besides loopback. ``allowed_origins``: pages of other origins (``http://host:port``)
    that may call it from a browser (CORS). ``max_body_bytes``: the largest input read.
    ``expose_errors``: tell a failed run's error message to the client (by default its type only).
    ``threads``: where threads stand (``ThreadRuns``, in this process, by default).

    Raises:
        ConfigurationError: the agent has no snapshot store (paused runs wait there), or an allowed
            host or origin is not one.
    """
    hosts, origins = tuple(allowed_hosts), tuple(allowed_origins)
    EndpointChecks(Starlette(), allowed_hosts=hosts, allowed_origins=origins)  # refused now, not at the first request
    endpoint = AGUIEndpoint(agent, threads, expose_errors=expose_errors)
    app = Starlette(routes=[Route(path, endpoint.handle, methods=["POST"])])
    app.router.redirect_slashes = False
    app.add_middleware(
        EndpointChecks,
        token=token,
        allowed_hosts=hosts,
        allowed_origins=origins,
        max_body_bytes=max_body_bytes,
    )
    return app


def serve(agent: Agent, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Serve ``agent`` as an AG-UI endpoint with uvicorn until interrupted; ``options`` are ``create_app``'s.

    Raises:
        ConfigurationError: ``host`` is beyond loopback without a ``token``, or every address
            without ``allowed_hosts``.
    """
    import uvicorn

    check_listening(host, options.get("token"), options.get("allowed_hosts", ()))
    uvicorn.run(create_app(agent, **options), host=host, port=port, log_level="warning")
