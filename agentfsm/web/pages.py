"""The HTML the review page is made of: escaping, the page around every body, error pages, a run's record.

Pages are rendered on the server, and every text from a run goes through ``h``. A page links to
its style sheet; nothing in it is an inline script or style (the security policy allows none).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import orjson
from starlette.responses import HTMLResponse

from agentfsm.machine import Phase

if TYPE_CHECKING:
    from agentfsm.messages import ChatMessage
    from agentfsm.snapshot import AgentSnapshot
    from agentfsm.stores.base import ThreadInfo, ThreadTurn
    from agentfsm.web.finding import Found, Query
    from agentfsm.web.timeline import Marker, StateChange, Step


def h(value: Any) -> str:
    """Escape any value for HTML."""
    return html.escape(str(value), quote=True)


def page(title: str, body: str, refresh: int | None = None) -> HTMLResponse:
    """A whole HTML page; ``refresh``: seconds after which the browser loads it again."""
    again = f"<meta http-equiv='refresh' content='{refresh}'>" if refresh else ""
    return HTMLResponse(
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{again}<title>{h(title)}</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta name='color-scheme' content='light dark'>"
        "<link rel='stylesheet' href='/review.css'></head>"
        f"<body><header><a href='/'>agentfsm runs</a></header><main>{body}</main></body></html>"
    )


def error_page(status: int, message: str) -> HTMLResponse:
    """A page saying what went wrong; nothing was changed."""
    response = page("error", f"<div class='error'><strong>{h(message)}</strong></div>")
    response.status_code = status
    return response


def message_html(message: ChatMessage) -> str:
    """One message, escaped; tool calls and results folded, as pretty JSON when unfolded."""
    role = message.role.value
    parts = [f"<p>{h(text)}</p>" for text in message.texts]
    for call in message.tool_calls:
        parts.append(folded(f"calls {call.tool_name} ({call.id or ''})", call.arguments))
    for result in message.tool_call_results:
        label = "error from" if result.error else "result of"
        parts.append(folded(f"{label} {result.origin.tool_name} ({result.origin.id or ''})", result.result))
    return f"<div class='message {h(role)}'><strong>{h(role)}</strong>{''.join(parts)}</div>"


# -- units people read ------------------------------------------------------------------------------


def human_duration(microseconds: float | None) -> str:
    """A duration in the unit people read it in: ``840 µs``, ``15 ms``, ``2.4 s``, ``3 min 5 s``, ``2 h 10 min``."""
    if microseconds is None:
        return ""
    us = max(0.0, microseconds)
    if us < 1_000:
        return f"{us:.0f} µs"
    if us < 10_000:
        return f"{us / 1_000:.1f} ms"
    if us < 1_000_000:
        return f"{us / 1_000:.0f} ms"
    seconds = us / 1_000_000
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def clock(at: float | None, *, date: bool = False, estimated: bool = False) -> str:
    """A ``<time>`` of an epoch time, in UTC: ``09:57:42.819`` (or with its date: ``2026-12-02 09:57:42 UTC``)."""
    if at is None:
        return "<time class='unknown'>-</time>"
    moment = datetime.fromtimestamp(at, UTC)
    shown = moment.strftime("%Y-%m-%d %H:%M:%S UTC") if date else moment.strftime("%H:%M:%S.%f")[:-3]
    note = " (estimated from the durations since the last snapshot)" if estimated else ""
    approx = "~" if estimated else ""
    return (
        f"<time datetime='{moment.isoformat()}' title='{moment.strftime('%Y-%m-%d %H:%M:%S.%f UTC')}{note}'>"
        f"{approx}{shown}</time>"
    )


def iso_clock(iso: str) -> str:
    """A stored ISO timestamp as ``clock`` shows one with its date (the text as it is when it is no timestamp)."""
    from agentfsm.web.timeline import epoch

    at = epoch(iso)
    return clock(at, date=True) if at is not None else h(iso)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON (a string as its text), escaped, in a ``<pre>``."""
    if isinstance(value, str):
        return f"<pre class='json'>{h(value)}</pre>"
    try:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        text = repr(value)
    return f"<pre class='json'>{h(text)}</pre>"


def brief_json(value: Any, limit: int = 80) -> str:
    """``value`` on one line, cut at ``limit`` characters (not escaped)."""
    try:
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def folded(label: str, value: Any, *, open_: bool = False) -> str:
    """A ``<details>`` showing ``label`` and ``value`` in brief, and ``value`` as pretty JSON when unfolded."""
    return (
        f"<details class='value'{' open' if open_ else ''}><summary>{h(label)} <code>{h(brief_json(value))}</code>"
        f"</summary>{pretty_json(value)}</details>"
    )


# -- a run's timeline -------------------------------------------------------------------------------

#: The phases a timeline can be filtered by (the style sheet hides what is not of the chosen one).
FILTERED_PHASES = [p.value for p in Phase]


def timeline_html(steps: list[Step], latest: AgentSnapshot, events_note: str = "") -> str:
    """A run's timeline: a summary of how it went, a phase filter, and each step's edges and entries."""
    edges = [e for s in steps for e in s.edges]
    first = next((e.at for e in edges if e.at is not None), None)
    last = next((e.at for e in reversed(edges) if e.at is not None), None)
    summary = [f"{len(edges)} transitions over {len([s for s in steps if s.number])} steps"]
    if first is not None:
        summary.append(f"started {clock(first, date=True)}")
    if first is not None and last is not None:
        summary.append(f"took {h(human_duration((last - first) * 1e6))}")
    ending = ""
    if edges and edges[-1].dest in ("DONE", "FAILED"):
        kind = "done" if edges[-1].dest == "DONE" else "failed"
        said = f": {latest.exit_reason}" if latest.exit_reason else ""
        ending = (
            f"<p class='ending {kind}' id='ending'>Ended in {h(edges[-1].dest)} after {h(edges[-1].source)}, "
            f"step {edges[-1].step}{h(said)}</p>"
        )
    options = "".join(f"<option value='{p}'>{p}</option>" for p in FILTERED_PHASES)
    items = "".join(_step_html(s) for s in steps)
    note = f"<p class='hint'>{h(events_note)}</p>" if events_note else ""
    return (
        f"<section id='timeline'><h2>Timeline</h2>{ending}<p class='summary'>{' · '.join(summary)}</p>{note}"
        "<p class='filter'><label for='phase-filter'>Show phase</label> <select id='phase-filter'>"
        f"<option value=''>all phases</option>{options}</select> "
        "<span class='hint'>or click a phase on the diagram</span></p>"
        f"<ol class='steps'>{items}</ol></section>"
    )


def _phases(*names: str) -> str:
    return h(" ".join(sorted({n for n in names if n})))


def _step_html(step: Step) -> str:
    took = sum(e.duration_us for e in step.edges)
    rows = "".join(
        f"<tr data-phases='{_phases(e.source, e.dest)}' class='edge{' resume' if e.source == 'PAUSED' else ''}'>"
        f"<td>{clock(e.at, estimated=e.estimated)}</td><td>{h(e.source)}</td><td>&rarr;</td><td>{h(e.dest)}</td>"
        f"<td><code>{h(e.trigger)}</code></td><td class='num'>{h(human_duration(e.duration_us))}</td></tr>"
        for e in step.edges
    )
    parts = []
    if rows:
        parts.append(
            "<table class='edges'><thead><tr><th>time (UTC)</th><th>from</th><th></th><th>to</th><th>trigger</th>"
            f"<th>time in phase</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    for model in step.models:
        facts = [f"latency {human_duration(model.latency_us)}"] if model.latency_us is not None else []
        facts += [f"{k.replace('_', ' ')} {v}" for k, v in model.usage.items()]
        facts += [f"{model.tool_calls} tool call{'s' if model.tool_calls != 1 else ''}"] if model.tool_calls else []
        head = f"Model{' ' + h(model.model) if model.model else ''}"
        body = (
            f"<p class='error'>failed: {h(model.error)}</p>"
            if model.error
            else (f"<blockquote>{h(model.reply)}</blockquote>" if model.reply else "")
        )
        parts.append(
            f"<div class='entry model' data-phases='LLM_CALL'><h4>{head} <small>{h(' · '.join(facts))}</small></h4>"
            f"{body}</div>"
        )
    for marker in step.markers:
        if marker.kind == "paused":
            parts.append(_marker_html(marker))
    for decision in step.decisions:
        extra = folded("new arguments", decision.arguments, open_=True) if decision.verb == "modified" else ""
        feedback = f"<p>feedback: <q>{h(decision.feedback)}</q></p>" if decision.feedback else ""
        parts.append(
            f"<div class='entry decision {h(decision.verb)}' data-phases='CONFIRM' data-call='{h(decision.call_id)}'>"
            f"<h4>{clock(decision.at)} <span class='verb'>{h(decision.verb)}</span> {h(decision.tool)} "
            f"<small>{h(decision.call_id)}</small></h4>{extra}{feedback}</div>"
        )
    for marker in step.markers:
        if marker.kind == "resumed":
            parts.append(_marker_html(marker))
    for run in step.tools:
        if run.finished:
            outcome = folded("error" if run.error else "result", run.result)
        else:
            outcome = "<p class='hint'>not run yet</p>"
        ran_with = folded("ran with", run.ran_with) if run.ran_with is not None else ""
        took_tool = f" <small>{h(human_duration(run.duration_us))}</small>" if run.duration_us is not None else ""
        parts.append(
            f"<div class='entry tool{' failed' if run.error else ''}' data-phases='TOOL_RUN' data-call='{h(run.call_id)}'>"
            f"<h4>{h(run.tool)} <small>{h(run.call_id)}</small>{took_tool}</h4>"
            f"{folded('arguments', run.arguments)}{ran_with}{outcome}</div>"
        )
    for marker in step.markers:
        if marker.kind not in ("paused", "resumed"):
            parts.append(_marker_html(marker))
    if step.state is not None:
        parts.append(_state_html(step.state))
    title = "Start" if step.number == 0 else f"Step {step.number}"
    return (
        f"<li class='step' id='step-{step.number}' data-phases='{_phases(*step.phases)}'>"
        f"<h3>{title} {clock(step.at)} <small>{h(human_duration(took))}</small></h3>{''.join(parts)}</li>"
    )


def _marker_html(marker: Marker) -> str:
    return (
        f"<div class='entry marker {h(marker.kind)}' data-phases='{_phases(marker.phase)}'>"
        f"<p>{clock(marker.at)} {h(marker.text)}</p></div>"
    )


def _state_html(change: StateChange) -> str:
    rows = [f"<li class='added'>+ {folded(k, v)}</li>" for k, v in change.added.items()]
    rows += [
        f"<li class='changed'>~ {h(k)}: {folded('was', old)}{folded('now', new)}</li>"
        for k, (old, new) in change.changed.items()
    ]
    rows += [f"<li class='removed'>- {h(k)}</li>" for k in change.removed]
    if change.messages:
        rows.append(f"<li class='messages'>{change.messages:+d} message{'s' if abs(change.messages) != 1 else ''}</li>")
    since = "" if change.since < 0 else f" <small>since step {change.since}</small>" if change.since else ""
    return f"<div class='entry state' data-phases=''><h4>State{since}</h4><ul>{''.join(rows)}</ul></div>"


# -- the runs list ----------------------------------------------------------------------------------


def _link(query: Query, **changed: Any) -> str:
    params = query.params(**changed)
    return h("/?" + urlencode(params)) if params else "/"


def runs_html(found: Found, query: Query) -> str:
    """The runs list: the search form, the counts per status, a page of runs, and links to the other pages."""
    from agentfsm.web.finding import SORTS, STATUSES

    def option(value: str, label: str, chosen: str) -> str:
        return f"<option value='{h(value)}'{' selected' if value == chosen else ''}>{h(label)}</option>"

    statuses = option("", "any", query.status) + "".join(option(s, s, query.status) for s in STATUSES)
    sorts = "".join(option(k, v, query.sort) for k, v in SORTS.items())
    form = (
        "<form class='find' role='search' method='get' action='/'>"
        f"<p><label for='q'>Search</label> <input type='search' id='q' name='q' value='{h(query.text)}' "
        "placeholder='run id, tool name or message text' size='36'></p>"
        f"<p><label for='status'>Status</label> <select id='status' name='status'>{statuses}</select></p>"
        f"<p><label for='since'>Changed from</label> <input type='date' id='since' name='since' value='{h(query.since)}'>"
        f" <label for='until'>to</label> <input type='date' id='until' name='until' value='{h(query.until)}'></p>"
        f"<p><label for='sort'>Sort by</label> <select id='sort' name='sort'>{sorts}</select></p>"
        "<p><button type='submit'>Find runs</button></p></form>"
    )
    total = sum(found.counts.values())
    current = " aria-current='true'"
    counts = [
        f"<a href='{_link(query, status='', page=1)}'{current if not query.status else ''}>"
        f"all <span class='count'>{total}</span></a>"
    ]
    counts += [
        f"<a href='{_link(query, status=s, page=1)}' class='{_status_class(s)}' data-status='{h(s)}'"
        f"{current if query.status == s else ''}>{h(s)} <span class='count'>{n}</span></a>"
        for s, n in found.counts.items()
    ]
    rows = "".join(
        f"<tr data-run='{h(item.info.run_id)}'><td class='title'><a href='/runs/{quote(item.info.run_id)}'>"
        f"{h(item.title or '(no user message)')}</a><br><code class='id'>{h(item.info.run_id)}</code></td>"
        f"<td class='status {_status_class(item.status)}'>{h(item.status)}</td>"
        f"<td>{h(item.info.phase.value if item.info.phase else '-')}</td><td class='num'>{item.info.step}</td>"
        f"<td>{h(', '.join(item.tools))}</td><td>{h(item.exit_reason or '')}</td>"
        f"<td>{iso_clock(item.info.updated_at)}</td></tr>"
        for item in found.runs
    )
    page_number = min(query.page, found.pages)
    pages = []
    if page_number > 1:
        pages.append(f"<a rel='prev' href='{_link(query, page=page_number - 1)}'>previous</a>")
    pages.append(f"<span>page {page_number} of {found.pages}</span>")
    if page_number < found.pages:
        pages.append(f"<a rel='next' href='{_link(query, page=page_number + 1)}'>next</a>")
    shown = f"{found.matched} run{'s' if found.matched != 1 else ''}" + (
        f" matching <q>{h(query.text)}</q>" if query.text else ""
    )
    table = (
        "<table class='runs'><thead><tr><th>run</th><th>status</th><th>phase</th><th>step</th><th>tools</th>"
        f"<th>exit reason</th><th>last change</th></tr></thead><tbody>{rows}</tbody></table>"
        if rows
        else "<p class='hint' id='no-runs'>No run matches.</p>"
    )
    return (
        f"<h1>Runs</h1>{form}<nav class='counts' aria-label='runs by status'>{' '.join(counts)}</nav>"
        f"<p class='shown' id='shown'>{shown}</p>{table}<nav class='pages' aria-label='pages'>{' '.join(pages)}</nav>"
    )


def _status_class(status: str) -> str:
    return {"waiting for approval": "waiting", "running": "running", "paused": "paused"}.get(status, h(status))


# -- threads ------------------------------------------------------------------------------------------


def threads_html(threads: list[ThreadInfo]) -> str:
    """The store's threads: turns, the head run and its status, the thread each fork came from."""
    if not threads:
        return "<h1>Threads</h1><p>No thread in this store.</p>"
    rows = []
    for t in threads:
        head = f"<a href='/runs/{quote(t.head_run_id, safe='')}'>{h(t.head_run_id)}</a>"
        point = f" #{t.head_seq}" if t.head_seq is not None else ""
        parent = (
            f"<a href='/threads/{quote(t.parent_thread_id, safe='')}'>{h(t.parent_thread_id)}</a>"
            if t.parent_thread_id
            else "-"
        )
        rows.append(
            f"<tr><td><a href='/threads/{quote(t.thread_id, safe='')}'>{h(t.thread_id)}</a></td><td>{t.turns}</td>"
            f"<td>{h(t.status or '-')}</td><td>{head}{point}</td><td>{iso_clock(t.updated_at)}</td><td>{parent}</td></tr>"
        )
    return (
        "<h1>Threads</h1><table><thead><tr><th>thread</th><th>turns</th><th>status</th><th>head run</th>"
        f"<th>updated</th><th>forked from</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def thread_html(thread_id: str, turns: list[tuple[ThreadTurn, list[ChatMessage]]]) -> str:
    """One thread turn by turn: each turn's run, its status, and the messages it added."""
    parts = [f"<h1>Thread {h(thread_id)}</h1>"]
    for turn, messages in turns:
        run = f"<a href='/runs/{quote(turn.run_id, safe='')}'>{h(turn.run_id)}</a>"
        until = f", up to snapshot {turn.until_seq}" if turn.until_seq is not None else ""
        parts.append(f"<h2>Turn {turn.number}</h2><p>run {run}, {h(turn.status or '-')}{until}</p>")
        parts += [message_html(m) for m in messages]
    return "".join(parts)
