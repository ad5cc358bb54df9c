"""The optional dependencies: which extra brings each module, and one way to say that one is missing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from agentfsm.errors import MissingExtraError

#: The modules agentfsm imports from each extra of ``pyproject.toml`` (top-level names). A module
#: several extras bring (anyio, with starlette and with mcp) is listed under each.
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "dbos": frozenset({"dbos", "psycopg", "sqlalchemy"}),
    "web": frozenset({"starlette", "uvicorn", "multipart", "python_multipart", "anyio"}),
    "mcp": frozenset({"mcp", "mcp_types", "httpx2", "anyio"}),
    "ag-ui": frozenset({"ag_ui", "starlette", "uvicorn", "anyio"}),
    "a2a": frozenset({"a2a", "starlette", "sse_starlette", "uvicorn", "anyio", "google", "culsans", "jsonrpc"}),
    "otel": frozenset({"opentelemetry"}),
    "testing": frozenset({"hypothesis"}),
    "rich": frozenset({"rich"}),
    "search": frozenset({"bm25s"}),
}


@contextlib.contextmanager
def extra_needed(feature: str, extra: str) -> Iterator[None]:
    """Imports in the block that fail for a module of ``extra`` raise ``MissingExtraError`` naming ``feature``.

    Any other import error goes through as it is: a module no extra brings is a broken install.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in EXTRA_MODULES[extra]:
            raise
        raise MissingExtraError(feature, extra, str(exc), name=exc.name) from exc
