"""The HTML the review page is made of: escaping, the page around every body, error pages, a run's record.

Pages are rendered on the server, and every text from a run goes through ``h``. A page links to
its style sheet; nothing in it is an inline script or style (the security policy allows none).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import HTMLResponse

if TYPE_CHECKING:
    from agentfsm.messages import ChatMessage
    from agentfsm.snapshot import AgentSnapshot


def h(value: Any) -> str:
    """Escape any value for HTML."""
    return html.escape(str(value), quote=True)


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
