"""What a request must be to be answered, checked before the page reads it.

For an allowed host (``Host``: the loopback names, plus ``allowed_hosts``), so that a page on
another site whose name was rebound to this machine gets nothing; a state-changing one (a POST)
from this page's origin (``Origin``, else ``Referer``); a decision as the page's form, of a bounded
length. ``RequestChecks`` adds ``SECURITY_HEADERS`` to every response, refusals included. The
page's cookies are named here, and ``session_of`` reads the session one; the checks that need the
page's secrets (the access token, CSRF tokens) are ``ReviewApp``'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentfsm._serving.hosts import LOOPBACK_HOSTS, allowed_host_names, host_name, origin_of
from agentfsm.web.pages import error_page

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_FORM_BYTES",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "TOKEN_COOKIE",
    "RequestChecks",
    "allowed_host_names",
    "form_refusal",
    "host_name",
    "origin_of",
    "session_of",
]

#: The name of the cookie that carries the access token once a page was opened with ``?token=``.
TOKEN_COOKIE = "agentfsm_token"
#: The name of the cookie that carries the browser's session id, to which its CSRF tokens are bound.
SESSION_COOKIE = "agentfsm_session"
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


def session_of(request: Request) -> str | None:
    """The session id the browser's cookie carries, or None when it has none (or one this page never makes)."""
    session = request.cookies.get(SESSION_COOKIE, "")
    return session if re.fullmatch(r"[A-Za-z0-9_-]{43}", session) else None
