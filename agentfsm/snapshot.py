"""The snapshot: a run as validated data, to resume it later, anywhere.

A snapshot is taken at a transition boundary, after the previous phase's work and before the
next phase's work (or, in TOOL_RUN, as each tool call finishes). It holds data only (no pickles,
no code): the phase to enter on resume and how far its work got (``stage``), the step, the
conversation, the other State values, the pending tool calls, the tool results already completed
in TOOL_RUN, the breakpoint that stopped the run, and a fingerprint of the agent.

A finished run's record is a snapshot too, in DONE or FAILED: its trace ends with the edge into
that phase, its ``exit_reason`` says how the run ended (a failed run's: its error), and its
``stage`` how far the phase that edge left had got. It resumes nowhere: where the run stood before
its last edge (``reopened``) is what a fork of it starts from, and what resuming a failed run retries.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NotRequired

import orjson
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator
from pydantic_core import PydanticSerializationError
from typing_extensions import TypedDict

from agentfsm._core.phases import ACTIVE_PHASES, PHASE_WORK, TERMINAL_PHASES, Phase
from agentfsm.decisions import ToolExecutionDecision
from agentfsm.errors import DecisionError, DeserializationError, SnapshotError
from agentfsm.files import atomic_write, read_file
from agentfsm.messages import ChatMessage
from agentfsm.pauses import AwaitingDecision, AwaitingInput, InputQuestion, OutcomeUnknown, PauseReason, pause_reason
from agentfsm.serialization import dump_json, load_json, nests_deeper
from agentfsm.tools.invoker import key_of

#: The snapshot format written by this version. Older versions are migrated on load; newer ones
#: are refused with a message saying to upgrade. Version 2 added ``stage`` (0 in version 1 files),
#: version 3 ``seq`` (``None`` in older files), version 4 ``trace_context`` (``None`` in older files),
#: version 5 the input guardrails' work item, second in LLM_CALL (an older stage past it moves one on),
#: and the tool retries' ``tool_call_attempts`` and ``retrying_tool_calls`` (empty in older files).
SNAPSHOT_FORMAT_VERSION = 5
#: The work items a version inserted into a phase's work (``PHASE_WORK``), and where: an older
#: snapshot's ``stage`` at or past that position is moved on, so that it resumes at the same item.
_INSERTED_WORK: tuple[tuple[int, str, int], ...] = ((5, Phase.LLM_CALL.value, 1),)

#: How deep a snapshot's JSON may nest. It holds State values of up to ``MAX_VALUE_DEPTH`` levels
#: (three JSON levels each, at most, when tagged), and stays within what pydantic-core writes.
MAX_SNAPSHOT_DEPTH = 240


# -- the snapshot -----------------------------------------------------------------------------------

#: Every field is read as the type it is, never converted: a step of ``"0"`` or ``true`` is refused,
#: not taken for 0 or 1 (pydantic's strict mode). A phase is its name, as JSON writes it.
_STRICT = ConfigDict(extra="forbid", strict=True)
_PhaseName = Annotated[Phase, Strict(False)]
#: The fields the library reads from the break points it writes itself, and their types.
_BREAK_POINT_FIELDS: dict[str, dict[str, type[str] | type[list[Any]]]] = {
    "confirmation": {"tool_name": str, "tool_call_id": str, "waiting": list},
    "outcome_unknown": {"tool_call_ids": list, "tool_names": list},
}
_KIND_NAMES: dict[type, str] = {str: "string", list: "list of strings"}
#: Steps and snapshot numbers are 64-bit integers where stores keep them.
_LARGEST_STEP = (1 << 63) - 1


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
    source: _PhaseName
    dest: _PhaseName
    trigger: str
    duration_us: float


class OutcomeData(TypedDict, total=False):
    """A tool call that finished before the pause: its value, or the error it raised."""

    __pydantic_config__ = _STRICT  # type: ignore[misc]
    value: Any
    error_type: str
    error: str


class AgentSnapshot(BaseModel):
    """Everything needed to continue a run (or a finished run's record), as validated, JSON-compatible data."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    format_version: int = SNAPSHOT_FORMAT_VERSION
    run_id: str = Field(min_length=1)
    phase: _PhaseName
    #: How many items of the phase's work (``agentfsm.machine.PHASE_WORK``) are done.
    stage: int = Field(default=0, ge=0)
    step: int = Field(ge=0, le=_LARGEST_STEP)
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    pending_tool_calls: list[ToolCallData] = []
    decisions: list[dict[str, Any]] = []
    completed_tool_results: dict[str, OutcomeData] = {}
    #: The calls handed to the tools when the snapshot was recorded (TOOL_RUN, tools running): the
    #: journal that tells, after a crash, which calls may have run without their result being stored.
    started_tool_calls: list[str] = []
    #: How many attempts of each pending call failed and were retried (its tool's ``Retry``), by call
    #: key: a resumed run goes on counting (``agentfsm.retries``).
    tool_call_attempts: dict[str, Annotated[int, Field(ge=1)]] = {}
    #: The calls whose attempt failed and whose backoff is still owed: a resumed run waits it out first.
    retrying_tool_calls: list[str] = []
    #: The answers a person gave to the questions of work still under way (the step's calls, a hook
    #: point), by question id: an asker run again reads them (``agentfsm.interrupts``).
    input_answers: dict[str, Any] = {}
    exit_reason: str | None = None
    trace: list[TraceData] = []
    break_point: dict[str, Any] | None = None
    agent_fingerprint: str
    created_at: str
    #: The snapshot's number in its run's history, in the store that keeps it (set by the store;
    #: ``None`` for a snapshot that no store gave out). A store resumes only its run's newest one.
    seq: int | None = Field(default=None, ge=0, le=_LARGEST_STEP)
    #: The run's trace context, W3C ``traceparent`` (and ``tracestate``): every segment of the run
    #: (resumed, recovered, continued elsewhere) joins the same trace (``agentfsm.telemetry``).
    trace_context: dict[str, str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        # Version 1 had no stage: its snapshots were all taken at the start of a phase's work.
        if not isinstance(data, dict) or type(data.get("format_version")) is not int:
            return data
        if data["format_version"] == 1:
            data = {**data, "format_version": 2, "stage": 0}
        stage = data.get("stage")
        if type(stage) is int:
            older = [p for v, phase, p in _INSERTED_WORK if data["format_version"] < v and data.get("phase") == phase]
            moved = stage + sum(1 for position in older if stage >= position)
            if moved != stage:
                data = {**data, "stage": moved}
        return data

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
        # Version 2 had no seq (it says nothing of the snapshot's place in a store), version 3 no trace
        # context (its run was not traced): their defaults fill them in.
        return SNAPSHOT_FORMAT_VERSION

    @field_validator("phase")
    @classmethod
    def _resumable_phase(cls, phase: Phase) -> Phase:
        if phase not in ACTIVE_PHASES and phase not in TERMINAL_PHASES:
            raise ValueError(f"a run resumes into an active phase (or ended in DONE or FAILED), not {phase.value}")
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

    @model_validator(mode="after")
    def _consistent(self) -> AgentSnapshot:
        phase = self.phase
        if phase in TERMINAL_PHASES:  # a finished run's record: its stage is the one of the phase it left last
            if not self.trace or self.trace[-1]["dest"] is not phase:
                raise ValueError(
                    f"a run resumes into an active phase; the record of one that ended in {phase.value} ends with "
                    "its edge into it"
                )
            phase = self.trace[-1]["source"]
        work = len(PHASE_WORK.get(phase, ()))
        if self.stage > work:
            raise ValueError(f"stage {self.stage} is past the {work} items of {phase.value}'s work")
        keys = [_call_key(c, i) for i, c in enumerate(self.pending_tool_calls)]
        shared = sorted({k for k in keys if keys.count(k) > 1})
        if shared:
            raise ValueError(f"pending tool calls share the ids {shared}: each call needs its own to be decided")
        return self

    @field_validator("decisions")
    @classmethod
    def _valid_decisions(cls, decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, decision in enumerate(decisions):
            try:
                ToolExecutionDecision.from_dict(decision)
            except DecisionError as exc:
                raise ValueError(f"decision {index}: {exc}") from None
            step = decision.get("step")
            if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
                raise ValueError(f"decision {index}: its step is an int")
        return decisions

    @field_validator("break_point")
    @classmethod
    def _valid_break_point(cls, reason: dict[str, Any] | None) -> dict[str, Any] | None:
        if reason is None:
            return None
        if not isinstance(reason.get("type"), str):
            raise ValueError("a break point names its type (a string)")
        for key, kind in _BREAK_POINT_FIELDS.get(reason["type"], {}).items():
            value = reason.get(key)
            if not isinstance(value, kind) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
                raise ValueError(f"a {reason['type']} break point's {key!r} must be a {_KIND_NAMES[kind]}")
        try:
            pause_reason(reason)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"the reason the run paused lacks {exc}") from None
        return reason

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
        check_depth(data, MAX_SNAPSHOT_DEPTH, "snapshot")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors())
            raise SnapshotError(f"Invalid agent snapshot: {_brief(problems)}") from None

    def to_bytes(self) -> bytes:
        """Compact JSON bytes (pydantic-core's serializer: twice as fast as ``to_dict`` then orjson)."""
        try:
            return self.model_dump_json().encode()
        except PydanticSerializationError:  # lone surrogates in a string: written as escapes
            return dump_json(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes) -> AgentSnapshot:
        """Decode and validate bytes made by ``to_bytes`` or ``to_file``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SnapshotError(f"A snapshot is read from bytes, got {type(data).__name__}.")
        try:
            decoded = load_json(bytes(data))
        except DeserializationError as exc:
            raise SnapshotError(f"Not a snapshot: {exc} Was it truncated?") from None
        return cls.from_dict(decoded)

    def to_file(self, path: str | os.PathLike[str]) -> Path:
        """Write indented, readable JSON atomically (a crash never leaves a half-written file)."""
        target = Path(path)
        atomic_write(target, dump_json(self.to_dict(), indent=True))
        return target

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> AgentSnapshot:
        """Read and validate a snapshot file."""
        return cls.from_bytes(read_file(path, "snapshot file"))

    def pending_calls_by_key(self) -> dict[str, ToolCallData]:
        """The pending calls by the key that ``completed_tool_results``, decisions and break points use.

        A call's key is its id, or ``#<position>`` in the reply (``agentfsm.tools.invoker.call_key``).
        """
        return {_call_key(c, i): c for i, c in enumerate(self.pending_tool_calls)}

    def outcome_unknown_calls(self) -> dict[str, str]:
        """The pending calls that may have run without their result being recorded: call key -> tool name.

        Those are the calls the snapshot says were handed to the tools (``started_tool_calls``) and
        have no result in it; a run paused for them (break point ``outcome_unknown``) lists them.
        """
        calls = self.pending_calls_by_key()
        pause = self.pause
        started = pause.tool_call_ids if isinstance(pause, OutcomeUnknown) else self.started_tool_calls
        return {
            key: calls[key]["tool_name"] for key in started if key in calls and key not in self.completed_tool_results
        }

    def awaited_decisions(self) -> list[str]:
        """The keys of the calls a paused run waits for decisions on.

        Those a confirmation waits for, or those whose outcome is unknown; none when a breakpoint paused it.
        """
        pause = self.pause
        if isinstance(pause, AwaitingDecision):
            return list(pause.waiting)
        if isinstance(pause, OutcomeUnknown):
            return list(pause.tool_call_ids)
        return []

    def awaited_answers(self) -> list[InputQuestion]:
        """The questions a paused run waits for answers to (a tool call or a hook asked a person)."""
        pause = self.pause
        return list(pause.questions) if isinstance(pause, AwaitingInput) else []

    @property
    def pause(self) -> PauseReason | None:
        """Why the run paused, typed (``break_point`` is its data); ``None`` for a run that did not pause."""
        return pause_reason(self.break_point)

    @property
    def ended(self) -> bool:
        """Whether this is a finished run's record (in DONE or FAILED), not a point to resume."""
        return self.phase in TERMINAL_PHASES

    def reopened(self) -> AgentSnapshot:
        """Where a finished run stood before its last edge (in that phase, its work as far as it got); any other as it is.

        ``SnapshotError`` for a run that ended before its first phase (nothing of it ran to resume).
        """
        if not self.ended:
            return self
        last = self.trace[-1]
        if last["source"] not in ACTIVE_PHASES:
            raise SnapshotError(
                f"Run {self.run_id} ended before its first phase ({last['source'].value} --{last['trigger']}--> "
                f"{self.phase.value}): there is no point of it to start from; start a new run with its messages."
            )
        return self.model_copy(
            update={"phase": last["source"], "trace": self.trace[:-1], "exit_reason": None, "break_point": None}
        )

    def fork(self, run_id: str | None = None) -> AgentSnapshot:
        """The same point of the run under a new run id: resuming it starts a branch, the original stays.

        The branch is a run of its own: it starts a trace of its own (no ``trace_context``). A fork of
        a finished run's record starts where the run stood before its last edge (``reopened``).
        """
        update = {"run_id": run_id or uuid.uuid4().hex, "created_at": now_iso(), "seq": None, "trace_context": None}
        return self.reopened().model_copy(update=update)

    def file_name(self) -> str:
        """A descriptive file name: ``<run id>_<step>_<phase>.json``."""
        return f"{self.run_id}_{self.step:04d}_{self.phase.value}.json"


def _call_key(call: ToolCallData, position: int) -> str:
    """A stored call's key, as ``agentfsm.tools.invoker.call_key`` gives it for the call itself."""
    return key_of(call.get("id"), position)


def check_depth(document: Any, limit: int, what: str) -> None:
    """``SnapshotError`` when the JSON ``document`` nests deeper than ``limit`` levels (checked before anything recursive reads it)."""
    if isinstance(document, (dict, list)) and nests_deeper(document, limit):
        raise SnapshotError(f"The {what} nests deeper than {limit} levels: it was not written by agentfsm.")


def _brief(text: str) -> str:
    """``text`` cut short: an error names the problem without repeating a huge value."""
    return text if len(text) <= 2000 else text[:2000] + "..."


def fingerprint(shape: Any) -> str:
    """A short, stable hash of an agent's configuration shape."""
    return hashlib.sha256(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS, default=repr)).hexdigest()[:16]


def now_iso() -> str:
    """The current UTC time in ISO 8601."""
    return datetime.now(UTC).isoformat()


def iso_from_timestamp(timestamp: float) -> str:
    """A ``time.time()`` value in the format of ``now_iso``; ``SnapshotError`` for a stored value that is no time."""
    try:
        return datetime.fromtimestamp(timestamp, UTC).isoformat()
    except (OverflowError, ValueError, OSError, TypeError):
        raise SnapshotError(f"{timestamp!r} is not a time a store could have written: the store is damaged.") from None
