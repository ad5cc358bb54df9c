"""What keywords a user's callable accepts: read from its signature, once, the same way everywhere.

agentfsm gives some callables more than their protocol's arguments (a hook's ``error`` and
``hook_context``, a UI's ``tool_schema``, a tool's ``streaming_callback``) only when they name
them: a callable written to the plain signature is called with that signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def accepted_keywords(
    function: Callable[..., Any], *, without_signature: frozenset[str] = frozenset()
) -> frozenset[str] | None:
    """The names ``function`` can be called with; ``None`` when it takes any (``**kwargs``).

    A callable whose signature cannot be read (some builtins) is taken to accept ``without_signature``.
    """
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return without_signature
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters)


def names_keyword(function: Callable[..., Any], keyword: str) -> bool:
    """Whether ``function`` declares ``keyword`` by name (``**kwargs`` alone does not count)."""
    try:
        return keyword in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
