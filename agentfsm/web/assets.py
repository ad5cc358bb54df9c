"""The page's own files: its scripts and style sheet, kept in ``static/`` beside this module.

Each is served at ``/`` and its name (``/review.css``, ``/review.js``, ``/live.js``), behind the
same checks as the pages. Being files, not markup in the pages, they let the security policy allow
no inline script or style. They are read through ``importlib.resources``, by their place in the
package, so an installed wheel finds them as a checkout does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response

#: The files in ``static/``, each with the media type it is served as.
STATIC_FILES = {"review.css": "text/css", "review.js": "text/javascript", "live.js": "text/javascript"}

#: What answers a request for one of the files.
Endpoint = Callable[[Request], Awaitable[Response]]


def static_files() -> dict[str, Endpoint]:
    """Each of the page's files by the path it is served at, read from the package once."""
    static = files("agentfsm.web") / "static"
    return {f"/{name}": _serving((static / name).read_bytes(), media_type) for name, media_type in STATIC_FILES.items()}


def _serving(content: bytes, media_type: str) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        return Response(content, media_type=media_type)

    return endpoint
