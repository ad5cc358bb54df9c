"""Toolset: a named-unique collection of tools that is passed around as one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

from agentfsm.errors import ConfigurationError, ConfigurationTypeError, as_set
from agentfsm.serialization import Slot, object_from_dict, object_path
from agentfsm.tools.tool import Tool, tool_from_dict


def check_unique_names(tools: Iterable[Tool]) -> None:
    """Raise ``ConfigurationError`` (a ``ValueError``) naming any duplicated tool names."""
    seen: set[str] = set()
    duplicates: set[str] = set()
    for t in tools:  # not a Counter: this runs several times for every agent built and run
        if t.name in seen:
            duplicates.add(t.name)
        seen.add(t.name)
    if duplicates:
        # Haystack's sentence first: its users' tests match it.
        raise ConfigurationError(
            f"Duplicate tool names found: {as_set(duplicates)}. Duplicate tool names: {sorted(duplicates)}. "
            "Every tool given to an agent needs its own name."
        )


class Toolset:
    """A collection of tools: iterable, sized, indexable, ``in`` by tool or name, combinable with ``+``.

    Subclasses may build their tools in ``__init__`` or ``warm_up``. A toolset whose visible tools
    change during a run (``dynamic = True``, like ``SearchableToolset``) is asked for its tools again
    before every model call.
    """

    #: Whether the tools this toolset shows can change between the steps of a run.
    dynamic = False

    def __init__(self, tools: Iterable[Tool] | None = None) -> None:
        self.tools: list[Tool] = list(tools or [])
        check_unique_names(self.tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __getitem__(self, index: int) -> Tool:
        return self.tools[index]

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return any(t.name == item for t in self.tools)
        return item in self.tools

    def __add__(self, other: Toolset | Tool | Iterable[Tool]) -> Toolset:
        extra = [other] if isinstance(other, Tool) else list(other)
        return Toolset([*self.tools, *extra])

    def add(self, tool: Tool | Toolset) -> None:
        """Add a tool (or every tool of a toolset); a duplicate name raises ``ValueError``."""
        if not isinstance(tool, (Tool, Toolset)):
            raise ConfigurationTypeError(f"Toolset.add takes a Tool or a Toolset, got {type(tool).__name__}.")
        new = list(tool) if isinstance(tool, Toolset) else [tool]
        check_unique_names([*self.tools, *new])
        self.tools.extend(new)

    def warm_up(self) -> None:
        """Warm up every tool."""
        for t in self.tools:
            t.warm_up()

    def catalog_tools(self) -> list[Tool]:
        """Every tool this toolset can show (the same as its tools, unless it is dynamic)."""
        return list(self)

    def to_dict(self) -> dict[str, Any]:
        """Serialize the toolset and its tools."""
        return {"type": object_path(type(self)), "data": {"tools": [t.to_dict() for t in self.tools]}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Toolset:
        """Deserialize; see ``agentfsm.serialization`` for ``allowed_modules``."""
        return cls([tool_from_dict(t, allowed_modules) for t in data["data"]["tools"]])

    def __repr__(self) -> str:
        return f"Toolset({[t.name for t in self.tools]})"


def flatten_tools(tools: Iterable[Tool | Toolset] | Toolset | None) -> list[Tool]:
    """A flat list of tools from a list of tools/toolsets or one toolset (``TypeError`` for anything else)."""
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Iterable | None):
        raise ConfigurationTypeError(
            f"tools must be list[Union[Tool, Toolset]], Toolset, or None. Got {type(tools).__name__}: "
            "give a list of tools and toolsets, or one toolset."
        )
    flat: list[Tool] = []
    for item in tools or []:
        if isinstance(item, Toolset):
            flat.extend(item)
        elif isinstance(item, Tool):
            flat.append(item)
        else:
            raise ConfigurationTypeError(
                "Items in the tools list must be Tool or Toolset instances. "
                f"Expected a Tool or a Toolset, got {type(item).__name__}: {item!r}."
            )
    return flat


#: Where a document names a toolset, and where it names a tool or a toolset (an agent's tools).
TOOLSET = Slot("a Toolset class", base=Toolset)
TOOL_OR_TOOLSET = Slot("a Tool or Toolset class", base=(Tool, Toolset))


def toolset_from_dict(data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Toolset:
    """Deserialize any Toolset subclass."""
    return cast(Toolset, object_from_dict(data, allowed_modules, TOOLSET, whole=True))


def tool_or_toolset_from_dict(data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Tool | Toolset:
    """Deserialize a Tool or a Toolset, whichever class ``data`` names."""
    return cast(Tool | Toolset, object_from_dict(data, allowed_modules, TOOL_OR_TOOLSET, whole=True))


def tools_to_dict(tools: Sequence[Tool | Toolset] | Toolset | None) -> dict[str, Any] | list[dict[str, Any]]:
    """Serialize what an agent or a toolset is given: one toolset, or a list of tools and toolsets."""
    return tools.to_dict() if isinstance(tools, Toolset) else [t.to_dict() for t in tools or []]


def tools_from_dict(
    data: dict[str, Any] | list[dict[str, Any]] | None, allowed_modules: Iterable[str] | None = None
) -> Toolset | list[Tool | Toolset]:
    """Invert ``tools_to_dict``."""
    if isinstance(data, dict):
        return toolset_from_dict(data, allowed_modules)
    return [tool_or_toolset_from_dict(t, allowed_modules) for t in data or []]
