"""State: the schema-checked data an agent, its tools and its hooks share during a run.

Each schema entry is ``{"type": <type>, "handler": <callable or None>}``. ``State.set`` merges
a new value into the current one with the entry's handler: ``merge_lists`` for list types,
``replace_values`` otherwise. A ``messages`` entry of type ``list[ChatMessage]`` is always present.
"""

from __future__ import annotations

import copy
import math
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentfsm.errors import ConfigurationError, DeserializationError, SchemaError
from agentfsm.messages import ChatMessage
from agentfsm.serialization import (
    brief,
    deserialize_callable,
    deserialize_type,
    deserialize_value,
    is_of_type,
    serialize_callable,
    serialize_type,
    serialize_value,
    type_name,
)

Handler = Callable[[Any, Any], Any]


def merge_lists(current: Any, new: Any) -> list[Any]:
    """Concatenate ``current`` and ``new``; a non-list value counts as a one-item list."""
    current_list = [] if current is None else current if isinstance(current, list) else [current]
    new_list = new if isinstance(new, list) else [new]
    return current_list + new_list


def replace_values(current: Any, new: Any) -> Any:
    """Replace ``current`` with ``new``."""
    return new


def _is_list_type(tp: Any) -> bool:
    return tp is list or typing.get_origin(tp) is list


def _is_valid_type(tp: Any) -> bool:
    return isinstance(tp, type) or tp is Any or typing.get_origin(tp) is not None


def default_handler(tp: Any) -> Handler:
    """The handler used when a schema entry does not name one."""
    return merge_lists if _is_list_type(tp) else replace_values


MESSAGES_SCHEMA: dict[str, Any] = {"type": list[ChatMessage], "handler": merge_lists}

#: The State keys an agent keeps up to date itself in every run, with their schema entries. A
#: ``state_schema`` may not redefine them and ``run(**state)`` may not set them. The other names of
#: an agent's result (``last_message``, ``exit_reason``, ``trace``) are free for a ``state_schema``:
#: see ``agentfsm.result.AgentResult``.
AGENT_STATE_KEYS: dict[str, dict[str, Any]] = {
    "step_count": {"type": int, "handler": replace_values},
    "tool_call_counts": {"type": dict[str, int], "handler": replace_values},
    #: Token counts summed over the replies' ``usage`` metadata (when the model reports it).
    "token_usage": {"type": dict[str, int], "handler": replace_values},
    #: Set by an ``on_exit`` hook to keep the run going past an exit condition.
    "continue_run": {"type": bool, "handler": replace_values},
    #: Set by any hook to end the run before its next model call; the value becomes ``exit_reason``.
    "stop_run": {"type": str, "handler": replace_values},
    #: What ``UsageLimits`` counts beside the keys above (``agentfsm.limits``): cost, refused tool
    #: calls, and the wall clock's start and paused seconds. Set only in runs with usage limits or prices.
    "run_usage": {"type": dict[str, float], "handler": replace_values},
}


def validate_schema(schema: dict[str, Any]) -> None:
    """Raise ``SchemaError`` (a ``ValueError``) naming the first invalid entry of ``schema``."""
    if not isinstance(schema, dict):
        raise SchemaError(f"A state schema must be a dict of key -> {{'type': ...}}, got {type(schema).__name__}.")
    for key, definition in schema.items():
        if not isinstance(key, str):
            raise SchemaError(f"StateSchema: key {key!r} must be a string.")
        if not isinstance(definition, dict) or "type" not in definition:
            raise SchemaError(f"StateSchema: Key '{key}' is missing a 'type' entry.")
        if not _is_valid_type(definition["type"]):
            raise SchemaError(f"StateSchema: 'type' for key '{key}' must be a Python type, got {definition['type']!r}.")
        handler = definition.get("handler")
        if handler is not None and not callable(handler):
            raise SchemaError(f"StateSchema: 'handler' for key '{key}' must be callable or None, got {handler!r}.")
        unknown = set(definition) - {"type", "handler"}
        if unknown:
            raise SchemaError(
                f"StateSchema: key '{key}' has unknown entries {sorted(unknown)}; use 'type' and 'handler'."
            )
        if key == "messages" and not _is_list_type(definition["type"]):
            raise SchemaError(
                f"StateSchema: 'messages' must be of type list[ChatMessage], got {definition['type']!r}. "
                "The agent keeps the conversation under this key: leave it out of the schema, or declare it so."
            )


def complete_schema(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A checked copy of ``schema`` with the ``messages`` entry and every default handler filled in."""
    validate_schema(schema)
    complete: dict[str, dict[str, Any]] = {key: dict(definition) for key, definition in schema.items()}
    complete.setdefault("messages", dict(MESSAGES_SCHEMA))
    for definition in complete.values():
        if definition.get("handler") is None:
            definition["handler"] = default_handler(definition["type"])
    return complete


class State:
    """Schema-checked run data shared by the agent, its tools and its hooks.

    >>> s = State({"docs": {"type": list[str]}}, {"docs": ["a"]})
    >>> s.set("docs", ["b"]); s.get("docs")
    ['a', 'b']
    """

    __slots__ = ("_data", "_versions", "schema")

    def __init__(self, schema: dict[str, Any], data: dict[str, Any] | None = None) -> None:
        self._start(complete_schema(schema), data)

    @classmethod
    def from_complete_schema(cls, schema: dict[str, Any], data: dict[str, Any] | None = None) -> State:
        """A State on a schema returned by ``complete_schema``, without checking it again.

        An agent checks its schema once, not at every run.
        """
        state = cls.__new__(cls)
        state._start({key: dict(definition) for key, definition in schema.items()}, data)
        return state

    def _start(self, schema: dict[str, dict[str, Any]], data: dict[str, Any] | None) -> None:
        self.schema = schema
        self._data: dict[str, Any] = {}
        self._versions: dict[str, int] = {}
        for key, value in (data or {}).items():
            self.set(key, value)

    def get(self, key: str, default: Any = None) -> Any:
        """A copy of the value of ``key``, or ``default`` when it is not set."""
        return copy.deepcopy(self._data.get(key, default))

    def _unknown(self, key: str, value: Any) -> ConfigurationError:
        return ConfigurationError(
            f"State: Key '{key}' not found in schema. Declare it in the state_schema, e.g. "
            f"{{'{key}': {{'type': {type(value).__name__}}}}}. Known keys: {sorted(self.schema)}."
        )

    def set(self, key: str, value: Any, handler_override: Handler | None = None) -> None:
        """Merge ``value`` into ``key`` with the schema's handler (or ``handler_override``)."""
        definition = self.schema.get(key)
        if definition is None:
            raise self._unknown(key, value)
        handler: Handler = handler_override or definition["handler"]
        # replace_values gives the new value: no call needed for the default of most keys.
        self._data[key] = value if handler is replace_values else handler(self._data.get(key), value)
        self._versions[key] = self._versions.get(key, 0) + 1

    def append(self, key: str, items: list[Any]) -> None:
        """Merge ``items`` into the list at ``key``, as ``set`` does.

        Where the handler is ``merge_lists`` the list is extended in place: the same value ``set``
        would give, without copying a long conversation at every step, and the key keeps its version.
        """
        definition = self.schema.get(key)
        if definition is None:
            raise self._unknown(key, items)
        if definition["handler"] is merge_lists and type(self._data.get(key)) is list:
            self._data[key].extend(items)
        else:
            self.set(key, items)

    def version(self, key: str) -> int:
        """How often ``key`` got a new value from ``set`` (``append`` in place keeps the version).

        A list read twice at the same version differs at most by items appended to its end. Changes
        made through ``data`` directly are not counted: write through ``set``.
        """
        return self._versions.get(key, 0)

    def restore(self, values: dict[str, Any]) -> None:
        """Put back values as a snapshot stored them: the handlers already merged them, so none runs again."""
        for key, value in values.items():
            if key not in self.schema:
                raise self._unknown(key, value)
            self._data[key] = value
            self._versions[key] = self._versions.get(key, 0) + 1

    def has(self, key: str) -> bool:
        """Whether ``key`` has a value."""
        return key in self._data

    @property
    def data(self) -> dict[str, Any]:
        """All current data (the live dictionary, not a copy)."""
        return self._data

    def to_dict(self) -> dict[str, Any]:
        """Serialize schema and data to JSON-compatible values."""
        return {"schema": schema_to_dict(self.schema), "data": serialize_value(self._data)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> State:
        """Rebuild a State from ``to_dict`` output; see ``agentfsm.serialization`` for ``allowed_modules``."""
        schema = schema_from_dict(data.get("schema", {}), allowed_modules)
        state = cls(schema)
        state.restore(values_from_dict(data.get("data", {}), state.schema, allowed_modules))
        return state

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return self.schema == other.schema and self._data == other._data

    __hash__ = None  # type: ignore[assignment]  # mutable container

    def __repr__(self) -> str:
        return f"State(keys={sorted(self._data)})"


def schema_to_dict(schema: dict[str, Any]) -> dict[str, Any]:
    """Serialize a state schema: types as strings, handlers as import paths."""
    out: dict[str, Any] = {}
    for key, definition in schema.items():
        entry: dict[str, Any] = {"type": serialize_type(definition["type"])}
        if definition.get("handler") is not None:
            entry["handler"] = serialize_callable(definition["handler"])
        out[key] = entry
    return out


def schema_from_dict(data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> dict[str, Any]:
    """Invert ``schema_to_dict``."""
    schema: dict[str, Any] = {}
    for key, entry in data.items():
        definition: dict[str, Any] = {"type": deserialize_type(entry["type"], allowed_modules)}
        if entry.get("handler") is not None:
            definition["handler"] = deserialize_callable(entry["handler"], allowed_modules)
        schema[key] = definition
    return schema


def values_from_dict(
    data: Any, schema: Mapping[str, Any], allowed_modules: Iterable[str] | None = None
) -> dict[str, Any]:
    """State values from serialized data, their keys checked against ``schema`` before any value is deserialized.

    A serialized value may name a class (a dataclass, a pydantic model...): none is resolved for a
    key the schema does not declare. agentfsm's own keys must hold values of their types (see
    ``check_agent_value``). Unknown keys and values that cannot be read raise ``DeserializationError``
    naming the key.
    """
    if not isinstance(data, dict):
        raise DeserializationError(f"State values are given as an object of State keys, got {type(data).__name__}.")
    unknown = sorted(set(data) - set(schema))
    if unknown:
        raise DeserializationError(f"State keys {unknown} are not in this agent's state_schema.")
    values: dict[str, Any] = {}
    for key, value in data.items():
        try:
            values[key] = deserialize_value(value, allowed_modules)
        except DeserializationError as exc:
            raise DeserializationError(f"State value {key!r}: {exc}") from exc
        if key in AGENT_STATE_KEYS:
            check_agent_value(key, values[key])
    return values


#: The State keys agentfsm counts in: never ``None``, and every count a number >= 0.
_COUNTS = frozenset({"step_count", "tool_call_counts", "token_usage", "run_usage"})


def check_agent_value(key: str, value: Any) -> None:
    """``DeserializationError`` unless ``value``, read back for agentfsm's State key ``key``, is of its type.

    Data from outside (a snapshot, a stored run, a request) is taken as it is, never converted: a
    list where ``token_usage`` holds a dict is refused, not read as no tokens used. The counts
    (``step_count``, ``tool_call_counts``, ``token_usage``, ``run_usage``) are never ``None``, nor
    negative, nor infinite. The keys of the user's schema hold what the run put there (``State``
    does not check their types) and are read back as stored.
    """
    declared = AGENT_STATE_KEYS[key]["type"]
    counts = key in _COUNTS
    if value is None and not counts:
        return
    if not is_of_type(value, declared):
        raise DeserializationError(
            f"State value {key!r} is {brief(value, 80)} ({type(value).__name__}), which is not of its type "
            f"{type_name(declared)}."
        )
    if counts and not all(_non_negative(n) for n in (value.values() if isinstance(value, dict) else [value])):
        raise DeserializationError(
            f"State value {key!r} holds a count that is negative or not finite: {brief(value, 80)}."
        )


def _non_negative(number: Any) -> bool:
    return isinstance(number, (int, float)) and math.isfinite(number) and number >= 0
