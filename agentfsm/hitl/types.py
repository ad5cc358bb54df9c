"""The data of human-in-the-loop confirmation: what a UI returns, and the decision taken for one call.

``ToolExecutionDecision`` and its readers (``as_decision``, ``as_decisions``) are defined in
``agentfsm.decisions``, below both the run's core and this package; they are importable from here
too, and values stored under this module's name load as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentfsm.decisions import ToolExecutionDecision, as_decision, as_decisions

__all__ = ["ConfirmationUIResult", "ToolExecutionDecision", "as_decision", "as_decisions"]


@dataclass(frozen=True)
class ConfirmationUIResult:
    """What a person answered about one tool call.

    ``action`` is "confirm", "reject", "modify" (or a custom one), with optional feedback and, to
    modify the call, ``new_tool_params``.
    """

    action: str
    feedback: str | None = None
    new_tool_params: dict[str, Any] | None = None
