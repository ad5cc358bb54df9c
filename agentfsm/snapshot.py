"""Snapshots and breakpoints: pause a run at any transition and resume it later, anywhere.

A snapshot is taken at a transition boundary, after the previous phase's work and before the
next phase's work. It holds data only (no pickles, no code): the phase to enter on resume, the
step, the conversation, the other State values, the pending tool calls, the tool results already
completed in TOOL_RUN, the breakpoint that stopped the run, and a fingerprint of the agent.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NotRequired

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from typing_extensions import TypedDict

from agentfsm.errors import BreakpointException, ConfigurationError, DeserializationError, SnapshotError
from agentfsm.machine import ACTIVE_PHASES, Phase
from agentfsm.messages import ChatMessage

#: The snapshot format written by this version. Older versions are migrated on load (none yet);
#: newer ones are refused with a message saying which agentfsm can read them.
SNAPSHOT_FORMAT_VERSION = 1


# -- breakpoints ------------------------------------------------------------------------------------


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
            raise ConfigurationError("A ToolBreakpoint pauses before TOOL_RUN: use component_name='tool_invoker'.")

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


# -- the snapshot -----------------------------------------------------------------------------------

_STRICT = ConfigDict(extra="forbid")


class ToolCallData(TypedDict):
    """A pending tool call, as stored."""

    __pydantic_config__ = _STRICT  # type: ignore[misc]
    tool_name: str
    arguments: dict[str, Any]
    id: NotRequired[str | None]
    extra: NotRequired[dict[str, Any] | None]


class TraceData(TypedDict):
    """One transition of the run so far, as stored."""

    __pydantic_config__ = _STRICT  # type: ignore[misc]
    step: int
    source: Phase
    dest: Phase
    trigger: str
    duration_us: float


class OutcomeData(TypedDict, total=False):
    """A tool call that finished before the pause: its value, or the error it raised."""

    __pydantic_config__ = _STRICT  # type: ignore[misc]
    value: Any
    error_type: str
    error: str


class AgentSnapshot(BaseModel):
    """Everything needed to continue a run, as validated, JSON-compatible data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = SNAPSHOT_FORMAT_VERSION
    run_id: str = Field(min_length=1)
    phase: Phase
    step: int = Field(ge=0)
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    pending_tool_calls: list[ToolCallData] = []
    decisions: list[dict[str, Any]] = []
    completed_tool_results: dict[str, OutcomeData] = {}
    exit_reason: str | None = None
    trace: list[TraceData] = []
    break_point: dict[str, Any] | None = None
    agent_fingerprint: str
    created_at: str

    @field_validator("format_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version > SNAPSHOT_FORMAT_VERSION:
            raise ValueError(
                f"snapshot format {version} is newer than this agentfsm reads (up to {SNAPSHOT_FORMAT_VERSION}); "
                "upgrade agentfsm to resume it"
            )
        if version < 1:
            raise ValueError(f"snapshot format {version} does not exist")
        return version

    @field_validator("phase")
    @classmethod
    def _resumable_phase(cls, phase: Phase) -> Phase:
        if phase not in ACTIVE_PHASES:
            raise ValueError(f"a run resumes into an active phase, not {phase.value}")
        return phase

    @field_validator("messages")
    @classmethod
    def _valid_messages(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, message in enumerate(messages):
            try:
                ChatMessage.from_dict(message)
            except DeserializationError as exc:
                raise ValueError(f"message {index}: {exc}") from None
        return messages

    @field_validator("completed_tool_results")
    @classmethod
    def _valid_outcomes(cls, outcomes: dict[str, OutcomeData]) -> dict[str, OutcomeData]:
        for key, outcome in outcomes.items():
            if ("value" in outcome) == ("error_type" in outcome) or ("error_type" in outcome) != ("error" in outcome):
                raise ValueError(f"completed tool result {key!r} needs either 'value' or 'error_type' and 'error'")
        return outcomes

    @field_validator("created_at")
    @classmethod
    def _iso_timestamp(cls, value: str) -> str:
        datetime.fromisoformat(value)
        return value

    # -- encoding ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible data."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Any) -> AgentSnapshot:
        """Validate ``data``; any problem raises ``SnapshotError`` saying what is wrong."""
        if not isinstance(data, dict):
            raise SnapshotError(f"A snapshot is a JSON object, got {type(data).__name__}.")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors())
            raise SnapshotError(f"Invalid agent snapshot: {problems}") from None

    def to_bytes(self) -> bytes:
        """Compact JSON bytes (pydantic-core's serializer: twice as fast as ``to_dict`` then orjson)."""
        return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> AgentSnapshot:
        """Decode and validate bytes made by ``to_bytes`` or ``to_file``."""
        try:
            decoded = orjson.loads(data)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise SnapshotError(f"Not a snapshot: the data is not valid JSON ({exc}); was it truncated?") from None
        return cls.from_dict(decoded)

    def to_file(self, path: str | os.PathLike[str]) -> Path:
        """Write indented, readable JSON atomically (a crash never leaves a half-written file)."""
        target = Path(path)
        atomic_write(target, orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2))
        return target

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> AgentSnapshot:
        """Read and validate a snapshot file."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SnapshotError(f"Cannot read snapshot file {os.fspath(path)!r}: {exc.strerror}.") from None
        return cls.from_bytes(data)

    def fork(self, run_id: str | None = None) -> AgentSnapshot:
        """The same point of the run under a new run id: resuming it starts a branch, the original stays."""
        return self.model_copy(update={"run_id": run_id or uuid.uuid4().hex, "created_at": now_iso()})

    def file_name(self) -> str:
        """A descriptive file name: ``<run id>_<step>_<phase>.json``."""
        return f"{self.run_id}_{self.step:04d}_{self.phase.value}.json"


def atomic_write(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary file and an atomic rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fingerprint(shape: Any) -> str:
    """A short, stable hash of an agent's configuration shape."""
    return hashlib.sha256(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS, default=repr)).hexdigest()[:16]


def now_iso() -> str:
    """The current UTC time in ISO 8601."""
    return datetime.now(UTC).isoformat()


def iso_from_timestamp(timestamp: float) -> str:
    """A ``time.time()`` value in the format of ``now_iso``."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def pause_exception(snapshot: AgentSnapshot) -> BreakpointException:
    """The ``BreakpointException`` for a paused run; writes the snapshot file if the breakpoint asks."""
    directory = (snapshot.break_point or {}).get("snapshot_file_path")
    path = str(snapshot.to_file(Path(directory) / snapshot.file_name())) if directory else None
    where = f" (saved to {path})" if path else ""
    return BreakpointException(
        f"Breakpoint: run {snapshot.run_id} paused before {snapshot.phase.value} at step {snapshot.step}{where}. "
        "Resume it with agent.run(snapshot=exc.snapshot).",
        snapshot,
        path,
    )
