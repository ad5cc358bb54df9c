"""The run's State as the client sees it: JSON, sent whole (``STATE_SNAPSHOT``) or as a JSON Patch (``STATE_DELTA``).

The client's state is the agent's State but its conversation (``messages``, which the client
holds as messages): every other key, as plain JSON (``agentfsm.serialization``'s form, so a
dataclass or a pydantic model is its tagged data). A run's events do not carry State, so it is
sent where the run hands it out: when it pauses and when it ends, as a patch against the state
the client sent with its input (or the paused run's, on resume), else whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentfsm.serialization import serialize_value

#: The keys of a run's result that are agentfsm's, not State, unless the State schema declares them.
RESULT_KEYS = frozenset({"messages", "last_message", "exit_reason", "trace", "output"})


def client_state(result: Mapping[str, Any], declared: Iterable[str]) -> dict[str, Any]:
    """The State in a run's result, as JSON: every key but the conversation and agentfsm's own (unless declared)."""
    keep = set(declared) - {"messages"}
    return serialize_value({k: v for k, v in result.items() if k not in RESULT_KEYS or k in keep})  # type: ignore[no-any-return]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """An RFC 6902 patch that turns ``old`` into ``new`` (objects key by key, anything else replaced whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[dict[str, Any]] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            where = f"{path}/{_escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": where, "value": value})
            elif old[key] != value or type(old[key]) is not type(value):
                ops.extend(json_patch(old[key], value, where))
        return ops
    if old == new and type(old) is type(new):
        return []
    return [{"op": "replace", "path": path, "value": new}]
