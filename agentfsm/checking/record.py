"""What one explored path recorded: the run as the invariants see it.

A ``RecordedRun`` is one logical run of the agent (its first start and every resume after a pause
or a crash), with everything the world around it saw: the model's inputs, each tool execution,
each hook firing, each decision, the transitions and events of every segment, how it ended and
its State.
User invariants are predicates over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentfsm._core.records import TransitionRecord
from agentfsm.events import Event
from agentfsm.messages import ChatMessage

#: The comparable form of a result (``agentfsm.testing.comparable_result``), without the edges a
#: pause, a crash or an in-doubt wait add.
Comparable = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelInput:
    """One model call: the step it makes, and the conversation it was handed."""

    step: int
    messages: list[ChatMessage]
    segment: int


@dataclass(frozen=True, slots=True)
class ToolExecution:
    """One execution of a tool for one call (a call run again after a crash is executed twice)."""

    step: int
    call_key: str
    tool_name: str
    #: The arguments the tool was given, without the idempotency key agentfsm adds.
    arguments: dict[str, Any]
    idempotent: bool
    #: A confirmation strategy covers the tool.
    covered: bool
    #: ``"returns"`` (the tool's own function ran), ``"raises"`` (a failure the world chose) or
    #: ``"asks"`` (it asked a person, ``ask_user``, and ended without a result).
    outcome: str
    segment: int


@dataclass(slots=True)
class HookFiring:
    """One firing of a hook at a hook point."""

    point: str
    step: int
    #: The hook's position among the point's hooks.
    index: int
    hook: str
    segment: int
    #: A commit of the store followed the firing before the run stopped: a resume knows it happened.
    committed: bool = False
    #: The hook asked a person (``ask_user``) and stopped there: it fires again once answered.
    asked: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision the world took for a call: in CONFIRM, on a resume after a pause, or for a call in doubt.

    For a call in doubt, its tool's reconcile function answers first, if it has one.
    """

    step: int
    call_key: str
    tool_name: str
    #: ``approve``, ``reject``, ``modify``, ``defer`` (confirmations), ``rerun``, ``settle`` (in doubt), a
    #: reconcile function's ``happened``, ``not_happened``, ``unknown``, ``raises`` (none runs the call again),
    #: ``answer`` (a question a tool or a hook asked: ``call_key`` is the question's id, ``arguments``
    #: ``{"answer": value}``) or ``invalid answer taken`` (a resume took an answer that breaks its schema).
    verb: str
    #: The arguments a ``approve``/``modify`` lets the call run with.
    arguments: dict[str, Any] | None
    segment: int


@dataclass(frozen=True, slots=True)
class AnswerRead:
    """What one ``ask_user`` of a tool call returned: the ``index``-th question (from 0) of call ``call_key``."""

    step: int
    call_key: str
    index: int
    value: Any
    segment: int


@dataclass(frozen=True, slots=True)
class Segment:
    """One stretch of the run in one "process": from its start or a resume to its end, pause or crash."""

    #: How it started: ``start``, ``restart`` (a crash before anything was stored), ``resume after crash``,
    #: ``resume after pause``.
    started: str
    trace: list[TransitionRecord]
    #: How it stopped: ``DONE``, ``PAUSED``, ``FAILED``, ``crashed``, ``cut`` (the bound was hit).
    ended: str
    #: The segment's events (``agentfsm.events``), as an ``on_event`` handler got them: a crashed
    #: process's stop where it was killed, as a real one's would.
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class RecordedRun:
    """One explored path, as the invariants see it.

    Attributes hold what happened in order; ``state`` is the run's State data where it stopped and
    ``result`` what ``Agent.run`` returned (``None`` unless it ended in DONE). ``baseline`` is, for a
    path with a crash or a breakpoint, the comparable result of the same path uninterrupted.
    """

    model_inputs: list[ModelInput] = field(default_factory=list)
    tool_executions: list[ToolExecution] = field(default_factory=list)
    hook_firings: list[HookFiring] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    #: What each ``ask_user`` of a tool call returned, in order.
    answers_read: list[AnswerRead] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    #: ``DONE``, ``PAUSED``, ``FAILED`` or ``cut`` (the path went past the exploration's bound).
    ending: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    comparable: Comparable | None = None
    baseline: Comparable | None = None
    error: BaseException | None = None
    #: Where the run was interrupted, in words (``None``: it was not).
    interruption: str | None = None
    #: The write to the store the process died before, and what it records (``None``: no crash).
    died_before: str | None = None
    #: The checked agent's ``max_agent_steps``.
    max_agent_steps: int = 0
    #: How many hooks the checked agent has at each hook point.
    hooked: dict[str, int] = field(default_factory=dict)
    #: The points the checked agent has guardrails at (``input``, ``output``, ``tool_call``, ``tool_result``).
    guarded: tuple[str, ...] = ()

    @property
    def trace(self) -> list[TransitionRecord]:
        """The transitions of the last segment: the whole run as its last process saw it (snapshots carry the trace)."""
        return self.segments[-1].trace if self.segments else []

    @property
    def events(self) -> list[Event]:
        """Every event of the run, segment after segment (``agentfsm.events``: transitions, hooks, calls...)."""
        return [event for segment in self.segments for event in segment.events]

    @property
    def crashed(self) -> bool:
        """A segment of the run ended in a simulated crash."""
        return any(s.ended == "crashed" for s in self.segments)

    def firings(self, point: str) -> list[HookFiring]:
        """The firings of ``point``'s hooks, in order."""
        return [f for f in self.hook_firings if f.point == point]
