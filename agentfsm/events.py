"""The events of a run: one typed stream of everything a run does, for whoever watches it.

Every event is a frozen dataclass with a ``kind`` (a string, also its name in ``to_dict``), the
``run_id``, the ``step`` (model calls made so far) and ``at`` (a ``time.time()`` timestamp):

- ``run_started`` (``RunStarted``): ``agent`` (its name), ``resumed`` (from a snapshot).
- ``transition`` (``PhaseChanged``): the phase machine took an edge: ``source``, ``dest``,
  ``trigger``, ``duration_us`` (time spent in ``source``), ``exit_reason`` (when entering ``done``).
- ``call_transition`` (``CallChanged``): a tool call took an edge of the call machine: ``call``
  (its key), ``tool``, ``source``, ``dest``, ``trigger``.
- ``model_started`` (``ModelStarted``): ``model`` (the generator's model, or its class name) and
  ``messages`` (how many it is sent).
- ``model_chunk`` (``ModelChunk``): one streamed ``chunk`` (a ``StreamingChunk``), when the run
  streams (it has a ``streaming_callback``).
- ``model_ended`` (``ModelEnded``): ``model`` (the one that answered, when the reply says),
  ``usage`` (its token counts), ``finish_reasons``, ``duration_us``.
- ``model_failed`` (``ModelFailed``): ``model``, ``error``, ``duration_us``.
- ``tool_started`` (``ToolStarted``): ``call`` (its key), ``call_id`` (the model's id), ``tool``,
  ``arguments``.
- ``tool_progress`` (``ToolProgress``): a running call's tool reported progress (a tool function's
  ``report_progress`` parameter, an MCP server's progress notification): ``call``, ``call_id``,
  ``tool``, ``progress``, ``total`` (or ``None``), ``message`` (or ``None``). Live: in no snapshot,
  journal or workflow record, and never replayed (a store that keeps events keeps them too).
- ``tool_ended`` (``ToolEnded``): ``call``, ``call_id``, ``tool``, ``result`` or ``error``,
  ``duration_us`` (since the step's tools were handed out).
- ``hook`` (``HookRan``): ``point``, ``hook`` (its name), ``duration_us``, ``error`` (or ``None``).
- ``guardrail`` (``GuardrailChecked``): a point's guardrails checked one value: ``point``
  (``input``, ``output``, ``tool_call``, ``tool_result``), ``subject`` (``input``, ``output`` or
  the call's key), ``passed`` (the guardrails that let it go on), ``rewrites`` (each rewrite's
  guardrail and note: what was changed), ``tripped`` (the guardrail whose tripwire fired, or
  ``None``), ``reason``, ``on_trip`` and ``digest`` (a hash of the value as it went on: the
  checker matches it to what the model read, what ran, what left).
- ``decision`` (``DecisionTaken``): ``call`` and the ``decision`` (``ToolExecutionDecision.to_dict()``).
- ``reconciled`` (``CallReconciled``): a call in doubt after a crash was looked up by its tool's
  reconcile function (``agentfsm.reconcile``): ``call``, ``tool``, ``answer`` (``happened``,
  ``not_happened`` or ``unknown``) and ``reason`` (why it stays in doubt: the function's reason, or
  what went wrong with it; ``None`` otherwise).
- ``paused`` (``RunPaused``): ``reason`` (``breakpoint``, ``confirmation``, ``outcome_unknown`` or ``cancelled``), ``pause`` (the reason's ``to_dict()``), ``seq`` (the stored
  snapshot's number, ``None`` without a store), ``path`` (its file, if written to one), and the
  ``snapshot`` that resumes the run.
- ``resumed`` (``RunResumed``): the run resumed into ``phase`` at ``step`` (the event's).
- ``run_ended`` (``RunEnded``): ``result`` (what ``Agent.run`` returns) and ``exit_reason``, or
  ``error`` for a failed run.
- ``warning`` (``RunWarning``): the run refused or corrected something from outside and went on:
  ``warning`` (what: ``usage_corrected`` for token counts a model reported that could not be
  counted as given, ``tool_name_taken`` for a tool a dynamic toolset showed under a name another
  tool of the run has) and ``message`` (what was refused or changed; never a prompt or a reply).

Errors are given as ``"<type>: <message>"``; phases and call statuses as ``Phase`` and ``CallStatus``
members (string enums: ``to_dict`` and ``event_from_dict`` give plain strings).
``to_dict()`` gives JSON-compatible data and ``event_from_dict`` (or ``<EventClass>.from_dict``) the
event back; a ``run_ended`` result comes back as data, its ``trace`` as ``TransitionRecord.to_dict()``
dicts.
``Agent.iter`` / ``Agent.iter_async`` yield these events, ``Agent.run(on_event=...)`` is called with
each; docs/events.md shows both. A snapshot store made with ``record_events=True`` keeps them for
other processes (the review page's live view) as ``stored_dict`` gives them, and reads them back
with ``event_from_stored``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from agentfsm.messages import StreamingChunk
from agentfsm.serialization import deserialize_value, is_of_type, serialize_value, type_name
from agentfsm.snapshot import AgentSnapshot

__all__ = [
    "CallChanged",
    "CallReconciled",
    "DecisionTaken",
    "Event",
    "EventHandler",
    "GuardrailChecked",
    "HookRan",
    "ModelChunk",
    "ModelEnded",
    "ModelFailed",
    "ModelStarted",
    "PhaseChanged",
    "RunEnded",
    "RunPaused",
    "RunResumed",
    "RunStarted",
    "RunWarning",
    "ToolEnded",
    "ToolProgress",
    "ToolStarted",
    "event_from_dict",
    "event_from_stored",
    "stored_dict",
]


def error_text(error: BaseException) -> str:
    """How events give an error: ``"<type>: <message>"``."""
    return f"{type(error).__name__}: {error}"


_E = TypeVar("_E")


def _quick_init(cls: type[_E]) -> type[_E]:
    """Give a frozen event class an ``__init__`` that sets its ``__dict__`` whole, in one call.

    The frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, one call a
    field; a run makes ten events a step, so this is most of what listening to it costs. The
    instances stay frozen: assigning a field still raises ``FrozenInstanceError``.
    """
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    fields = ", ".join(f"{name!r}: {name}" for name in names)
    source = f"def __init__(self, {', '.join(names)}):\n    _set(self, '__dict__', {{{fields}}})"
    namespace: dict[str, Any] = {"_set": object.__setattr__}
    exec(source, namespace)  # built from the field names only, as dataclasses builds its own
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@dataclass(frozen=True)
class _Event:
    """What every event carries."""

    run_id: str
    step: int
    at: float

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible data, with the event's ``kind``; ``event_from_dict`` inverts it."""
        return self._as_data(frozenset())

    def _as_data(self, left_out: frozenset[str]) -> dict[str, Any]:
        """``to_dict()`` without the fields named in ``left_out`` (never converted)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in left_out}
        special = {
            name: to_data(data.pop(name))
            for name, (to_data, _) in _AS_DATA.get(self.kind, {}).items()
            if name not in left_out
        }
        return {"kind": self.kind, **serialize_value(data), **special}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Invert ``to_dict`` (as ``event_from_dict``, which takes any kind).

        Raises:
            DeserializationError: ``data`` is not an event of this class's kind.
        """
        from agentfsm.errors import DeserializationError

        if data.get("kind") != cls.kind:
            raise DeserializationError(f"Expected a {cls.kind!r} event, got kind {data.get('kind')!r}.")
        return event_from_dict(data)


@_quick_init
@dataclass(frozen=True)
class RunStarted(_Event):
    """A run started, or resumed from a snapshot (``resumed``)."""

    kind: ClassVar[Literal["run_started"]] = "run_started"
    agent: str
    resumed: bool


@_quick_init
@dataclass(frozen=True)
class PhaseChanged(_Event):
    """The run took an edge of the phase machine (one entry of its ``trace``)."""

    kind: ClassVar[Literal["transition"]] = "transition"
    source: str
    dest: str
    trigger: str
    duration_us: float
    #: How the run ended, on the edge into ``done``.
    exit_reason: str | None


@_quick_init
@dataclass(frozen=True)
class CallChanged(_Event):
    """A tool call took an edge of the call machine (``agentfsm.machine.CALL_TRANSITIONS``)."""

    kind: ClassVar[Literal["call_transition"]] = "call_transition"
    call: str
    tool: str
    source: str
    dest: str
    trigger: str


@_quick_init
@dataclass(frozen=True)
class ModelStarted(_Event):
    """The chat generator is called with ``messages`` messages."""

    kind: ClassVar[Literal["model_started"]] = "model_started"
    model: str
    messages: int


@_quick_init
@dataclass(frozen=True)
class ModelChunk(_Event):
    """The chat generator streamed a chunk (what ``streaming_callback`` is given)."""

    kind: ClassVar[Literal["model_chunk"]] = "model_chunk"
    chunk: StreamingChunk


@_quick_init
@dataclass(frozen=True)
class ModelEnded(_Event):
    """The chat generator replied."""

    kind: ClassVar[Literal["model_ended"]] = "model_ended"
    #: The model that answered, as the reply's ``meta`` says; else the one called.
    model: str
    #: The replies' token counts summed (their ``meta["usage"]``).
    usage: dict[str, int]
    finish_reasons: list[str]
    duration_us: float


@_quick_init
@dataclass(frozen=True)
class ModelFailed(_Event):
    """The chat generator raised, or replied with something that is not a reply."""

    kind: ClassVar[Literal["model_failed"]] = "model_failed"
    model: str
    error: str
    duration_us: float


@_quick_init
@dataclass(frozen=True)
class ToolStarted(_Event):
    """A tool call was handed to its tool."""

    kind: ClassVar[Literal["tool_started"]] = "tool_started"
    call: str
    call_id: str | None
    tool: str
    arguments: dict[str, Any]


@_quick_init
@dataclass(frozen=True)
class ToolProgress(_Event):
    """A running call's tool reported how far it got (between the call's ``tool_started`` and ``tool_ended``)."""

    kind: ClassVar[Literal["tool_progress"]] = "tool_progress"
    call: str
    call_id: str | None
    tool: str
    #: How far the call got, in the tool's own unit (a fraction, bytes, items...).
    progress: float
    #: What ``progress`` goes up to, when the tool knows.
    total: float | None
    #: What the tool says it is doing; may hold the user's data (telemetry records it only with content).
    message: str | None


@_quick_init
@dataclass(frozen=True)
class ToolEnded(_Event):
    """A tool call finished: its tool returned ``result``, or raised ``error``."""

    kind: ClassVar[Literal["tool_ended"]] = "tool_ended"
    call: str
    call_id: str | None
    tool: str
    result: Any
    error: str | None
    duration_us: float


@_quick_init
@dataclass(frozen=True)
class HookRan(_Event):
    """A hook ran at ``point``; ``error`` when it raised."""

    kind: ClassVar[Literal["hook"]] = "hook"
    point: str
    hook: str
    duration_us: float
    error: str | None


@_quick_init
@dataclass(frozen=True)
class GuardrailChecked(_Event):
    """A point's guardrails checked one value: which passed it, what they rewrote, and the tripwire that fired."""

    kind: ClassVar[Literal["guardrail"]] = "guardrail"
    point: str
    subject: str
    passed: list[str]
    #: Each rewrite: ``[guardrail, note]``.
    rewrites: list[list[str]]
    tripped: str | None
    reason: str
    on_trip: str
    #: A hash of the value as it went on (``value_digest``).
    digest: str

    @classmethod
    def of(cls, run_id: str, step: int, at: float, point: str, verdict: Any) -> GuardrailChecked:
        """The event of a ``GuardrailVerdict``."""
        return cls(
            run_id,
            step,
            at,
            point,
            verdict.subject,
            list(verdict.passed),
            [list(r) for r in verdict.rewrites],
            verdict.tripped,
            verdict.reason,
            verdict.on_trip,
            value_digest(verdict.value),
        )


def value_digest(value: Any) -> str:
    """A short hash of a value as data (a conversation, a call, a result, an answer)."""
    import hashlib

    import orjson

    if isinstance(value, list | tuple) or hasattr(value, "to_dict"):
        items = value if isinstance(value, list | tuple) else [value]
        data: Any = [i.to_dict() if hasattr(i, "to_dict") else serialize_value(i) for i in items]
    else:
        data = serialize_value(value)
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


@_quick_init
@dataclass(frozen=True)
class DecisionTaken(_Event):
    """A confirmation decision was applied to a pending call (from a strategy, or given on resume)."""

    kind: ClassVar[Literal["decision"]] = "decision"
    call: str
    decision: dict[str, Any]


@_quick_init
@dataclass(frozen=True)
class CallReconciled(_Event):
    """A call in doubt after a crash was looked up by its tool's reconcile function (``agentfsm.reconcile``)."""

    kind: ClassVar[Literal["reconciled"]] = "reconciled"
    call: str
    tool: str
    #: ``"happened"`` (the call is settled with its result), ``"not_happened"`` (it runs) or
    #: ``"unknown"`` (it stays in doubt, for a person).
    answer: str
    #: Why it stays in doubt: the function's reason, or what went wrong with it (``None`` otherwise).
    reason: str | None


@_quick_init
@dataclass(frozen=True)
class RunPaused(_Event):
    """The run paused: a breakpoint, a decision to wait for, calls whose outcome is unknown, or a cancellation."""

    kind: ClassVar[Literal["paused"]] = "paused"
    #: Why: ``"breakpoint"``, ``"confirmation"`` (a decision to wait for), ``"outcome_unknown"`` or
    #: ``"cancelled"`` (a ``RunHandle``, or the task of ``run_async``).
    reason: str
    #: The pause reason's ``to_dict()`` (``snapshot.pause`` is the typed one: ``agentfsm.pauses``).
    pause: dict[str, Any]
    #: The snapshot's number in the snapshot store, ``None`` without one.
    seq: int | None
    #: The file the snapshot was written to, if any.
    path: str | None
    #: Resumes the run: ``agent.run(snapshot=event.snapshot, ...)``.
    snapshot: AgentSnapshot


@_quick_init
@dataclass(frozen=True)
class RunResumed(_Event):
    """A run resumed from a snapshot into ``phase`` (at the event's ``step``)."""

    kind: ClassVar[Literal["resumed"]] = "resumed"
    phase: str


@_quick_init
@dataclass(frozen=True)
class RunEnded(_Event):
    """The run is over: ``result`` (what ``Agent.run`` returns) and ``exit_reason``, or the ``error`` that failed it."""

    kind: ClassVar[Literal["run_ended"]] = "run_ended"
    result: dict[str, Any] | None
    exit_reason: str | None
    error: str | None


@_quick_init
@dataclass(frozen=True)
class RunWarning(_Event):
    """The run refused or corrected something that came from outside (a model's usage, a toolset's tool) and went on."""

    kind: ClassVar[Literal["warning"]] = "warning"
    #: What it was: ``"usage_corrected"`` or ``"tool_name_taken"``.
    warning: str
    #: What was refused or changed, and why (names and numbers, never a prompt or a reply).
    message: str


Event = (
    RunStarted
    | PhaseChanged
    | CallChanged
    | ModelStarted
    | ModelChunk
    | ModelEnded
    | ModelFailed
    | ToolStarted
    | ToolProgress
    | ToolEnded
    | HookRan
    | GuardrailChecked
    | DecisionTaken
    | CallReconciled
    | RunPaused
    | RunResumed
    | RunEnded
    | RunWarning
)

#: Called with each event of a run (``Agent.run(on_event=...)``); under ``run_async`` it may be async.
EventHandler = Callable[[Event], Any]

_KINDS: dict[str, type[_Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        PhaseChanged,
        CallChanged,
        ModelStarted,
        ModelChunk,
        ModelEnded,
        ModelFailed,
        ToolStarted,
        ToolProgress,
        ToolEnded,
        HookRan,
        GuardrailChecked,
        DecisionTaken,
        CallReconciled,
        RunPaused,
        RunResumed,
        RunEnded,
        RunWarning,
    )
}


def _field_types(cls: type[_Event]) -> dict[str, Any]:
    """The fields of an event class and their types, in order."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


#: Each kind's fields and their types: an event read back from data holds values of these types, as they are.
_FIELD_TYPES = {kind: _field_types(cls) for kind, cls in _KINDS.items()}


def _result_to_data(result: dict[str, Any]) -> Any:
    """A run's result as data; its ``trace`` as ``TransitionRecord.to_dict()`` dicts (``event_from_dict`` gives them so)."""
    trace = getattr(result, "trace", None)
    return serialize_value(
        {k: [r.to_dict() for r in trace] if trace is not None and v is trace else v for k, v in result.items()}
    )


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else convert(value)


#: The fields of each kind that ``serialize_value`` does not take as they are: how each becomes data, and back.
_AS_DATA: dict[str, dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {
    "run_ended": {"result": (_optional(_result_to_data), deserialize_value)},
    "paused": {"snapshot": (lambda s: s.to_dict(), AgentSnapshot.from_dict)},
}


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """The event ``to_dict`` gave ``data`` for (its ``kind`` says which).

    Raises:
        DeserializationError: ``data`` names no known kind, or lacks the kind's fields.
    """
    return _from_data(data, {})


#: What a snapshot store leaves out of the events it keeps (``stored_dict``): it holds them already,
#: as the run's snapshots.
_LEFT_OUT_WHEN_STORED = {"run_ended": frozenset({"result"}), "paused": frozenset({"snapshot"})}


def stored_dict(event: Event) -> dict[str, Any]:
    """``event.to_dict()`` as a snapshot store keeps it (``record_events=True``); ``event_from_stored`` inverts it.

    What the store holds already is left out: a ``run_ended`` event's ``result`` (the run's last
    snapshot holds its conversation and State) and a ``paused`` event's ``snapshot`` (stored as the
    run's snapshot number ``seq``). A paused run whose snapshot no store holds (``seq`` is ``None``:
    ``run(on_event=store.record_event)`` on an agent without that store) keeps its snapshot here.
    """
    if isinstance(event, RunPaused) and event.seq is None:
        return event._as_data(frozenset())
    return event._as_data(_LEFT_OUT_WHEN_STORED.get(event.kind, frozenset()))


def event_from_stored(data: Mapping[str, Any], snapshot: AgentSnapshot | None = None) -> Event:
    """The event ``stored_dict`` gave ``data`` for: a ``run_ended`` event's ``result`` is ``None``, a ``paused`` one's ``snapshot`` is ``snapshot``.

    Raises:
        DeserializationError: ``data`` names no known kind or lacks the kind's fields, or it is a
            ``paused`` event and no ``snapshot`` is given.
    """
    from agentfsm.errors import DeserializationError

    given: dict[str, Any] = {}
    if data.get("kind") == "run_ended":
        given["result"] = None
    elif data.get("kind") == "paused" and "snapshot" not in data:  # a stored snapshot's seq instead
        if snapshot is None:
            raise DeserializationError("A stored 'paused' event is read back with the snapshot it paused with.")
        given["snapshot"] = snapshot
    return _from_data(data, given)


def _from_data(data: Mapping[str, Any], given: dict[str, Any]) -> Event:
    """The event of ``data``'s kind; the fields in ``given`` are taken as they are, not read from ``data``."""
    from agentfsm.errors import DeserializationError

    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise DeserializationError(f"Unknown event kind {data.get('kind')!r}; known kinds: {sorted(_KINDS)}.")
    special = _AS_DATA.get(cls.kind, {})
    values = deserialize_value({k: v for k, v in data.items() if k != "kind" and k not in special and k not in given})
    values.update({k: from_data(data[k]) for k, (_, from_data) in special.items() if k in data and k not in given})
    values.update(given)
    types = _FIELD_TYPES[cls.kind]
    missing = [name for name in types if name not in values]
    if missing:
        raise DeserializationError(f"A {cls.kind!r} event needs the fields {missing}.")
    for name, tp in types.items():  # as it is: a step of "1" or a usage of [] is refused, not converted
        if not is_of_type(values[name], tp):
            raise DeserializationError(
                f"A {cls.kind!r} event's {name!r} is not of its type {type_name(tp)}: got {type(values[name]).__name__}."
            )
    return cls(**{name: values[name] for name in types})  # type: ignore[return-value]
