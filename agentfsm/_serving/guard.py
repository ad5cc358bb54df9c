"""What a request to a served agent must be to be answered, checked before the endpoint reads it.

``EndpointChecks`` is ASGI middleware around an endpoint's app. A request is answered only:

- for an allowed host (``Host``: the loopback names, plus ``allowed_hosts``), so that a page on
  another site whose name was rebound to this machine gets nothing;
- from an allowed origin when a browser says where it comes from (``Origin``: the endpoint's own,
  or one of ``allowed_origins``, which are also answered CORS preflights); a request that says no
  origin is no browser page's (browsers send one with every POST);
- with the token (``Authorization: Bearer``) when one is set, but for the ``open_paths`` (an A2A
  agent card: what a client reads to learn how to call, and that the token is needed);
- a POST as JSON (``Content-Type: application/json``, which a page on another site cannot send
  without a preflight the endpoint refuses), stating its length, at most ``max_body_bytes``.

A refusal is a short JSON error (``{"error": ...}``) and nothing runs. Every response carries
``SECURITY_HEADERS``. ``check_listening`` refuses to serve beyond loopback without a token.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentfsm._serving.hosts import (
    LOOPBACK_HOSTS,
    allowed_host_names,
    allowed_origins_of,
    host_name,
    is_loopback,
    origin_of,
)
from agentfsm.errors import ConfigurationError

#: The largest request body read by default: a conversation of a few hundred messages.
MAX_BODY_BYTES = 1024 * 1024

#: On every response: no content sniffing, never in a frame, no caching, no referrer, and nothing a
#: browser would run (the endpoints answer with JSON and event streams, never with a page).
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
}


def refusal(status: int, message: str, **headers: str) -> Response:
    """A refused request's answer: ``{"error": message}`` with ``status``; nothing was read or run."""
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


class EndpointChecks:
    """ASGI middleware: answers only requests that pass the checks of this module, with ``SECURITY_HEADERS``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None = None,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
        max_body_bytes: int = MAX_BODY_BYTES,
        open_paths: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.token = token
        self.hosts = allowed_host_names(allowed_hosts) | set(LOOPBACK_HOSTS)
        self.origins = allowed_origins_of(allowed_origins)
        self.max_body_bytes = max_body_bytes
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request, or refuse it; either way with the security headers (and CORS for an allowed origin)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        cors = origin is not None and origin.lower() in self.origins

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    out[name] = value
                if cors and origin is not None:
                    out["Access-Control-Allow-Origin"] = origin
                    out["Vary"] = "Origin"
            await send(message)

        refused = self.refusal(scope, headers)
        if refused is None and cors and scope["method"] == "OPTIONS":
            refused = Response(
                status_code=204,
                headers={
                    "Access-Control-Allow-Methods": "GET, POST",
                    "Access-Control-Allow-Headers": "Accept, Authorization, Content-Type",
                    "Access-Control-Max-Age": "600",
                },
            )
        if refused is not None:
            await refused(scope, receive, send_secured)
            return
        await self.app(scope, self.bounded(receive), send_secured)

    def refusal(self, scope: Scope, headers: Headers) -> Response | None:
        """Why the request is not answered, or None when it may go on."""
        host = headers.get("host", "")
        if host_name(host) not in self.hosts:
            return refusal(
                400,
                f"This endpoint does not answer to the host {host[:100]!r}: call it as "
                f"{', '.join(sorted(self.hosts))} (or allow the name with allowed_hosts).",
            )
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self.origins:
            given = origin_of(origin)
            if given is None or given != host.lower():
                return refusal(
                    403,
                    f"Refused: a request from the page {origin[:100]!r} (this endpoint answers pages of its own "
                    "origin, and of those given as allowed_origins). Nothing ran.",
                )
        method = scope["method"]
        if method == "OPTIONS":
            return None if origin is not None and origin.lower() in self.origins else refusal(405, "Not allowed.")
        if self.token is not None and scope["path"] not in self.open_paths:
            given = headers.get("authorization", "")
            scheme, _, credential = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                credential.strip().encode("utf-8", "replace"), self.token.encode()
            ):
                return refusal(
                    401,
                    "This endpoint needs its token: send it as 'Authorization: Bearer <token>'. Nothing ran.",
                    **{"WWW-Authenticate": "Bearer"},
                )
        if method != "POST":
            return None
        kind = headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != "application/json":
            return refusal(415, "Requests are JSON: send them with 'Content-Type: application/json'. Nothing ran.")
        length = headers.get("content-length", "")
        if not (length.isascii() and length.isdigit()):
            return refusal(411, "A request must state its length (Content-Length). Nothing ran.")
        if len(length) > 12 or int(length) > self.max_body_bytes:
            return refusal(413, f"A request is at most {self.max_body_bytes} bytes; nothing was read or run.")
        return None

    def bounded(self, receive: Receive) -> Receive:
        """``receive``, cut off (as a client that went away) past ``max_body_bytes``: a body never grows past the limit.

        The length a request states is checked before; the server enforces it, so this only holds
        the limit should a server pass on more.
        """
        read = 0
        limit = self.max_body_bytes

        async def receive_bounded() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limit:
                    return {"type": "http.disconnect"}
            return message

        return receive_bounded


def check_listening(host: str, token: str | None, allowed_hosts: Iterable[str]) -> None:
    """Refuse to listen on ``host`` beyond loopback without a token, or on every address without the names it answers to.

    Raises:
        ConfigurationError: ``host`` is not a loopback address and no ``token`` is set, or it is
            ``0.0.0.0`` / ``::`` and no ``allowed_hosts`` are named.
    """
    if is_loopback(host):
        return
    if token is None:
        raise ConfigurationError(
            f"Serving on {host!r} lets other machines call the agent: set a token (token=..., sent by clients as "
            "'Authorization: Bearer <token>'), or serve on 127.0.0.1."
        )
    if host in ("0.0.0.0", "::", "") and not list(allowed_hosts):
        raise ConfigurationError(
            f"Serving on every address ({host!r}) answers no name but loopback: name the host names clients use "
            "(allowed_hosts=[...])."
        )
