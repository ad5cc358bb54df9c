"""Confirmation policies: whether to ask a person before a tool call runs."""

from __future__ import annotations

from typing import Any

from agentfsm.decisions import ToolExecutionDecision, call_fingerprint
from agentfsm.hitl.types import ConfirmationUIResult
from agentfsm.serialization import object_path


class ConfirmationPolicy:
    """Base class of confirmation policies: ``should_ask`` decides; ``update_after_confirmation`` learns."""

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """Whether to ask for confirmation before the call runs."""
        raise NotImplementedError(f"{type(self).__name__} must implement should_ask().")

    def update_after_confirmation(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        confirmation_result: ConfirmationUIResult,
    ) -> None:
        """Learn from the person's answer (nothing by default)."""

    def restore(self, decisions: list[ToolExecutionDecision]) -> None:
        """Learn again from the decisions of a resumed run (a snapshot keeps them; nothing by default)."""

    def to_dict(self) -> dict[str, Any]:
        """Serialize the policy."""
        return {"type": object_path(type(self)), "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationPolicy:
        """Deserialize the policy."""
        return cls(**data.get("init_parameters", {}))


class AlwaysAskPolicy(ConfirmationPolicy):
    """Always ask for confirmation."""

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """Always True."""
        return True


class NeverAskPolicy(ConfirmationPolicy):
    """Never ask: every call runs as proposed."""

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """Always False."""
        return False


class AskOncePolicy(ConfirmationPolicy):
    """Ask once per tool and parameters: a call confirmed as proposed is not asked about again.

    The memory is this policy's, and a resumed run's snapshot gives it back (``restore``), so a
    run remembers what was confirmed before it paused, in whatever process it resumes.
    """

    def __init__(self) -> None:
        self._confirmed: set[str] = set()

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """True unless this tool was confirmed with these parameters before."""
        return call_fingerprint(tool_name, tool_params) not in self._confirmed

    def update_after_confirmation(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        confirmation_result: ConfirmationUIResult,
    ) -> None:
        """Remember the tool and parameters if the action was "confirm"."""
        if confirmation_result.action == "confirm":
            self._confirmed.add(call_fingerprint(tool_name, tool_params))

    def restore(self, decisions: list[ToolExecutionDecision]) -> None:
        """Remember the calls that decisions confirmed as proposed."""
        for d in decisions:
            if d.execute and d.call_fingerprint is not None:
                proposed = d.final_tool_params is None or call_fingerprint(d.tool_name, d.final_tool_params)
                if proposed is True or proposed == d.call_fingerprint:
                    self._confirmed.add(d.call_fingerprint)
