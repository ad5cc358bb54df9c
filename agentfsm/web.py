"""The review page: a store's runs, where each stands on the agent's diagram, and decisions from a browser.

``create_app(store, agent)`` is an ASGI application (Starlette); ``agentfsm serve`` runs it with
uvicorn. Pages are rendered on the server (no front-end build) and every text from a run is
escaped. A run waiting in CONFIRM shows its pending calls with approve / reject / modify forms;
submitting resumes the run through ``agent.run(snapshot=..., decisions=...)``, the same API as
the command line (durable runs: the decision goes to the run's queue, for a worker).

The live view is a consumer of the runs' events (``agentfsm.events``), through the store: a store
that keeps events (``record_events=True``, an ``EventStore``) holds what the runs of any process
emit, ``GET /runs/{run_id}/events`` streams a run's stored events as Server-Sent Events (each
event's ``stored_dict``, its number as the SSE id, so a reconnecting browser resumes after the
last one it got: ``Last-Event-ID``), and the run page's script (``/live.js``) appends them to a
live log and redraws the run's status, diagram and forms when its phase changes, it pauses or it
ends; after a run's last event (``run_ended``) the stream ends, and the page stops listening.
Without stored events, a running run's page reloads itself every two seconds instead.

What a request must be to be answered (``RequestChecks`` and ``ReviewApp``): for an allowed host
(``Host``: the loopback names, plus ``allowed_hosts``), so that a page on another site whose name
was rebound to this machine gets nothing; a state-changing one (a POST) from this page's origin
(``Origin``, else ``Referer``) and carrying a CSRF token bound to the browser's session cookie and
to the snapshot the form showed; with ``token`` set, carrying the token too (``?token=``, then a
cookie). Every response forbids framing and allows only the page's own script and style (which
may read this page's own URLs, for the live view). Needs the ``web`` extra: ``pip install 'agentfsm[web]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import html
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol, cast
from urllib.parse import quote, urlsplit

import orjson

from agentfsm._core.decisions import decidable_calls
from agentfsm._extras import extra_needed
from agentfsm.agent import Agent
from agentfsm.diagrams import machine_diagram
from agentfsm.errors import (
    AgentFSMError,
    BreakpointException,
    ConfigurationError,
    DecisionError,
    DeserializationError,
    MissingExtraError,
    MissingRendererError,
    SerializationError,
    SnapshotError,
    StaleSnapshotError,
    ToolArgumentsError,
)
from agentfsm.events import stored_dict
from agentfsm.messages import ChatMessage
from agentfsm.pauses import RunStatus
from agentfsm.serialization import dump_json
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores.base import EventStore, RunInfo, SnapshotInfo, SnapshotStore

with extra_needed("agentfsm.web", "web"):
    from starlette import formparsers
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.datastructures import MutableHeaders
    from starlette.requests import Request
    from starlette.responses import (
        HTMLResponse,
        JSONResponse,
        PlainTextResponse,
        RedirectResponse,
        Response,
        StreamingResponse,
    )
    from starlette.routing import Route
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The decision forms are read by python-multipart, which starlette imports only when it is there.
if vars(formparsers).get("multipart") is None:
    raise MissingExtraError("agentfsm.web", "web", "No module named 'python_multipart'", name="python_multipart")

#: The name of the cookie that carries the access token once a page was opened with ``?token=``.
TOKEN_COOKIE = "agentfsm_token"
#: The name of the cookie that carries the browser's session id, to which its CSRF tokens are bound.
SESSION_COOKIE = "agentfsm_session"
#: The host names the page always answers to: this machine's loopback names (any port).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
#: The largest decision form accepted; the page's forms are a few kilobytes.
MAX_FORM_BYTES = 256 * 1024

#: On every response: never in a frame, only this page's own script and style, which may connect
#: to this page only (the live view's event stream and redraws), no type sniffing, and a Referer
#: only to this page itself (a POST's Origin stays the page's own: under ``no-referrer`` browsers
#: would send ``Origin: null`` and the origin check could not tell).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

#: The page's style sheet, served as ``/review.css`` (the security policy allows no inline style).
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 72rem; }
table { border-collapse: collapse; } td, th { padding: .3rem .6rem; border-bottom: 1px solid #ddd; text-align: left; }
.status { font-weight: 600; } .waiting { color: #b45309; } .done { color: #15803d; } .failed { color: #b91c1c; }
.message { border-left: 3px solid #ccc; padding: .3rem .8rem; margin: .5rem 0; white-space: pre-wrap; }
.assistant { border-color: #2563eb; } .tool { border-color: #9333ea; } .user { border-color: #15803d; }
.error { background: #fee2e2; padding: .8rem; } .call { border: 1px solid #ddd; padding: .8rem; margin: .8rem 0; }
.diagram svg { max-width: 100%; height: auto; } textarea { width: 100%; font-family: monospace; }
#live-log { max-height: 24rem; overflow-y: auto; font-family: monospace; font-size: .85rem; }
#live-log time { color: #666; margin-right: .6rem; }
"""


#: Checks the decisions in the browser before the form is sent, served as ``/review.js``: a choice
#: for every call; modified arguments JSON, an object, with the schema's required keys and property
#: types. The server checks them again, against the whole schema. It listens on the document, so a
#: form the live view brings in later is checked too.
CHECK_DECISIONS = """
const types = {
  string: (v) => typeof v === "string", integer: Number.isInteger, number: (v) => typeof v === "number",
  boolean: (v) => typeof v === "boolean", array: Array.isArray,
  object: (v) => typeof v === "object" && v !== null && !Array.isArray(v),
};
function problemWith(text, schema) {
  let value;
  try { value = JSON.parse(text); } catch (error) { return "The new arguments are not JSON: " + error.message; }
  if (!types.object(value)) return "The new arguments must be a JSON object.";
  for (const key of schema.required || []) if (!(key in value)) return `"${key}" is required.`;
  for (const [key, property] of Object.entries(schema.properties || {})) {
    const check = types[property.type];
    if (key in value && check && !check(value[key])) return `"${key}" must be of type ${property.type}.`;
  }
  return null;
}
document.addEventListener("submit", (event) => {
  if (event.target.id !== "decisions") return;
  for (const call of document.querySelectorAll(".call")) {
    const shown = call.querySelector(".problem");
    const chosen = Array.from(call.querySelectorAll("input[type=radio]")).find((radio) => radio.checked);
    const problem = chosen === undefined ? "Choose approve, reject or modify for this call."
      : chosen.value === "modify" ? problemWith(call.querySelector("textarea").value, JSON.parse(call.dataset.schema))
      : null;
    shown.hidden = problem === null;
    shown.textContent = problem || "";
    if (problem !== null) event.preventDefault();
  }
});
"""


#: The live view, served as ``/live.js``: follows the run's event stream (``#live``'s
#: ``data-events``), appends each event to the live log as text (never as markup), and redraws the
#: run's status, diagram, forms and record from the run's page when its phase changes, it pauses,
#: resumes or ends. The browser reconnects by itself, resuming after the last event it got.
LIVE_VIEW = """
const live = document.getElementById("live");
if (live !== null) {
  const log = document.getElementById("live-log");
  const state = document.getElementById("live-state");
  const KEPT = 300;
  const REDRAWN_ON = new Set(["transition", "paused", "resumed", "run_ended"]);
  const shown = (value) => (typeof value === "string" ? value : JSON.stringify(value));
  const chunkText = (event) => shown(((event.chunk || {}).data || {}).content || "");
  const describe = {
    run_started: (e) => (e.resumed ? "run resumed" : "run started"),
    transition: (e) => `${e.source} -> ${e.dest} (${e.trigger})` + (e.exit_reason ? `, exit reason ${e.exit_reason}` : ""),
    call_transition: (e) => `call ${e.call} (${e.tool}): ${e.source} -> ${e.dest} (${e.trigger})`,
    model_started: (e) => `model ${e.model} called with ${e.messages} messages`,
    model_chunk: (e) => "streamed: " + chunkText(e),
    model_ended: (e) => `model ${e.model} replied` + (e.finish_reasons.length ? ` (${e.finish_reasons.join(", ")})` : ""),
    model_failed: (e) => `model ${e.model} failed: ${e.error}`,
    tool_started: (e) => `${e.tool} (call ${e.call}) started with ${shown(e.arguments)}`,
    tool_progress: (e) => `${e.tool} (call ${e.call}) at ${e.progress}` + (e.total !== null ? ` of ${e.total}` : "") + (e.message ? `: ${e.message}` : ""),
    tool_ended: (e) => (e.error ? `${e.tool} (call ${e.call}) failed: ${e.error}` : `${e.tool} (call ${e.call}) returned ${shown(e.result)}`),
    hook: (e) => `hook ${e.hook} at ${e.point}` + (e.error ? ` failed: ${e.error}` : ""),
    decision: (e) => `decision on call ${e.call}: ` + (e.decision.execute ? "run it" : "do not run it"),
    paused: (e) => `paused: ${e.reason}`,
    resumed: (e) => `resumed into ${e.phase}`,
    run_ended: (e) => (e.error ? `run failed: ${e.error}` : `run ended: ${e.exit_reason}`),
  };
  function append(event, number) {
    const last = log.lastElementChild;
    if (event.kind === "model_chunk" && last !== null && last.dataset.kind === "model_chunk") {
      last.lastChild.textContent += chunkText(event);  // one line per streamed reply
      return;
    }
    let text;
    try { text = Object.hasOwn(describe, event.kind) ? describe[event.kind](event) : event.kind; } catch (error) { text = event.kind; }
    const item = document.createElement("li");
    item.dataset.kind = event.kind;
    item.dataset.number = number;
    const time = document.createElement("time");
    time.textContent = new Date(event.at * 1000).toLocaleTimeString();
    item.append(time, document.createTextNode(text));
    log.append(item);
    while (log.children.length > KEPT) log.firstElementChild.remove();
    log.scrollTop = log.scrollHeight;
  }
  let redrawing = false;
  let again = false;
  async function redraw() {
    if (redrawing) { again = true; return; }
    redrawing = true;
    try {
      const response = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) throw new Error(`the page answered ${response.status}`);
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const part of ["run-state", "run-record"]) {
        const now = document.getElementById(part);
        const next = fresh.getElementById(part);
        if (now !== null && next !== null) now.replaceWith(document.adoptNode(next));
      }
    } catch (error) {
      state.textContent = "Could not redraw the run: " + error.message;
    } finally {
      redrawing = false;
      if (again) { again = false; redraw(); }
    }
  }
  const source = new EventSource(live.dataset.events);
  source.onopen = () => { state.textContent = "Following the run: its events appear below as they happen."; };
  source.onerror = () => {
    state.textContent = source.readyState === EventSource.CLOSED ? "The live view stopped." : "Reconnecting...";
  };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    append(event, message.lastEventId);
    if (REDRAWN_ON.has(event.kind)) redraw();
  };
  source.addEventListener("end", () => {
    source.close();
    state.textContent = "The run ended.";
  });
  source.addEventListener("problem", (message) => {
    source.close();
    state.textContent = JSON.parse(message.data).error;
    state.classList.add("error");
  });
}
"""

#: The Server-Sent Event after a run's last one: the page stops listening.
_END = "event: end\ndata: {}\n\n"


def _ended_with(store: EventStore, run_id: str, number: int) -> bool:
    """Whether the run's event ``number`` is its last (``run_ended``); an event that cannot be read is not."""
    try:
        found = store.events(run_id, number - 1, 1)
    except (DeserializationError, SerializationError, SnapshotError):
        return False  # the stream reads it again, and says why it cannot
    return bool(found) and found[0].number == number and found[0].event.kind == "run_ended"


#: How often a live view's stream looks for new events in the store, how many it reads at once,
#: how long one stream lasts (then the browser opens the next, from the last event it got: a page
#: that stops waits for no stream longer than that), and after how long a quiet one sends a comment
#: (so that proxies keep it open). ``RETRY_MS`` is how soon the browser reconnects.
POLL_SECONDS = 0.2
EVENTS_PER_READ = 200
STREAM_SECONDS = 15.0
KEEPALIVE_SECONDS = 5.0
RETRY_MS = 500


def h(value: Any) -> str:
    """Escape any value for HTML."""
    return html.escape(str(value), quote=True)


def status_of(info: RunInfo, snapshot: AgentSnapshot | None) -> str:
    """What the page calls a run's status: running, paused, waiting for approval, done or failed."""
    if info.status is RunStatus.ACTIVE:
        return "running"
    if info.status is RunStatus.PAUSED and snapshot is not None and waiting_calls(snapshot):
        return "waiting for approval"
    return info.status.value


def page(title: str, body: str, refresh: int | None = None) -> HTMLResponse:
    """A whole HTML page; ``refresh``: seconds after which the browser loads it again."""
    again = f"<meta http-equiv='refresh' content='{refresh}'>" if refresh else ""
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'>{again}<title>{h(title)}</title>"
        "<link rel='stylesheet' href='/review.css'></head>"
        f"<body><p><a href='/'>agentfsm runs</a></p>{body}</body></html>"
    )


def error_page(status: int, message: str) -> HTMLResponse:
    """A page saying what went wrong; nothing was changed."""
    response = page("error", f"<div class='error'><strong>{h(message)}</strong></div>")
    response.status_code = status
    return response


def host_name(host: str) -> str | None:
    """The name in a ``Host`` value (``name``, ``name:port``, ``[v6]:port``), lower-case; None when malformed."""
    name, port = host, ""
    if host.startswith("["):
        name, bracket, port = host.partition("]")
        name += bracket
        if not bracket or (port and not port.startswith(":")):
            return None
        port = port[1:]
    elif ":" in host:
        name, _, port = host.partition(":")
    if not name or (port and not (port.isascii() and port.isdigit())):
        return None
    return name.lower()


#: What an allowed host may be: a DNS name or IPv4 address, or an IPv6 address in brackets.
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?|\[[0-9a-f:.]+\]")


def allowed_host_names(allowed_hosts: Iterable[str]) -> frozenset[str]:
    """The names given as ``allowed_hosts``, lower-case, IPv6 addresses bracketed as ``Host`` carries them.

    Raises:
        ConfigurationError: for an entry that is not a host name (a URL, a name with a port).
    """
    names = set()
    for given in allowed_hosts:
        name = given.lower()
        if name.count(":") > 1 and not name.startswith("["):  # a bare IPv6 address
            name = f"[{name}]"
        if not HOST_NAME.fullmatch(name):
            raise ConfigurationError(
                f"Allowed host {given!r} is not a host name: give a name or address as browsers reach the page, "
                "without a scheme, a port or a path (e.g. review.example.com)."
            )
        names.add(name)
    return frozenset(names)


def origin_of(url: str) -> str | None:
    """``host[:port]`` of an ``Origin`` or ``Referer`` value (lower-case), or None for ``null``, another scheme or a malformed one."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        return None
    return parts.netloc.lower()


class RequestChecks:
    """ASGI middleware: answers only requests for an allowed host, state-changing ones only from an allowed origin, and adds ``SECURITY_HEADERS`` to every response.

    A page on another site can make a browser send requests here: by rebinding its own name to
    127.0.0.1 it reads the answers too, but its requests still carry its name as ``Host``, and a
    form it submits carries its origin as ``Origin``.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.proxied = allowed_host_names(allowed_hosts)
        self.hosts = self.proxied | set(LOOPBACK_HOSTS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request, or refuse it; either way with the security headers."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        refusal = self.refusal(Request(scope))
        await (refusal or self.app)(scope, receive, send_secured)

    def refusal(self, request: Request) -> Response | None:
        """Why the request is not answered (a short plain-text response), or None when it may go on."""
        host = request.headers.get("host", "")
        if host_name(host) not in self.hosts:
            return PlainTextResponse(
                f"This page does not answer to the host {host[:100]!r}: open it as {', '.join(sorted(self.hosts))} "
                "(start it with --allowed-host NAME to add a name).",
                status_code=400,
            )
        if request.method in ("GET", "HEAD"):
            return None
        source = request.headers.get("origin") or request.headers.get("referer")
        origin = origin_of(source) if source else None
        if origin is None or (origin != host.lower() and host_name(origin) not in self.proxied):
            claimed = f"it came from {source[:100]!r}" if source else "it said neither Origin nor Referer"
            return PlainTextResponse(
                f"Refused: a {request.method} must come from this page ({claimed}). Nothing was changed.",
                status_code=403,
            )
        return None


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


#: Continues a run waiting for decisions, from the snapshot the decisions were taken on.
Resume = Callable[[AgentSnapshot, list[Any]], None]


def resume_here(agent: Agent, snapshot: AgentSnapshot, decisions: list[Any]) -> None:
    """Resume the run in this process (it goes on in the store it comes from) until it ends or pauses again."""
    with contextlib.suppress(BreakpointException):  # paused again: the run page shows where
        agent.run(snapshot=snapshot, decisions=decisions)


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

    def latest(self, run_id: str) -> AgentSnapshot | None:
        """The run's newest snapshot, or None for a run without one yet."""
        try:
            return self.store.latest(run_id)
        except SnapshotError:
            return None

    # -- pages ---------------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        """The runs list, filtered by ``?status=`` (stores are read in worker threads, off the event loop)."""
        wanted = request.query_params.get("status")
        rows = []
        for info in await run_in_threadpool(self.store.runs):
            snapshot = await run_in_threadpool(self.latest, info.run_id)
            status = status_of(info, snapshot)
            if wanted and status != wanted:
                continue
            exit_reason = info.exit_reason or (snapshot.exit_reason if snapshot is not None else None)
            rows.append(
                f"<tr><td><a href='/runs/{quote(info.run_id)}'>{h(info.run_id)}</a></td>"
                f"<td class='status'>{h(status)}</td><td>{h(info.phase.value if info.phase else '-')}</td>"
                f"<td>{info.step}</td><td>{h(exit_reason or '')}</td><td>{h(info.updated_at)}</td></tr>"
            )
        filters = " ".join(
            f"<a href='/?status={quote(s)}'>{h(s)}</a>"
            for s in ("running", "paused", "waiting for approval", "done", "failed")
        )
        body = (
            f"<h1>Runs</h1><p>Show: <a href='/'>all</a> {filters}</p>"
            "<table><tr><th>run</th><th>status</th><th>phase</th><th>step</th><th>exit reason</th>"
            f"<th>last change</th></tr>{''.join(rows)}</table>"
        )
        return page("agentfsm runs", body)

    async def run(self, request: Request) -> Response:
        """One run: diagram, pending calls and their forms, the live view, conversation, trace, snapshot history."""
        run_id = request.path_params["run_id"]
        info = next((r for r in await run_in_threadpool(self.store.runs) if r.run_id == run_id), None)
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
        record = [
            "<h2>Conversation</h2>" + "".join(message_html(ChatMessage.from_dict(m)) for m in snapshot.messages),
            trace_html(snapshot),
        ]
        history = await run_in_threadpool(self.store.history, run_id)
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
        there (the page stops listening). A stored event that cannot be read back ends the stream
        with a ``problem`` event saying why; nothing it names is imported unless the allow-list allows it.
        """
        run_id = request.path_params["run_id"]
        store = self.store
        if not isinstance(store, EventStore):
            return PlainTextResponse("This store keeps no events: the run's page reloads itself instead.", 404)
        given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if not (given.isascii() and given.isdigit() and len(given) < 19):  # a number the store's column holds
            return PlainTextResponse(f"Events are numbered 1, 2, 3...; {given[:40]!r} is not one.", 400)
        counted = await run_in_threadpool(self.event_count, run_id)
        if not counted and not any(r.run_id == run_id for r in await run_in_threadpool(store.runs)):
            return PlainTextResponse(f"No run {run_id!r} in this store.", 404)
        return StreamingResponse(
            self.stream(store, run_id, int(given)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store"},
        )

    async def stream(self, store: EventStore, run_id: str, after: int) -> AsyncIterator[str]:
        """The Server-Sent Events of the run's stored events numbered above ``after``, for ``STREAM_SECONDS``.

        It ends at the run's last event (``run_ended``), with an ``end`` event: at once when that
        is the event numbered ``after`` (a page drawn after the run ended, a browser reconnecting).
        """
        yield f"retry: {RETRY_MS}\n\n"
        if after and await run_in_threadpool(_ended_with, store, run_id, after):
            yield _END
            return
        started = time.monotonic()
        ends, heard, batch = started + STREAM_SECONDS, started, EVENTS_PER_READ
        while time.monotonic() < ends:
            try:
                found = await run_in_threadpool(store.events, run_id, after, batch)
                messages = [f"id: {s.number}\ndata: {dump_json(stored_dict(s.event)).decode()}\n\n" for s in found]
            except (DeserializationError, SerializationError, SnapshotError) as exc:
                if batch > 1:  # read one at a time: the events before the one that cannot be read go out
                    batch = 1
                    continue
                yield f"event: problem\ndata: {orjson.dumps({'error': str(exc)}).decode()}\n\n"
                return
            if found:
                after, heard = found[-1].number, time.monotonic()
                yield "".join(messages)
                if found[-1].event.kind == "run_ended":  # its last: the browser stops listening
                    yield _END
                    return
                if len(found) == batch:
                    continue  # more are waiting
            elif time.monotonic() - heard > KEEPALIVE_SECONDS:
                heard = time.monotonic()
                yield ": no new events\n\n"
            await asyncio.sleep(POLL_SECONDS)

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
        blocks = []
        for call_id, call in waiting_calls(snapshot).items():
            arguments = orjson.dumps(call["arguments"], option=orjson.OPT_INDENT_2).decode()
            schema = orjson.dumps(schemas.get(call["tool_name"], {})).decode()
            blocks.append(
                f"<div class='call' data-call='{h(call_id)}' data-schema='{h(schema)}'>"
                f"<h3>{h(call['tool_name'])} <small>{h(call_id)}</small></h3>"
                f"<p>{h(descriptions.get(call['tool_name'], ''))}</p><pre>{h(arguments)}</pre>"
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
        if not waiting_calls(snapshot):
            return error_page(409, f"Run {run_id} is not waiting for a decision. Nothing was changed.")
        try:
            decisions = self.decisions(snapshot, {k: str(v) for k, v in form.items()})
        except (ToolArgumentsError, DecisionError, ValueError) as exc:
            return error_page(400, f"{exc} Nothing was changed.")
        try:
            await run_in_threadpool(self.resume, snapshot, decisions)
        except StaleSnapshotError as exc:
            return error_page(409, f"{exc}")
        except AgentFSMError as exc:
            return error_page(400, f"The run could not go on: {exc}")
        return RedirectResponse(f"/runs/{quote(run_id)}", status_code=303)

    def decisions(self, snapshot: AgentSnapshot, form: dict[str, str]) -> list[Any]:
        """The form's answers as decisions bound to the calls shown; modified arguments checked against the tool."""
        from agentfsm.hitl.answers import Answer, decisions_from_answers

        assert self.agent is not None
        calls = waiting_calls(snapshot)
        answers = {}
        for call_id in calls:
            action = form.get(f"action:{call_id}")
            if not action:
                raise ValueError(f"No decision for {call_id}: choose approve, reject or modify for every call.")
            feedback, arguments = form.get(f"feedback:{call_id}") or None, form.get(f"params:{call_id}")
            answers[call_id] = Answer(action, feedback, arguments if action == "modify" else None)
        return decisions_from_answers(calls, answers, self.agent.known_tools())


def form_refusal(request: Request) -> Response | None:
    """Why a posted form is not read (not the page's form encoding, no length, too long), or None."""
    if request.headers.get("content-type", "").partition(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        return error_page(415, "Decisions are sent as the page's form (application/x-www-form-urlencoded).")
    length = request.headers.get("content-length", "")
    if not (length.isascii() and length.isdigit()):
        return error_page(411, "A decision form must say its length (Content-Length).")
    if len(length) > 9 or int(length) > MAX_FORM_BYTES:
        return error_page(413, f"A decision form is at most {MAX_FORM_BYTES // 1024} KiB; nothing was read.")
    return None


def waiting_calls(snapshot: AgentSnapshot) -> dict[str, Any]:
    """The pending calls of a paused run that a decision may be given for, by key (``decidable_calls``).

    Those a confirmation waits for, and those in doubt after a crash (approve runs one again, reject
    gives its feedback as its result); none when a breakpoint paused the run.
    """
    if not snapshot.awaited_decisions():
        return {}
    calls = snapshot.pending_calls_by_key()
    return {key: calls[key] for key in decidable_calls(snapshot) if key in calls}


def message_html(message: ChatMessage) -> str:
    """One message, escaped; tool calls and results folded."""
    role = message.role.value
    parts = [h(text) for text in message.texts]
    for call in message.tool_calls:
        arguments = h(orjson.dumps(call.arguments).decode())
        parts.append(f"<details><summary>calls {h(call.tool_name)} ({h(call.id or '')})</summary>{arguments}</details>")
    for result in message.tool_call_results:
        label = "error from" if result.error else "result of"
        parts.append(
            f"<details><summary>{label} {h(result.origin.tool_name)} ({h(result.origin.id or '')})</summary>"
            f"{h(result.result)}</details>"
        )
    return f"<div class='message {h(role)}'><strong>{h(role)}</strong> {''.join(parts)}</div>"


def trace_html(snapshot: AgentSnapshot) -> str:
    """The transitions so far, as a timeline table."""
    rows = "".join(
        f"<tr><td>{r['step']}</td><td>{h(r['source'])}</td><td>&rarr;</td><td>{h(r['dest'])}</td>"
        f"<td>{h(r['trigger'])}</td><td>{r['duration_us']:.0f} µs</td></tr>"
        for r in snapshot.trace
    )
    return f"<h2>Transitions</h2><table><tr><th>step</th><th>from</th><th></th><th>to</th><th>trigger</th><th>time in phase</th></tr>{rows}</table>"


def session_of(request: Request) -> str | None:
    """The session id the browser's cookie carries, or None when it has none (or one this page never makes)."""
    session = request.cookies.get(SESSION_COOKIE, "")
    return session if re.fullmatch(r"[A-Za-z0-9_-]{43}", session) else None


def create_app(
    store: Runs,
    agent: Agent | None = None,
    *,
    token: str | None = None,
    resume: Resume | None = None,
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    """The review page for ``store``'s runs; ``token`` guards every request.

    ``agent`` draws the runs and checks modified arguments; decisions taken on the page continue a
    run through ``resume`` (by default: ``agent.run`` in this process, in ``store``). For durable
    runs: ``create_app(DurableRuns(db, durable), durable.agent, resume=DurableRuns(...).decide)``.

    The page answers requests for ``localhost``, ``127.0.0.1`` and ``[::1]`` (any port) and for
    the names in ``allowed_hosts``: the name it is served under elsewhere, or a proxy's. Forms
    posted from a page served under one of those names are accepted too, whatever its port.
    ``ConfigurationError`` for an entry that is not a host name.
    """
    hosts = allowed_host_names(allowed_hosts)  # refused now, not at the first request
    review = ReviewApp(store, agent, token, resume)

    def guarded(handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            if not review.allowed(request):
                return error_page(401, "This page needs its access token: open it with ?token=...")
            session = session_of(request)
            request.state.session = session or secrets.token_urlsafe(32)
            response: Response = await handler(request)
            # Both cookies are Secure under https: a browser then never sends them over plain http.
            secure = request.url.scheme == "https"
            if review.token is not None and request.query_params.get("token"):
                response.set_cookie(TOKEN_COOKIE, review.token, httponly=True, samesite="strict", secure=secure)
            if session is None and request.method == "GET":  # the first page: the session starts
                response.set_cookie(
                    SESSION_COOKIE, request.state.session, httponly=True, samesite="strict", secure=secure
                )
            return response

        return endpoint

    def served(text: str, media_type: str) -> Any:
        async def asset(request: Request) -> Response:
            return Response(text, media_type=media_type)

        return asset

    app = Starlette(
        routes=[
            Route("/", guarded(review.runs)),
            Route("/runs/{run_id}", guarded(review.run)),
            Route("/runs/{run_id}/snapshots/{seq}", guarded(review.snapshot_json)),
            Route("/runs/{run_id}/decide", guarded(review.decide), methods=["POST"]),
            Route("/runs/{run_id}/events", guarded(review.events)),
            Route("/review.css", guarded(served(STYLE, "text/css"))),
            Route("/review.js", guarded(served(CHECK_DECISIONS, "text/javascript"))),
            Route("/live.js", guarded(served(LIVE_VIEW, "text/javascript"))),
        ]
    )
    app.router.redirect_slashes = False  # a path the page never links to is not found, whatever the method
    app.add_middleware(RequestChecks, allowed_hosts=hosts)
    return app
