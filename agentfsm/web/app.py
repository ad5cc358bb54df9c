"""``create_app``: the review page as an ASGI application, its routes behind the request checks."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentfsm.web.assets import Endpoint, static_files
from agentfsm.web.checks import SESSION_COOKIE, TOKEN_COOKIE, RequestChecks, allowed_host_names, session_of
from agentfsm.web.pages import error_page
from agentfsm.web.review import Resume, ReviewApp, Runs

if TYPE_CHECKING:
    from agentfsm.agent import Agent


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

    def guarded(handler: Endpoint) -> Endpoint:
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

    app = Starlette(
        routes=[
            Route("/", guarded(review.runs)),
            Route("/runs/{run_id}", guarded(review.run)),
            Route("/runs/{run_id}/snapshots/{seq}", guarded(review.snapshot_json)),
            Route("/runs/{run_id}/decide", guarded(review.decide), methods=["POST"]),
            Route("/runs/{run_id}/events", guarded(review.events)),
            Route("/threads", guarded(review.threads)),
            Route("/threads/{thread_id}", guarded(review.thread)),
            *(Route(path, guarded(endpoint)) for path, endpoint in static_files().items()),
        ]
    )
    app.router.redirect_slashes = False  # a path the page never links to is not found, whatever the method
    app.add_middleware(RequestChecks, allowed_hosts=hosts)
    return app
