"""Which confirmation strategy covers which tool, and an agent's strategies as data.

``Agent(confirmation_strategies=...)`` keys a strategy by a tool's name, a tuple of names or
``"*"``; ``resolve_strategies`` turns them into a ``StrategyTable`` (the most specific key wins),
and ``strategies_to_dict`` / ``strategies_from_dict`` carry them through ``Agent.to_dict``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentfsm.errors import ConfigurationError, ConfigurationTypeError
from agentfsm.hitl.strategies import CONFIRMATION_STRATEGY
from agentfsm.serialization import object_from_dict


class StrategyTable(dict[str, Any]):
    """The confirmation strategy of each tool, by name; ``"*"``'s covers tools first seen during a run.

    A dynamic toolset (MCP servers, a searchable catalog) can bring tools the agent did not know
    when it was built: a ``"*"`` strategy covers them too, so no call escapes a strategy the user
    gave for every tool.
    """

    def __init__(self, default: Any = None) -> None:
        super().__init__()
        self.default = default

    def __bool__(self) -> bool:
        return self.default is not None or len(self) > 0

    def __contains__(self, name: object) -> bool:
        return self.default is not None or super().__contains__(name)

    def __missing__(self, name: str) -> Any:
        if self.default is None:
            raise KeyError(name)
        return self.default

    def get(self, name: str, default: Any = None) -> Any:
        """The strategy covering ``name``, or ``default`` when none does."""
        if name in self:  # __contains__ above: ``"*"`` counts
            return self[name]
        return default


def resolve_strategies(strategies: dict[str | tuple[str, ...], Any], tools: list[str]) -> StrategyTable:
    """The strategy of each tool a key covers: its own name, then a tuple naming it, then ``"*"``."""
    for key, strategy in strategies.items():
        names = [key] if isinstance(key, str) else list(key) if isinstance(key, tuple) else None
        if names is None or not all(isinstance(n, str) for n in names):
            raise ConfigurationTypeError(
                f"confirmation_strategies keys are tool names, tuples of tool names or '*', got {key!r}."
            )
        unknown = [n for n in names if n != "*" and n not in tools]
        if unknown:
            raise ConfigurationError(
                f"confirmation_strategies names unknown tools {unknown}; the agent's tools are {sorted(tools)}."
            )
        if not callable(getattr(strategy, "run", None)):
            raise ConfigurationTypeError(f"The confirmation strategy for {key!r} has no run() method: {strategy!r}.")
    resolved = StrategyTable(default=strategies.get("*"))
    for name in tools:
        if name in strategies:
            resolved[name] = strategies[name]
        elif (
            grouped := next((s for k, s in strategies.items() if isinstance(k, tuple) and name in k), None)
        ) is not None:
            resolved[name] = grouped
        elif "*" in strategies:
            resolved[name] = strategies["*"]
    return resolved


def strategies_to_dict(strategies: dict[str | tuple[str, ...], Any]) -> list[dict[str, Any]]:
    """Confirmation strategies as data: each key (a tuple as a list) and its strategy's ``to_dict``."""
    entries = []
    for key, strategy in strategies.items():
        to_dict = getattr(strategy, "to_dict", None)
        if not callable(to_dict):
            raise ConfigurationTypeError(f"{type(strategy).__name__} has no to_dict(): give it to_dict/from_dict.")
        entries.append({"key": list(key) if isinstance(key, tuple) else key, "strategy": to_dict()})
    return entries


def strategies_from_dict(
    entries: list[dict[str, Any]], allowed_modules: Iterable[str] | None = None
) -> dict[str | tuple[str, ...], Any]:
    """Invert ``strategies_to_dict``, through the serialization allow-list."""
    return {
        tuple(entry["key"]) if isinstance(entry["key"], list) else entry["key"]: object_from_dict(
            entry["strategy"], allowed_modules, CONFIRMATION_STRATEGY, whole=True
        )
        for entry in entries
    }
