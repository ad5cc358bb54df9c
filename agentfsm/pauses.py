"""Why a run paused, and where a stored run stands: the one vocabulary of pauses and run statuses.

A paused run's snapshot says why it paused (``AgentSnapshot.pause``): a breakpoint matched
(``BreakpointHit``), calls wait for a confirmation decision (``AwaitingDecision``), or calls may have
run before a crash without their result being recorded (``OutcomeUnknown``), a tool or a hook asked
a person (``AwaitingInput``), or the run was cancelled (``Cancelled``). Each reason's
``kind`` is its ``"type"`` in the snapshot's ``break_point`` data, the form snapshots have always
stored it in (a breakpoint's ``type`` is its class name). ``RunStatus`` is what stores, durable
views, the CLI and the review page say of a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from agentfsm._core.phases import Phase


class RunStatus(StrEnum):
    """Where a stored run stands."""

    #: A process holds the run (or its durable workflow runs, is queued, or waits for recovery).
    ACTIVE = "active"
    #: It waits to be resumed: at a breakpoint, or for decisions.
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"

    @classmethod
    def ended_in(cls, phase: Phase) -> RunStatus:
        """The status of a run whose process let it go in ``phase``: done, paused, or else failed."""
        if phase is Phase.DONE:
            return cls.DONE
        return cls.PAUSED if phase is Phase.PAUSED else cls.FAILED


@dataclass(frozen=True, slots=True)
class BreakpointHit:
    """A breakpoint matched: ``breakpoint`` is its ``Breakpoint.to_dict()``."""

    kind: ClassVar[str] = "breakpoint"
    breakpoint: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data: the breakpoint's own."""
        return dict(self.breakpoint)


@dataclass(frozen=True, slots=True)
class AwaitingDecision:
    """Calls wait for a confirmation decision: ``waiting`` (their keys), the first of them named."""

    kind: ClassVar[str] = "confirmation"
    tool_name: str
    tool_call_id: str
    waiting: list[str]
    #: Where the confirmation strategy asked for the snapshot file, if it did.
    snapshot_file_path: str | None = None
    tool_descriptions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data."""
        return {"type": self.kind, **asdict(self)}


@dataclass(frozen=True, slots=True)
class OutcomeUnknown:
    """Calls started before a crash and their results were never recorded (in doubt)."""

    kind: ClassVar[str] = "outcome_unknown"
    tool_call_ids: list[str]
    tool_names: list[str]
    #: Why a call stays in doubt, by key, when its tool's reconcile function could not tell (its
    #: reason, or what went wrong with it: ``agentfsm.reconcile``).
    notes: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data (``notes`` only when there are some)."""
        data = {"type": self.kind, **asdict(self)}
        if not self.notes:
            del data["notes"]
        return data


@dataclass(frozen=True, slots=True)
class InputQuestion:
    """One question a tool call or a hook asked a person (``ask_user``), answered by its ``id``.

    ``id`` is ``<asker>.<n>``: the asking call's key (or ``<hook point>.<hook's position>``) and
    the question's position among those the asker asked, counted from 0.
    """

    id: str
    question: str
    #: The JSON schema the answer must fit (``{}``: any JSON value).
    response_schema: dict[str, Any]
    #: The asking call (its key) and its tool, or the asking hook (its point, its position there).
    tool_call_id: str | None = None
    tool_name: str | None = None
    hook_point: str | None = None
    hook: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """As stored in the pause's data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InputQuestion:
        """Invert ``to_dict``; ``TypeError`` for a field of the wrong type (a damaged snapshot)."""
        question = cls(
            data["id"],
            data["question"],
            data["response_schema"],
            data.get("tool_call_id"),
            data.get("tool_name"),
            data.get("hook_point"),
            data.get("hook"),
        )
        texts = (question.id, question.question)
        optional = (question.tool_call_id, question.tool_name, question.hook_point)
        if (
            not all(isinstance(t, str) for t in texts)
            or not isinstance(question.response_schema, dict)
            or not all(t is None or isinstance(t, str) for t in optional)
            or not (question.hook is None or (type(question.hook) is int and question.hook >= 0))
            or (question.tool_call_id is None) == (question.hook_point is None)
        ):
            raise TypeError(f"question {data.get('id')!r} is not a question a tool call or a hook asked")
        return question


@dataclass(frozen=True, slots=True)
class AwaitingInput:
    """Tool calls or a hook asked a person (``ask_user``): the run waits for the answers to ``questions``."""

    kind: ClassVar[str] = "input"
    questions: list[InputQuestion]

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data."""
        return {"type": self.kind, "questions": [q.to_dict() for q in self.questions]}


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The run was cancelled from outside (``RunHandle.cancel()``, or its task): it resumes where it stopped."""

    kind: ClassVar[str] = "cancelled"

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``break_point`` data."""
        return {"type": self.kind}


PauseReason = BreakpointHit | AwaitingDecision | OutcomeUnknown | AwaitingInput | Cancelled


def pause_reason(data: Mapping[str, Any] | None) -> PauseReason | None:
    """The reason a snapshot's ``break_point`` data states (``None``: the run did not pause)."""
    if data is None:
        return None
    kind = data.get("type")
    if kind == AwaitingDecision.kind:
        return AwaitingDecision(
            data["tool_name"],
            data["tool_call_id"],
            list(data.get("waiting", ())),
            data.get("snapshot_file_path"),
            dict(data.get("tool_descriptions") or {}),
        )
    if kind == OutcomeUnknown.kind:
        return OutcomeUnknown(
            list(data["tool_call_ids"]), list(data.get("tool_names", ())), dict(data.get("notes") or {})
        )
    if kind == AwaitingInput.kind:
        questions = data["questions"]
        if not isinstance(questions, list) or not all(isinstance(q, Mapping) for q in questions):
            raise TypeError("an input pause lists its questions")
        return AwaitingInput([InputQuestion.from_dict(q) for q in questions])
    if kind == Cancelled.kind:
        return Cancelled()
    return BreakpointHit(dict(data))
