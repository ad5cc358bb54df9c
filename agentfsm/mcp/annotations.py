"""What an MCP tool's annotations mean here: idempotent for the journal, destructive for confirmation.

MCP tools describe themselves with hints (``readOnlyHint``, ``destructiveHint``,
``idempotentHint``). A read-only or idempotent tool is idempotent for agentfsm's journal: a call
interrupted by a crash runs again on resume instead of waiting for a decision. A destructive tool
(the MCP default for a tool that is not read-only) is one ``AskDestructiveMCPToolsPolicy`` asks a
person about. Hints come from the server: pass ``trust_annotations=False`` to ignore them, and
``idempotent_overrides={...}`` / ``destructive_overrides={...}`` (an ``MCPTool``: ``idempotent=`` /
``destructive=``) to say per tool what holds.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentfsm.errors import ConfigurationTypeError
from agentfsm.hitl.policies import ConfirmationPolicy

if TYPE_CHECKING:
    import mcp.types as mcp_types

    from agentfsm.mcp.tool import MCPTool


@dataclass(frozen=True, slots=True)
class ToolHints:
    """What agentfsm takes from one tool's annotations, after the user's overrides."""

    #: A call may run again after a crash (read-only or idempotent).
    idempotent: bool
    #: A call may destroy or overwrite something (ask before it runs, with ``AskDestructiveMCPToolsPolicy``).
    destructive: bool


def check_overrides(name: str, overrides: Mapping[str, bool] | None) -> dict[str, bool]:
    """A copy of a per-tool override mapping, checked: tool names to booleans."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping) or not all(
        isinstance(k, str) and isinstance(v, bool) for k, v in overrides.items()
    ):
        raise ConfigurationTypeError(f"{name} must map tool names to True or False, got {overrides!r}.")
    return dict(overrides)


def tool_hints(
    tool: mcp_types.Tool,
    *,
    trust_annotations: bool,
    idempotent: bool | None,
    destructive: bool | None,
) -> ToolHints:
    """The hints of ``tool``: the user's override (``None``: none), else its annotations (MCP's defaults), else safe values."""
    notes = tool.annotations if trust_annotations else None
    read_only = bool(notes and notes.read_only_hint)
    from_notes_idempotent = read_only or bool(notes and notes.idempotent_hint)
    # MCP: destructiveHint defaults to true, and means nothing for a read-only tool.
    from_notes_destructive = not read_only and (notes is None or notes.destructive_hint is not False)
    return ToolHints(
        idempotent=from_notes_idempotent if idempotent is None else idempotent,
        destructive=from_notes_destructive if destructive is None else destructive,
    )


# The MCP tools alive in this process, by name: the policy below is configured by the tools
# themselves, so that it serializes as nothing and works again after a resume in another process.
_live: dict[str, weakref.WeakValueDictionary[int, MCPTool]] = {}
_live_lock = threading.Lock()


def register_tool(tool: MCPTool) -> None:
    """Make ``tool`` known to ``AskDestructiveMCPToolsPolicy`` (done when its description is fetched)."""
    with _live_lock:
        _live.setdefault(tool.name, weakref.WeakValueDictionary())[id(tool)] = tool


class AskDestructiveMCPToolsPolicy(ConfirmationPolicy):
    """Ask before a call to a destructive MCP tool runs; other calls run as proposed.

    The policy looks the name up among the MCP tools alive in this process, whatever the state of
    their sessions (so it needs no configuration, serializes as nothing and works again in the
    process a run resumes in). The match is by name, process-wide: a name offered by several
    tools (of any agent) is asked about if any of them is destructive, and a tool whose
    description was not fetched yet counts as destructive.
    Use it with any strategy, for all tools: ``{"*": BlockingConfirmationStrategy(
    AskDestructiveMCPToolsPolicy(), ui)}``.
    """

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        """True when an MCP tool of that name alive in this process is destructive."""
        with _live_lock:
            tools = list(_live[tool_name].values()) if tool_name in _live else []
        return any(t.destructive for t in tools)
