"""Breakpoints: where a run pauses, before which phase's work, so that a snapshot of it can be taken."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentfsm._core.phases import ACTIVE_PHASES, Phase
from agentfsm.errors import ConfigurationError


@dataclass(frozen=True)
class Breakpoint:
    """Pause before a phase's work.

    The documented form names a component: ``Breakpoint("chat_generator", visit_count=2)`` pauses
    before the third model call. agentfsm also accepts any active phase and step:
    ``Breakpoint(phase=Phase.TOOL_RUN, step=2)`` pauses before the tools of the second reply run
    (``step`` counts completed model calls; ``None`` matches every step).
    """

    component_name: Literal["chat_generator", "tool_invoker"] | None = None
    visit_count: int = 0
    snapshot_file_path: str | None = None
    phase: Phase | None = None
    step: int | None = None

    def __post_init__(self) -> None:
        if self.component_name is None and self.phase is None:
            raise ConfigurationError("A Breakpoint needs component_name ('chat_generator' or 'tool_invoker') or phase.")
        if self.component_name is not None and self.phase is not None:
            raise ConfigurationError("Give a Breakpoint either component_name or phase, not both.")
        if self.component_name not in (None, "chat_generator", "tool_invoker"):
            raise ConfigurationError(
                f"Unknown component_name {self.component_name!r}; an agent has 'chat_generator' and 'tool_invoker'."
            )
        if self.phase is not None and Phase(self.phase) not in ACTIVE_PHASES:
            active = ", ".join(p.value for p in ACTIVE_PHASES)
            raise ConfigurationError(f"A run can only pause before an active phase ({active}), not {self.phase}.")
        if not isinstance(self.visit_count, int) or self.visit_count < 0:
            raise ConfigurationError(f"visit_count must be an int >= 0, got {self.visit_count!r}.")

    @property
    def target_phase(self) -> Phase:
        """The phase this breakpoint pauses before."""
        if self.phase is not None:
            return Phase(self.phase)
        return Phase.LLM_CALL if self.component_name == "chat_generator" else Phase.TOOL_RUN

    def matches(self, phase: Phase, step: int, visits: int, pending_tools: list[str]) -> bool:
        """Whether entering ``phase`` (its ``visits``-th time, at ``step``) should pause."""
        if phase is not self.target_phase:
            return False
        if self.phase is not None:
            return self.step is None or self.step == step
        return visits == self.visit_count

    def to_dict(self) -> dict[str, Any]:
        """Serialize (stored in snapshots as the reason the run paused)."""
        data: dict[str, Any] = {"type": type(self).__name__, "visit_count": self.visit_count}
        if self.component_name is not None:
            data["component_name"] = self.component_name
        if self.phase is not None:
            data["phase"] = Phase(self.phase).value
            data["step"] = self.step
        if self.snapshot_file_path is not None:
            data["snapshot_file_path"] = self.snapshot_file_path
        return data


@dataclass(frozen=True)
class ToolBreakpoint(Breakpoint):
    """Pause before the tool invoker runs; with ``tool_name``, only when that tool is called."""

    component_name: Literal["chat_generator", "tool_invoker"] | None = "tool_invoker"
    tool_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.target_phase is not Phase.TOOL_RUN:
            raise ConfigurationError(
                "If the break_point is a ToolBreakpoint, it must have the component_name 'tool_invoker'. "
                "A ToolBreakpoint pauses before TOOL_RUN: use component_name='tool_invoker'."
            )

    def matches(self, phase: Phase, step: int, visits: int, pending_tools: list[str]) -> bool:
        """Like ``Breakpoint.matches``, and the tool (if named) is among the pending calls."""
        if not super().matches(phase, step, visits, pending_tools):
            return False
        return self.tool_name is None or self.tool_name in pending_tools

    def to_dict(self) -> dict[str, Any]:
        """Serialize, with the tool name."""
        return {**super().to_dict(), "tool_name": self.tool_name}


@dataclass(frozen=True)
class AgentBreakpoint:
    """A breakpoint addressed to a named agent (the documented form for ``Agent.run``)."""

    agent_name: str
    break_point: Breakpoint

    def __post_init__(self) -> None:
        bp = self.break_point
        if isinstance(bp, ToolBreakpoint):
            if bp.component_name != "tool_invoker":
                raise ConfigurationError(
                    "If the break_point is a ToolBreakpoint, it must have the component_name 'tool_invoker'."
                )
        elif isinstance(bp, Breakpoint):
            if bp.component_name not in ("chat_generator", None):
                raise ConfigurationError(
                    "If the break_point is a Breakpoint, it must have the component_name 'chat_generator'."
                )
        else:
            raise ConfigurationError(f"break_point must be a Breakpoint or ToolBreakpoint, got {type(bp).__name__}.")


def breakpoint_from_dict(data: Mapping[str, Any]) -> Breakpoint:
    """Invert ``Breakpoint.to_dict`` (a ``ToolBreakpoint``'s too)."""
    kwargs: dict[str, Any] = {k: data[k] for k in ("component_name", "visit_count", "snapshot_file_path") if k in data}
    if "phase" in data:
        kwargs.update(phase=Phase(data["phase"]), step=data.get("step"))
    if data.get("type") == ToolBreakpoint.__name__:
        return ToolBreakpoint(**kwargs, tool_name=data.get("tool_name"))
    return Breakpoint(**kwargs)
