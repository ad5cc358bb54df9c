"""The review page's handlers: the runs list, a run's page, its events, its snapshots, and decisions.

``ReviewApp`` holds what they share: where runs are read from (``Runs``: a snapshot store, or
durable runs), the agent that draws them and checks modified arguments, how a decision continues a
run (``Resume``), the access token, and the secret CSRF tokens are signed with. Stores are read in
worker threads, off the event loop.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import secrets
import threading
from collections.abc import Callable
from typing import Any, Protocol, cast
from urllib.parse import quote

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse

from agentfsm._core.decisions import decidable_calls
from agentfsm.agent import Agent
from agentfsm.diagrams import machine_diagram
from agentfsm.errors import (
    AgentFSMError,
    BreakpointException,
    DecisionError,
    DeserializationError,
    MissingRendererError,
    SerializationError,
    SnapshotError,
    StaleSnapshotError,
    ToolArgumentsError,
)
from agentfsm.events import Event, RunResumed
from agentfsm.interrupts import InputAnswer
from agentfsm.logs import logger
from agentfsm.messages import ChatMessage
from agentfsm.pauses import InputQuestion, OutcomeUnknown
from agentfsm.schemas import CompiledSchema
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores.base import EventStore, RunInfo, SnapshotInfo, SnapshotStore, ThreadStore, ThreadTurn
from agentfsm.stores.summaries import SummaryStore, named_status, waits_for_person
from agentfsm.threads import turn_messages
from agentfsm.web.checks import TOKEN_COOKIE, form_refusal
from agentfsm.web.finding import Finder, Query
from agentfsm.web.live import event_stream
from agentfsm.web.pages import (
    error_page,
    h,
    message_html,
    page,
    runs_html,
    thread_html,
    threads_html,
    timeline_html,
)
from agentfsm.web.timeline import timeline


class Runs(Protocol):
    """What the page reads runs from: a ``SnapshotStore``, or ``agentfsm.durable.DurableRuns``."""

    def runs(self) -> list[RunInfo]:
        """Every run, most recently updated first."""

    def latest(self, run_id: str) -> AgentSnapshot:
        """Where the run stands now (``SnapshotError`` when it has no snapshot)."""

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """The run's snapshots, oldest first."""

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """Snapshot ``seq`` of the run."""


#: A run page's timeline reads at most this many of the run's snapshots, and this many of its events.
MAX_TIMELINE_SNAPSHOTS = 400
MAX_TIMELINE_EVENTS = 20_000

#: Continues a run waiting for decisions, from the snapshot the decisions were taken on; returns once
#: the decisions are taken (the run may go on after it), raises if they cannot be.
Resume = Callable[[AgentSnapshot, list[Any]], None]


def resume_here(agent: Agent, snapshot: AgentSnapshot, decisions: list[Any]) -> None:
    """Resume the run in a thread of this process; return once its decisions are taken, while it goes on.

    The run claims its record in the store it comes from, checks and applies the decisions (and
    answers), and resumes: then this returns, and the run goes on in its thread to its end or next pause
    (the run page and its live view follow it). An error before that (a stale snapshot, a decision
    that does not fit) is raised here, and nothing ran; one after it is the run's, kept in its record.
    The thread is not a daemon: a server stopping lets the runs under way finish.
    """
    taken = threading.Event()
    refused: list[BaseException] = []

    def on_event(event: Event) -> None:
        if isinstance(event, RunResumed):
            taken.set()

    def go_on() -> None:
        try:
            agent.run(snapshot=snapshot, decisions=decisions, on_event=on_event)
        except BreakpointException:
            pass  # paused again: the run page shows where
        except Exception as exc:
            if not taken.is_set():
                refused.append(exc)
            else:
                logger.warning("a run resumed from the review page failed", run_id=snapshot.run_id, error=repr(exc))
        finally:
            taken.set()

    threading.Thread(target=go_on, name=f"agentfsm-resume-{snapshot.run_id}").start()
    taken.wait()
    if refused:
        raise refused[0]


class ReviewApp:
    """The review page's state: where runs are read from, the agent and how decisions continue runs, the tokens."""

    def __init__(
        self, store: Runs, agent: Agent | None = None, token: str | None = None, resume: Resume | None = None
    ) -> None:
        self.store = store
        self.agent = agent
        if resume is None and agent is not None:
            agent.snapshot_store = cast(SnapshotStore, store)  # a run resumed here goes on in its store
            resume = functools.partial(resume_here, agent)
        self.resume = resume
        self.token = token
        self.secret = secrets.token_bytes(32)  # signs CSRF tokens; a restart makes the open forms stale
        self.finder = Finder(store, self.latest)

    # -- access --------------------------------------------------------------------------------------

    def allowed(self, request: Request) -> bool:
        """With a token, a request must carry it: as ``?token=``, a cookie, or ``Authorization: Bearer``."""
        if self.token is None:
            return True
        given = (
            request.query_params.get("token")
            or request.cookies.get(TOKEN_COOKIE)
            or request.headers.get("authorization", "").removeprefix("Bearer ")
        )
        return hmac.compare_digest(given.encode(), self.token.encode())

    def csrf_token(self, session: str, run_id: str, seq: str) -> str:
        """The CSRF token of the decision form on snapshot ``seq`` of ``run_id``, shown in ``session``.

        Bound to the session, a token taken in another browser is refused; bound to the snapshot,
        it is good for one decision only: once taken, the run has moved on.
        """
        bound = "\0".join((session, run_id, seq)).encode("utf-8", "surrogatepass")
        return hmac.new(self.secret, bound, hashlib.sha256).hexdigest()

    def run_info(self, run_id: str) -> RunInfo | None:
        """The run's record, or None for a run the store does not hold (a summary store reads it alone)."""
        if isinstance(self.store, SummaryStore):
            return self.store.run_info(run_id)
        return next((r for r in self.store.runs() if r.run_id == run_id), None)

    def latest(self, run_id: str) -> AgentSnapshot | None:
        """The run's newest snapshot, or None for a run without one yet."""
        try:
            return self.store.latest(run_id)
        except SnapshotError:
            return None

    # -- pages ---------------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        """The runs list: titled, searched, filtered by status and date, counted per status, sorted and paged (``Query``)."""
        query = Query.from_params(request.query_params)
        found = await run_in_threadpool(self.finder.find, query)
        threads = "<p><a href='/threads'>Threads</a></p>" if isinstance(self.store, ThreadStore) else ""
        return page("agentfsm runs", threads + runs_html(found, query))

    async def threads(self, request: Request) -> Response:
        """The store's threads (``agentfsm.threads``), each linking to its turns."""
        store = self.store
        if not isinstance(store, ThreadStore):
            return error_page(404, "These runs are kept where no threads are (durable runs): no threads to show.")
        return page("agentfsm threads", threads_html(await run_in_threadpool(store.threads)))

    async def thread(self, request: Request) -> Response:
        """One thread turn by turn: each turn's run and the messages it added."""
        store = self.store
        thread_id = request.path_params["thread_id"]
        if not isinstance(store, ThreadStore):
            return error_page(404, "These runs are kept where no threads are (durable runs): no threads to show.")

        def read() -> list[tuple[ThreadTurn, list[ChatMessage]]]:
            return [(turn, turn_messages(store, turn)) for turn in store.thread_turns(thread_id)]

        turns = await run_in_threadpool(read)
        if not turns:
            return error_page(404, f"No thread {thread_id!r} in this store.")
        return page(f"thread {thread_id}", thread_html(thread_id, turns))

    async def run(self, request: Request) -> Response:
        """One run: diagram, pending calls and their forms, the live view, conversation, trace, snapshot history."""
        run_id = request.path_params["run_id"]
        info = await run_in_threadpool(self.run_info, run_id)
        # Counted before the snapshot is read: the live view follows from there, so no event after
        # the snapshot goes unseen (one before it may only redraw the page once more).
        counted = await run_in_threadpool(self.event_count, run_id) if info is not None else None
        snapshot = await run_in_threadpool(self.latest, run_id)
        if info is None or snapshot is None:
            return error_page(404, f"No run {run_id!r} with a snapshot in this store.")
        status = status_of(info, snapshot)
        state = [
            f"<p class='status' id='status'>{h(status)}</p>",
            f"<p>phase {h(snapshot.phase.value)}, step {snapshot.step}"
            + (f", exit reason {h(exit_reason)}" if (exit_reason := info.exit_reason or snapshot.exit_reason) else "")
            + "</p>",
            f"<div class='diagram'>{await run_in_threadpool(self.diagram, snapshot, status)}</div>",
        ]
        if status == "waiting for approval":
            state.append(self.decision_form(snapshot, request.state.session))
        history = await run_in_threadpool(self.store.history, run_id)
        record = [
            await run_in_threadpool(self.timeline, run_id, snapshot, history),
            "<h2>Conversation</h2>" + "".join(message_html(ChatMessage.from_dict(m)) for m in snapshot.messages),
        ]
        links = "".join(
            f"<li><a href='/runs/{quote(run_id)}/snapshots/{i.seq}'>#{i.seq}</a> {h(i.phase.value)}, step {i.step}, "
            f"{h(i.created_at)}</li>"
            for i in history
        )
        record.append(f"<h2>Snapshots</h2><ol start='0'>{links}</ol>")
        live = ""
        if counted is not None:
            live = (
                f"<section id='live' data-events='/runs/{quote(run_id)}/events?after={counted}'><h2>Live</h2>"
                "<p id='live-state'>Connecting to the run's events...</p><ol id='live-log'></ol></section>"
            )
        body = (
            f"<h1>Run {h(run_id)}</h1><div id='run-state'>{''.join(state)}</div>{live}"
            f"<div id='run-record'>{''.join(record)}</div>"
            "<script src='/review.js'></script>" + ("<script src='/live.js'></script>" if live else "")
        )
        # A run that is going on is shown moving: by its events as they come, else by loading the
        # page again every two seconds (its process does not record them).
        return page(f"run {run_id}", body, refresh=2 if status == "running" and not counted else None)

    def timeline(self, run_id: str, latest: AgentSnapshot, history: list[SnapshotInfo]) -> str:
        """The run's timeline, from its snapshots (the newest of each step, when it has very many) and its events."""
        if len(history) > MAX_TIMELINE_SNAPSHOTS:
            newest = {i.step: i for i in history}
            history = sorted(newest.values(), key=lambda i: i.seq)[-MAX_TIMELINE_SNAPSHOTS:]
        snapshots = []
        for info in history:
            if info.seq == latest.seq:
                continue
            with contextlib.suppress(SnapshotError):  # a snapshot that cannot be read is left out of the timeline
                snapshots.append(self.store.load(run_id, info.seq))
        snapshots.append(latest)
        events: list[Event] = []
        note = ""
        if isinstance(self.store, EventStore):
            try:
                events = [
                    s.event for s in self.store.events(run_id, 0, MAX_TIMELINE_EVENTS) if s.event.kind != "model_chunk"
                ]
            except (DeserializationError, SerializationError, SnapshotError) as exc:
                note = f"The run's events cannot be read ({exc}): its timeline is drawn from its snapshots."
        return timeline_html(timeline(snapshots, events), latest, note)

    def event_count(self, run_id: str) -> int | None:
        """How many of the run's events the store holds; ``None`` when it keeps none (or none can be kept for this id)."""
        if not isinstance(self.store, EventStore):
            return None
        try:
            return self.store.event_count(run_id)
        except SnapshotError:  # a run id that names no place where events can be
            return None

    async def events(self, request: Request) -> Response:
        """The run's stored events after ``Last-Event-ID`` (or ``?after=``), then each new one, as Server-Sent Events.

        Each event is a message whose data is the event's ``stored_dict`` (JSON) and whose id is
        its number. The run's ``run_ended`` is followed by an ``end`` event, and the stream ends
        there (the page stops listening). A stored event that cannot be read back is a ``problem``
        event saying why, and the stream goes on; nothing it names is imported unless the allow-list
        allows it (``agentfsm.web.live``).
        """
        run_id = request.path_params["run_id"]
        store = self.store
        if not isinstance(store, EventStore):
            return PlainTextResponse("This store keeps no events: the run's page reloads itself instead.", 404)
        given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if not (given.isascii() and given.isdigit() and len(given) < 19):  # a number the store's column holds
            return PlainTextResponse(f"Events are numbered 1, 2, 3...; {given[:40]!r} is not one.", 400)
        counted = await run_in_threadpool(self.event_count, run_id)
        if not counted and await run_in_threadpool(self.run_info, run_id) is None:
            return PlainTextResponse(f"No run {run_id!r} in this store.", 404)
        return StreamingResponse(
            event_stream(store, run_id, int(given)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store"},
        )

    def diagram(self, snapshot: AgentSnapshot, status: str) -> str:
        """The agent's diagram with where the run stands (SVG; Mermaid text without a renderer)."""
        paused = status in ("paused", "waiting for approval")
        options: dict[str, Any] = {"snapshot": snapshot} if paused else {"trace": snapshot.trace}
        try:
            svg = machine_diagram("svg", agent=self.agent, **options)
            return svg.decode() if isinstance(svg, bytes) else svg
        except MissingRendererError:
            return f"<pre>{h(machine_diagram('mermaid', agent=self.agent, **options))}</pre>"

    def decision_form(self, snapshot: AgentSnapshot, session: str) -> str:
        """Approve / reject / modify for each call waiting for a decision, none chosen beforehand."""
        from agentfsm.hitl import get_tool_calls_and_descriptions_from_snapshot

        if self.agent is None:
            return "<p>Start the page with an agent (<code>--agent</code>) to decide.</p>"
        _, descriptions = get_tool_calls_and_descriptions_from_snapshot(snapshot, breakpoint_tool_only=False)
        schemas = {t.name: t.parameters for t in self.agent.known_tools()}
        blocks = [question_block(q) for q in snapshot.awaited_answers()]
        doubt = snapshot.pause if isinstance(snapshot.pause, OutcomeUnknown) else None
        for call_id, call in waiting_calls(snapshot).items():
            arguments = orjson.dumps(call["arguments"], option=orjson.OPT_INDENT_2).decode()
            schema = orjson.dumps(schemas.get(call["tool_name"], {})).decode()
            blocks.append(
                f"<div class='call' data-call='{h(call_id)}' data-schema='{h(schema)}'>"
                f"<h3>{h(call['tool_name'])} <small>{h(call_id)}</small></h3>"
                f"<p>{h(descriptions.get(call['tool_name'], ''))}</p>{doubt_note(doubt, call_id)}<pre>{h(arguments)}</pre>"
                f"<label><input type='radio' name='action:{h(call_id)}' value='approve'> approve</label> "
                f"<label><input type='radio' name='action:{h(call_id)}' value='reject'> reject</label> "
                f"<label><input type='radio' name='action:{h(call_id)}' value='modify'> modify</label>"
                f"<p><label>feedback <input name='feedback:{h(call_id)}' size='60'></label></p>"
                f"<p><label>new arguments (JSON, for modify)<textarea name='params:{h(call_id)}' rows='4'>"
                f"{h(arguments)}</textarea></label></p><p class='problem error' hidden></p></div>"
            )
        return (
            f"<h2>Waiting for your decision</h2><form id='decisions' method='post' "
            f"action='/runs/{quote(snapshot.run_id)}/decide'>"
            f"<input type='hidden' name='csrf' value='{self.csrf_token(session, snapshot.run_id, str(snapshot.seq))}'>"
            f"<input type='hidden' name='seq' value='{h(snapshot.seq)}'>"
            f"{''.join(blocks)}<button type='submit' id='decide'>Submit and resume</button></form>"
        )

    async def snapshot_json(self, request: Request) -> Response:
        """One snapshot as JSON."""
        seq = request.path_params["seq"]
        if not (seq.isascii() and seq.isdigit() and len(seq) < 19):  # a number a store's integer column holds
            return JSONResponse(
                {"error": f"No snapshot {seq[:40]!r}: snapshots are numbered 0, 1, 2..."}, status_code=404
            )
        try:
            snapshot = await run_in_threadpool(self.store.load, request.path_params["run_id"], int(seq))
        except SnapshotError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return Response(snapshot.to_bytes(), media_type="application/json")

    async def decide(self, request: Request) -> Response:
        """Resume a run waiting in CONFIRM with the form's decisions; refuse anything that does not fit."""
        refused = form_refusal(request)
        if refused is not None:
            return refused
        form = await request.form(max_files=0)
        run_id = request.path_params["run_id"]
        given = str(form.get("csrf", ""))
        expected = self.csrf_token(request.state.session, run_id, str(form.get("seq", "")))
        if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode()):
            return error_page(
                403,
                "This form is not from this page in this browser (its CSRF token is missing, wrong or from another "
                "session): load the run's page again and decide there. Nothing was changed.",
            )
        if self.agent is None or self.resume is None:
            return error_page(400, "This page was started without an agent: it cannot resume runs.")
        snapshot = await run_in_threadpool(self.latest, run_id)
        if snapshot is None or str(snapshot.seq) != form.get("seq"):
            return error_page(
                409,
                f"Run {run_id} moved on since this page was shown (it is no longer at that snapshot). Nothing was changed.",
            )
        if not waiting_calls(snapshot) and not snapshot.awaited_answers():
            return error_page(409, f"Run {run_id} is not waiting for a decision. Nothing was changed.")
        try:
            decisions = self.decisions(snapshot, {k: str(v) for k, v in form.items()})
        except (ToolArgumentsError, DecisionError, ValueError) as exc:
            return error_page(400, f"{exc} Nothing was changed.")
        try:
            await run_in_threadpool(self.resume, snapshot, decisions)
        except StaleSnapshotError as exc:
            return error_page(409, f"{exc}")
        except BreakpointException:
            pass  # a resume of your own let the run's next pause out: it is no failure, the run page shows where
        except AgentFSMError as exc:
            return error_page(400, f"The run could not go on: {exc}")
        return RedirectResponse(f"/runs/{quote(run_id)}", status_code=303)

    def decisions(self, snapshot: AgentSnapshot, form: dict[str, str]) -> list[Any]:
        """The form's answers as decisions bound to the calls shown; modified arguments checked against the tool."""
        from agentfsm.hitl.answers import Answer, decisions_from_answers

        assert self.agent is not None
        calls = waiting_calls(snapshot)
        given = [InputAnswer(q.id, answer_of(q, form.get(f"answer:{q.id}"))) for q in snapshot.awaited_answers()]
        answers = {}
        for call_id in calls:
            action = form.get(f"action:{call_id}")
            if not action:
                raise ValueError(f"No decision for {call_id}: choose approve, reject or modify for every call.")
            feedback, arguments = form.get(f"feedback:{call_id}") or None, form.get(f"params:{call_id}")
            answers[call_id] = Answer(action, feedback, arguments if action == "modify" else None)
        return [*decisions_from_answers(calls, answers, self.agent.known_tools()), *given]


def status_of(info: RunInfo, snapshot: AgentSnapshot | None) -> str:
    """What the page calls a run's status: running, paused, waiting for approval, done or failed.

    A run waits for approval when a person is to decide a call or answer a question a tool or a hook asked.
    """
    return named_status(info.status, snapshot is not None and waits_for_person(snapshot))


def question_block(question: InputQuestion) -> str:
    """A question a tool or a hook asked, with a field for its answer made from its schema.

    A schema's ``enum`` (or a boolean) is a choice, an integer or a number a number field, a
    string a text field; any other answer is written as JSON. ``answer_of`` reads it back.
    """
    schema = question.response_schema
    name = f"answer:{h(question.id)}"
    options = [True, False] if schema.get("type") == "boolean" else schema.get("enum")
    if isinstance(options, list) and options:
        choices = "".join(
            f"<option value='{h(orjson.dumps(o).decode())}'>{h(o if isinstance(o, str) else orjson.dumps(o).decode())}</option>"
            for o in options
        )
        field = f"<select name='{name}' required><option value=''>choose</option>{choices}</select>"
    elif schema.get("type") in ("integer", "number"):
        step = "1" if schema["type"] == "integer" else "any"
        field = f"<input type='number' step='{step}' name='{name}' required>"
    elif schema.get("type") == "string":
        field = f"<input name='{name}' size='60' required>"
    else:
        field = f"<textarea name='{name}' rows='4' required></textarea> <small>(JSON)</small>"
    asker = question.tool_name or f"the {question.hook_point} hook"
    return (
        f"<div class='question' data-question='{h(question.id)}' "
        f"data-schema='{h(orjson.dumps(schema).decode())}'><h3>{h(question.question)} <small>{h(question.id)}</small>"
        f"</h3><p>asked by {h(asker)}</p><label>answer {field}</label></div>"
    )


def answer_of(question: InputQuestion, text: str | None) -> Any:
    """The answer a question's field holds (``question_block``), checked against its schema.

    Raises:
        ValueError: the field is missing, not of the form it was given, or its value breaks the schema.
    """
    if not text:
        raise ValueError(f"No answer for {question.id}: answer every question.")
    schema = question.response_schema
    kind = schema.get("type")
    is_choice = kind == "boolean" or isinstance(schema.get("enum"), list)
    if kind == "string" and not is_choice:
        value: Any = text
    else:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise ValueError(f"The answer to {question.id} is not JSON: {text[:80]!r}.") from None
    problems = CompiledSchema(schema, f"question {question.id}").errors(value)
    if problems:
        raise ValueError(f"The answer to {question.id} does not fit its schema: {problems[0].message}.")
    return value


def doubt_note(pause: OutcomeUnknown | None, call_id: str) -> str:
    """What a person deciding a call in doubt should know: it may have run, and why code could not tell."""
    if pause is None or call_id not in pause.tool_call_ids:
        return ""
    note = pause.notes.get(call_id)
    why = f" Its reconcile function could not tell: {h(note)}." if note else ""
    return (
        "<p class='doubt'>In doubt after a crash: it started and its result was never recorded, so it may have "
        f"happened. Approve runs it again; reject gives your feedback as its result.{why}</p>"
    )


def waiting_calls(snapshot: AgentSnapshot) -> dict[str, Any]:
    """The pending calls of a paused run that a decision may be given for, by key (``decidable_calls``).

    Those a confirmation waits for, and those in doubt after a crash (approve runs one again, reject
    gives its feedback as its result); none when a breakpoint paused the run.
    """
    if not snapshot.awaited_decisions():
        return {}
    calls = snapshot.pending_calls_by_key()
    return {key: calls[key] for key in decidable_calls(snapshot) if key in calls}
