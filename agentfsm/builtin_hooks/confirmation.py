"""ConfirmationHook: human-in-the-loop confirmation, given as a ``before_tool`` hook."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentfsm.hitl.strategy_table import strategies_from_dict, strategies_to_dict
from agentfsm.state import State


class ConfirmationHook:
    """``Agent(hooks={"before_tool": [ConfirmationHook({"refund": strategy})]})`` is ``confirmation_strategies={"refund": strategy}``.

    For those who compose an agent's behaviour through hooks: the agent takes the strategies into
    its confirmation strategies (same keys, ``"*"`` included; a key given both ways is an error),
    and the calls they cover go through the CONFIRM phase like any other. The hook itself has
    nothing left to do when it runs: the decisions are taken in CONFIRM, after the ``before_tool``
    hooks, so what is confirmed is what the hooks left.
    """

    points = frozenset({"before_tool"})

    def __init__(self, confirmation_strategies: dict[str | tuple[str, ...], Any]) -> None:
        self.confirmation_strategies = dict(confirmation_strategies)

    def run(self, state: State) -> None:
        """Nothing: CONFIRM takes the decisions."""

    def to_dict(self) -> dict[str, Any]:
        """Serialize the strategies as ``Agent.to_dict`` does."""
        return {"confirmation_strategies": strategies_to_dict(self.confirmation_strategies)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Sequence[str] | None = None) -> ConfirmationHook:
        """Deserialize through the serialization allow-list."""
        return cls(strategies_from_dict(data["confirmation_strategies"], allowed_modules))
