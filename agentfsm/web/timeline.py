"""A run's timeline, as data: each edge with its clock time, and per step what happened and what changed.

Built from what the store holds. The run's newest snapshot has its whole trace and conversation;
its earlier snapshots say when each was taken, what State held, which decisions were given and
where the run paused; a store that keeps events (``EventStore``) adds the clock time of each edge,
the model's usage and latency, how long each tool ran, and the hooks that fired. A run without
events gets the same timeline from its snapshots, its clock times estimated from the trace's
durations between two snapshots. ``pages`` renders it; every value from the run is escaped there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import PHASE_WORK
from agentfsm.machine import Phase
from agentfsm.pauses import AwaitingDecision, BreakpointHit, Cancelled, OutcomeUnknown

if TYPE_CHECKING:
    from agentfsm.events import Event
    from agentfsm.snapshot import AgentSnapshot

#: Each hook point by the phase whose work it is (a hook firing is shown under that phase).
_PHASE_OF_POINT = {work.value: phase.value for phase, works in PHASE_WORK.items() for work in works}


@dataclass(frozen=True, slots=True)
class Edge:
    """One edge the run took: its place in the trace, when (epoch seconds), and how long the phase it left lasted."""

    index: int
    step: int
    source: str
    dest: str
    trigger: str
    duration_us: float
    at: float | None
    #: ``at`` is the previous edge's time plus this one's duration (no snapshot or event was taken here).
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class ModelCall:
    """The model call of a step: what it replied, how long it took, and what it used (from its events)."""

    reply: str
    tool_calls: int
    latency_us: float | None
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool call a step's reply made: its arguments and, once it ran (or was rejected), its result."""

    call_id: str
    tool: str
    arguments: Any
    result: Any = None
    finished: bool = False
    error: bool = False
    #: The arguments it ran with, when a decision changed them.
    ran_with: Any = None
    duration_us: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision given for a call: approved, rejected or modified, with its feedback, when it was first recorded."""

    call_id: str
    tool: str
    verb: str
    arguments: Any
    feedback: str | None
    at: float | None


@dataclass(frozen=True, slots=True)
class Marker:
    """A moment of the run that is no edge of its own: it paused, resumed, ended, failed, or a hook fired."""

    kind: str
    text: str
    at: float | None
    phase: str


@dataclass(frozen=True, slots=True)
class StateChange:
    """What a step changed in State: keys added, changed (old, new) and removed, and how many messages it appended."""

    added: dict[str, Any]
    changed: dict[str, tuple[Any, Any]]
    removed: list[str]
    messages: int
    #: The step this is compared with (the previous step with a snapshot).
    since: int

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.messages)


@dataclass(slots=True)
class Step:
    """Everything of one step (one model call and what follows it; step 0: the run's start)."""

    number: int
    edges: list[Edge] = field(default_factory=list)
    models: list[ModelCall] = field(default_factory=list)
    tools: list[ToolRun] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    state: StateChange | None = None

    @property
    def at(self) -> float | None:
        """When the step's first edge was taken."""
        return next((e.at for e in self.edges if e.at is not None), None)

    @property
    def phases(self) -> set[str]:
        """The phases the step's entries belong to (what a phase filter matches)."""
        found = {p for e in self.edges for p in (e.source, e.dest)} | {m.phase for m in self.markers}
        found |= {Phase.LLM_CALL.value} if self.models else set()
        found |= {Phase.TOOL_RUN.value} if self.tools else set()
        return found | ({Phase.CONFIRM.value} if self.decisions else set())


def epoch(iso: str) -> float | None:
    """An ISO timestamp (a snapshot's ``created_at``) as epoch seconds; ``None`` when it is not one."""
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def timeline(snapshots: list[AgentSnapshot], events: list[Event]) -> list[Step]:
    """The run's steps, from its snapshots (oldest first, its newest last) and its stored events (maybe none)."""
    latest = snapshots[-1]
    steps: dict[int, Step] = {}

    def step(number: int) -> Step:
        return steps.setdefault(number, Step(number))

    edges = _edges(snapshots, events)
    for edge in edges:
        step(edge.step).edges.append(edge)
    by_kind: dict[str, list[Any]] = {}
    for event in events:
        by_kind.setdefault(event.kind, []).append(event)
    _conversation(latest, edges, by_kind, step)
    _decisions(snapshots, by_kind, step)
    _markers(snapshots, edges, by_kind, step)
    _state_changes(snapshots, step)
    return [steps[n] for n in sorted(steps)]


def _edges(snapshots: list[AgentSnapshot], events: list[Event]) -> list[Edge]:
    """The newest snapshot's trace, each edge timed by its event, else by the first snapshot taken after it."""
    trace = snapshots[-1].trace
    times: dict[int, float] = {}
    moves = [e for e in events if e.kind == "transition"]
    at = 0
    for index, record in enumerate(trace):
        wanted = (record["step"], record["source"].value, record["dest"].value, record["trigger"])
        for k in range(at, min(at + 8, len(moves))):  # events of edges the trace lacks are skipped, not matched
            move: Any = moves[k]
            if (move.step, move.source, move.dest, move.trigger) == wanted:
                times[index], at = move.at, k + 1
                break
    taken: dict[int, float] = {}
    for snapshot in snapshots:  # taken after its trace's last edge: the first one taken is the nearest
        index, when = len(snapshot.trace) - 1, epoch(snapshot.created_at)
        if index >= 0 and when is not None:
            taken[index] = min(taken.get(index, when), when)
    for index, when in taken.items():
        times.setdefault(index, when)
    made: list[Edge] = []
    for index, record in enumerate(trace):
        when, estimated = times.get(index), False
        if when is None and made and made[-1].at is not None:
            when, estimated = made[-1].at + record["duration_us"] / 1e6, True
        made.append(
            Edge(
                index,
                record["step"],
                record["source"].value,
                record["dest"].value,
                record["trigger"],
                record["duration_us"],
                when,
                estimated,
            )
        )
    return made


def _conversation(latest: AgentSnapshot, edges: list[Edge], by_kind: dict[str, list[Any]], step: Any) -> None:
    """Each reply as the model call of its step (the n-th reply is step n's), its tool calls, and their results."""
    latency = {
        e.step: e.duration_us for e in edges if e.source == Phase.LLM_CALL.value and e.dest != Phase.PAUSED.value
    }
    ended = {e.step: e for e in by_kind.get("model_ended", [])}
    failed = {e.step: e for e in by_kind.get("model_failed", [])}
    durations = {e.call_id or e.call: e.duration_us for e in by_kind.get("tool_ended", [])}
    results: dict[str, dict[str, Any]] = {}
    for message in latest.messages:
        for part in message.get("content") or []:
            if isinstance(part, dict) and isinstance(part.get("tool_call_result"), dict):
                outcome = part["tool_call_result"]
                origin = outcome.get("origin") or {}
                results[str(origin.get("id"))] = outcome
    number = 0
    for message in latest.messages:
        if message.get("role") != "assistant":
            continue
        number += 1
        parts = [p for p in message.get("content") or [] if isinstance(p, dict)]
        calls = [p["tool_call"] for p in parts if isinstance(p.get("tool_call"), dict)]
        texts = [str(p["text"]) for p in parts if "text" in p]
        done = ended.get(number)
        step(number).models.append(
            ModelCall(
                "\n".join(texts),
                len(calls),
                done.duration_us if done is not None else latency.get(number),
                dict(done.usage) if done is not None else {},
                done.model if done is not None else None,
            )
        )
        for call in calls:
            call_id = str(call.get("id"))
            outcome = results.get(call_id)
            ran_with = None
            if outcome is not None and (outcome.get("origin") or {}).get("arguments") != call.get("arguments"):
                ran_with = (outcome.get("origin") or {}).get("arguments")
            step(number).tools.append(
                ToolRun(
                    call_id,
                    str(call.get("tool_name")),
                    call.get("arguments"),
                    outcome.get("result") if outcome is not None else None,
                    outcome is not None,
                    bool(outcome.get("error")) if outcome is not None else False,
                    ran_with,
                    durations.get(call_id),
                )
            )
    for number, failure in failed.items():
        latency_us = failure.duration_us
        step(number).models.append(ModelCall("", 0, latency_us, model=failure.model, error=failure.error))


def _decisions(snapshots: list[AgentSnapshot], by_kind: dict[str, list[Any]], step: Any) -> None:
    """Each decision once, in the step it was taken in, timed by its event or by the first snapshot that holds it."""
    proposed = {
        str(part["tool_call"].get("id")): part["tool_call"].get("arguments")
        for snapshot in (snapshots[-1],)
        for message in snapshot.messages
        for part in message.get("content") or []
        if isinstance(part, dict) and isinstance(part.get("tool_call"), dict)
    }
    taken_at = {(e.step, e.call): e.at for e in by_kind.get("decision", [])}
    seen: set[tuple[Any, Any]] = set()
    for snapshot in snapshots:
        for given in snapshot.decisions:
            key = (given.get("step", snapshot.step), given.get("tool_call_id"))
            if key in seen:
                continue
            seen.add(key)
            params = given.get("final_tool_params")
            call_id = str(given.get("tool_call_id"))
            if not given.get("execute"):
                verb = "rejected"
            elif params is not None and params != proposed.get(call_id):
                verb = "modified"
            else:
                verb = "approved"
            when = taken_at.get((key[0], call_id), epoch(snapshot.created_at))
            step(key[0]).decisions.append(
                Decision(call_id, str(given.get("tool_name")), verb, params, given.get("feedback"), when)
            )


def _markers(snapshots: list[AgentSnapshot], edges: list[Edge], by_kind: dict[str, list[Any]], step: Any) -> None:
    """Pauses (from their snapshots), resumes (their edges), hooks (their events), and how the run ended."""
    paused_at: set[str] = set()
    for snapshot in snapshots:
        pause = snapshot.pause
        if pause is None or snapshot.created_at in paused_at:
            continue
        paused_at.add(snapshot.created_at)
        step(snapshot.step).markers.append(
            Marker("paused", pause_text(pause), epoch(snapshot.created_at), Phase.PAUSED.value)
        )
    for edge in edges:
        if edge.source == Phase.PAUSED.value:
            step(edge.step).markers.append(Marker("resumed", f"resumed into {edge.dest}", edge.at, Phase.PAUSED.value))
    for hook in by_kind.get("hook", []):
        text = f"hook {hook.hook} at {hook.point}" + (f" failed: {hook.error}" if hook.error else "")
        phase = _PHASE_OF_POINT.get(hook.point, "")
        step(hook.step).markers.append(Marker("hook" if not hook.error else "failed", text, hook.at, phase))
    latest = snapshots[-1]
    if edges and edges[-1].dest == Phase.DONE.value:
        text = f"ended in DONE: {latest.exit_reason}" if latest.exit_reason else "ended in DONE"
        step(edges[-1].step).markers.append(Marker("ended", text, edges[-1].at, Phase.DONE.value))
    elif edges and edges[-1].dest == Phase.FAILED.value:
        text = f"failed in {edges[-1].source}: {latest.exit_reason or 'no error was recorded'}"
        step(edges[-1].step).markers.append(Marker("failed", text, edges[-1].at, Phase.FAILED.value))


def pause_text(pause: Any) -> str:
    """Why a run paused, in words."""
    if isinstance(pause, AwaitingDecision):
        return f"paused: waiting for a decision on {', '.join(pause.waiting)}"
    if isinstance(pause, OutcomeUnknown):
        return f"paused: calls in doubt after a crash: {', '.join(pause.tool_call_ids)}"
    if isinstance(pause, Cancelled):
        return "paused: cancelled"
    if isinstance(pause, BreakpointHit):
        return "paused at a breakpoint"
    return f"paused ({pause.kind})"


def _state_changes(snapshots: list[AgentSnapshot], step: Any) -> None:
    """Per step with a snapshot: its State against the previous such step's, each step's newest snapshot."""
    last: dict[int, AgentSnapshot] = {}
    for snapshot in snapshots:
        last[snapshot.step] = snapshot
    before: AgentSnapshot | None = None
    for number in sorted(last):
        now = last[number]
        old = before.state if before is not None else {}
        change = StateChange(
            added={k: v for k, v in now.state.items() if k not in old},
            changed={k: (old[k], v) for k, v in now.state.items() if k in old and old[k] != v},
            removed=[k for k in old if k not in now.state],
            messages=len(now.messages) - (len(before.messages) if before is not None else 0),
            since=before.step if before is not None else -1,
        )
        if change:
            step(number).state = change
        before = now
