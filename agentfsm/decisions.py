"""The decision taken for one tool call: the value, how it is read, and the call it is bound to.

A ``ToolExecutionDecision`` says whether a call runs (``execute``, with ``final_tool_params``)
or not (``feedback`` says why, or gives the result of a call in doubt), names the call
(``tool_call_id``) and may carry ``call_fingerprint(tool_name, arguments)`` of the call as
proposed. ``as_decision`` / ``as_decisions`` read decisions given as values or dicts, each field
of its type. Whether a decision fits a run's calls is the core's check
(``agentfsm._core.decisions``); asking for decisions is ``agentfsm.hitl``'s. Both build on this
module, which imports neither; ``agentfsm.hitl`` re-exports ``ToolExecutionDecision`` and
``call_fingerprint``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from agentfsm.errors import DecisionError
from agentfsm.serialization import MAX_VALUE_DEPTH, brief, dump_json, nests_deeper


def call_fingerprint(tool_name: str, arguments: dict[str, Any]) -> str:
    """A short hash of a tool name and its arguments in canonical JSON: what a decision was taken for."""
    return hashlib.sha256(dump_json([tool_name, arguments], sort_keys=True)).hexdigest()[:16]


@dataclass(frozen=True)
class ToolExecutionDecision:
    """The decision taken for one tool call: run it (``execute``, with ``final_tool_params``) or not.

    ``call_fingerprint`` binds the decision to the exact call it was taken for (tool name and
    arguments as proposed): a decision whose call changed is refused before anything runs.
    """

    tool_name: str
    execute: bool
    tool_call_id: str | None = None
    feedback: str | None = None
    final_tool_params: dict[str, Any] | None = None
    call_fingerprint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Serialize to a dictionary (kept in snapshots)."""
        return {
            "tool_name": self.tool_name,
            "execute": self.execute,
            "tool_call_id": self.tool_call_id,
            "feedback": self.feedback,
            "final_tool_params": self.final_tool_params,
            "call_fingerprint": self.call_fingerprint,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolExecutionDecision:
        """Deserialize from ``to_dict`` output; ``DecisionError`` saying which field is missing or of the wrong type."""
        if not isinstance(data, dict):
            raise DecisionError(f"A tool execution decision is an object, got {type(data).__name__}.")
        for name, kinds in _FIELD_TYPES.items():
            if name not in data and type(None) not in kinds:
                raise DecisionError(f"A tool execution decision needs {name!r}; got the keys {sorted(map(str, data))}.")
        fields: dict[str, Any] = {name: data.get(name) for name in _FIELD_TYPES}
        return as_decision(cls(**fields))


#: The types a decision's fields may have (``bool`` is not an ``int`` here, nor the reverse).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "tool_name": (str,),
    "execute": (bool,),
    "tool_call_id": (str, type(None)),
    "feedback": (str, type(None)),
    "final_tool_params": (dict, type(None)),
    "call_fingerprint": (str, type(None)),
}


def as_decisions(values: Any) -> list[ToolExecutionDecision]:
    """Each of ``values`` (a list or tuple) as a decision, checked as ``as_decision`` does; else ``DecisionError``."""
    if not isinstance(values, (list, tuple)):
        raise DecisionError(
            f"decisions is a list of ToolExecutionDecision (or of their dicts), got {type(values).__name__}."
        )
    return [as_decision(value) for value in values]


def as_decision(value: Any) -> ToolExecutionDecision:
    """``value`` (a ``ToolExecutionDecision`` or its dict) as a decision whose fields have their types.

    Anything else raises ``DecisionError`` saying what is wrong: a decision given as ``{"execute":
    "false"}`` would otherwise run the call.
    """
    if isinstance(value, dict):
        return ToolExecutionDecision.from_dict(value)
    if not isinstance(value, ToolExecutionDecision):
        raise DecisionError(
            f"A decision is a ToolExecutionDecision (or its dict), got {type(value).__name__}: "
            "build it with agentfsm.hitl.ToolExecutionDecision(tool_name, execute, tool_call_id, ...)."
        )
    for name, kinds in _FIELD_TYPES.items():
        field = getattr(value, name)
        if not isinstance(field, kinds) or (isinstance(field, bool) and bool not in kinds):
            expected = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
            raise DecisionError(
                f"A decision's {name} must be {expected}, got {type(field).__name__} ({brief(field, 80)})."
            )
    params = value.final_tool_params
    if params is not None and not all(isinstance(k, str) for k in params):
        raise DecisionError("A decision's final_tool_params are keyword arguments: their keys are strings.")
    if params is not None and nests_deeper(params, MAX_VALUE_DEPTH):
        raise DecisionError(f"A decision's final_tool_params nest deeper than {MAX_VALUE_DEPTH} levels.")
    return value
