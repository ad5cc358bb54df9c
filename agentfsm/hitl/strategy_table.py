"""StrategyTable: which confirmation strategy covers each tool of an agent, and strategies as data.

A tool's own name wins, then a tuple of names holding it, then ``"*"``. ``"*"`` is kept as the
table's default rather than copied into each known name, so that it also covers the tools a
dynamic toolset (MCP servers, a searchable catalog) shows only during a run: no call escapes a
strategy the user gave for every tool. ``strategies_to_dict`` / ``strategies_from_dict`` carry
``Agent(confirmation_strategies=...)`` through ``Agent.to_dict``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentfsm.errors import ConfigurationError, ConfigurationTypeError
from agentfsm.hitl.strategies import CONFIRMATION_STRATEGY
from agentfsm.serialization import object_from_dict

#: The key of the strategy that covers every tool no other key names.
EVERY_TOOL = "*"


class StrategyTable:
    """The confirmation strategy of each tool, asked for by name (``strategy_for``)."""

    def __init__(self, by_name: Mapping[str, Any] | None = None, default: Any = None) -> None:
        self._by_name = dict(by_name or {})
        self._default = default

    @classmethod
    def resolve(cls, strategies: Mapping[str | tuple[str, ...], Any], tools: list[str]) -> StrategyTable:
        """The table for ``Agent(confirmation_strategies=...)``, its keys checked against the agent's ``tools``."""
        by_name: dict[str, Any] = {}
        grouped: dict[str, Any] = {}
        for key, strategy in strategies.items():
            names = [key] if isinstance(key, str) else list(key) if isinstance(key, tuple) else None
            if names is None or not all(isinstance(n, str) for n in names):
                raise ConfigurationTypeError(
                    f"confirmation_strategies keys are tool names, tuples of tool names or '*', got {key!r}."
                )
            unknown = [n for n in names if n != EVERY_TOOL and n not in tools]
            if unknown:
                raise ConfigurationError(
                    f"confirmation_strategies names unknown tools {unknown}; the agent's tools are {sorted(tools)}."
                )
            if not callable(getattr(strategy, "run", None)):
                raise ConfigurationTypeError(
                    f"The confirmation strategy for {key!r} has no run() method: {strategy!r}."
                )
            if isinstance(key, str):
                if key != EVERY_TOOL:
                    by_name[key] = strategy
            else:
                for name in names:
                    grouped.setdefault(name, strategy)
        return cls({**grouped, **by_name}, strategies.get(EVERY_TOOL))

    def strategy_for(self, tool_name: str) -> Any | None:
        """The strategy covering ``tool_name`` (``"*"``'s if no other key names it), or ``None``."""
        return self._by_name.get(tool_name, self._default)

    def strategies(self) -> list[Any]:
        """Every strategy of the table once, ``"*"``'s included."""
        every = [*self._by_name.values(), *([] if self._default is None else [self._default])]
        return list({id(s): s for s in every}.values())

    def entries(self) -> list[tuple[str, Any]]:
        """``(tool name, strategy)`` for each name given a strategy of its own, by name, then ``("*", strategy)``."""
        named = sorted(self._by_name.items())
        return named if self._default is None else [*named, (EVERY_TOOL, self._default)]

    def __bool__(self) -> bool:
        return bool(self._by_name) or self._default is not None

    def __repr__(self) -> str:
        return f"StrategyTable({dict(self.entries())!r})"


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
