"""The data of human-in-the-loop confirmation: what a UI returns, and the decision taken for one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentfsm.errors import ConfigurationError


@dataclass(frozen=True)
class ConfirmationUIResult:
    """What a person answered about one tool call.

    ``action`` is "confirm", "reject", "modify" (or a custom one), with optional feedback and, to
    modify the call, ``new_tool_params``.
    """

    action: str
    feedback: str | None = None
    new_tool_params: dict[str, Any] | None = None


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
        """Deserialize from ``to_dict`` output."""
        try:
            return cls(
                tool_name=data["tool_name"],
                execute=bool(data["execute"]),
                tool_call_id=data.get("tool_call_id"),
                feedback=data.get("feedback"),
                final_tool_params=data.get("final_tool_params"),
                call_fingerprint=data.get("call_fingerprint"),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigurationError(f"Malformed tool execution decision {data!r}: {exc!r}") from None
