"""A person's answers on the calls a paused run waits for, as decisions: what the command line and the review page take."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentfsm.decisions import ToolExecutionDecision
from agentfsm.errors import DecisionError, DeserializationError
from agentfsm.hitl.strategies import decision_from
from agentfsm.serialization import load_json

if TYPE_CHECKING:
    from agentfsm.tools.tool import Tool

#: The actions a person answers with, as the UI's action each becomes.
_ACTIONS = {"approve": "confirm", "reject": "reject", "modify": "modify"}


@dataclass(frozen=True)
class Answer:
    """What a person answered on one call: ``approve``, ``reject`` or ``modify``.

    ``arguments`` holds the new arguments of ``modify``, as JSON text (a JSON object); ``feedback``
    is told to the model.
    """

    action: str
    feedback: str | None = None
    arguments: str | None = None


def decisions_from_answers(
    calls: Mapping[str, Mapping[str, Any]], answers: Mapping[str, Answer], tools: Iterable[Tool] = ()
) -> list[ToolExecutionDecision]:
    """``answers`` (by call key) as decisions bound to ``calls`` (by key, as the snapshot lists them).

    New arguments are parsed, and checked against their tool when ``tools`` has it, before any
    decision is returned: ``DecisionError`` for an answer on no call of ``calls``, an unknown action
    or new arguments that are not a JSON object, ``ToolArgumentsError`` for arguments the tool refuses.
    """
    by_name = {tool.name: tool for tool in tools}
    decisions = []
    for key, answer in answers.items():
        if key not in calls:
            raise DecisionError(f"There is no call {key!r} to decide; the calls are {sorted(calls)}.")
        name, arguments = calls[key]["tool_name"], calls[key]["arguments"]
        action = _ACTIONS.get(answer.action)
        if action is None:
            raise DecisionError(f"Unknown action {answer.action!r} for {key}: approve, reject or modify.")
        if action != "modify":
            decisions.append(decision_from(name, arguments, key, action, feedback=answer.feedback))
            continue
        try:
            params = load_json(answer.arguments or "")
        except DeserializationError as exc:
            raise DecisionError(f"The new arguments of {key} are not JSON ({exc}).") from None
        if not isinstance(params, dict):
            raise DecisionError(f"The new arguments of {key} must be a JSON object.")
        if name in by_name:
            by_name[name].validate_arguments(params)
        decisions.append(decision_from(name, arguments, key, action, feedback=answer.feedback, new_tool_params=params))
    return decisions
