"""The review page: a store's runs, where each stands on the agent's diagram, and decisions from a browser.

``create_app(store, agent)`` is an ASGI application (Starlette); ``agentfsm serve`` runs it with
uvicorn. Pages are rendered on the server (no front-end build) and every text from a run is
escaped. A run waiting in CONFIRM shows its pending calls with approve / reject / modify forms;
submitting resumes the run through ``agent.run(snapshot=..., decisions=...)``, the same API as
the command line, in a thread of its own: the page answers once the decisions are taken, and the
run goes on (durable runs: the decision goes to the run's queue, for a worker).

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

The runs list titles each run by its first user message and finds runs by id, tool name and
message text, by status and date, with counts per status, sorted and paged (``finding``). A run's
page shows its timeline (``timeline``): each edge with its clock time and duration, and per step
the model call, the tool calls, hooks, pauses, resumes and decisions, and what changed in State.

The modules: ``app`` (``create_app`` and its routes), ``checks`` (the request checks and the
security headers), ``review`` (the handlers), ``finding`` (the runs list's query), ``timeline``
(a run's timeline, as data), ``live`` (the event stream), ``pages`` (the HTML), ``assets``
(serving the script and style files kept in ``static/``).
"""

from agentfsm.web import _requires  # noqa: F401 (first: a missing extra is one line naming it)
from agentfsm.web.app import create_app
from agentfsm.web.checks import (
    LOOPBACK_HOSTS,
    MAX_FORM_BYTES,
    SECURITY_HEADERS,
    SESSION_COOKIE,
    TOKEN_COOKIE,
    RequestChecks,
    allowed_host_names,
)
from agentfsm.web.review import Resume, ReviewApp, Runs, resume_here

# In plain sorted order, as tests/test_exported_members.py checks every package's (ruff's is isort-style).
__all__ = [  # noqa: RUF022
    "LOOPBACK_HOSTS",
    "MAX_FORM_BYTES",
    "RequestChecks",
    "Resume",
    "ReviewApp",
    "Runs",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "TOKEN_COOKIE",
    "allowed_host_names",
    "create_app",
    "resume_here",
]
