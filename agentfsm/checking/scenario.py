"""A path through the world as data a person can read, paste into a test and replay.

``Scenario`` is the answers a path gave: the model's replies by step (a ``ScriptedChatGenerator``
script), each tool call's outcome, each decision, which hook alternative acted, and where the
process died or the run paused. ``execute`` runs an agent through one scenario.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfsm._core.drivers import drive_sync
from agentfsm._core.runtime import AgentRun
from agentfsm.agent import Agent, RunRequest
from agentfsm.breakpoints import Breakpoint
from agentfsm.checking.record import Decision, RecordedRun, Segment
from agentfsm.checking.stretches import Mark, Stretch, Stretches
from agentfsm.checking.world import (
    CALL_QUESTIONS,
    RESUME_DECISION,
    Bounds,
    Key,
    Killed,
    PathCut,
    World,
    WorldSlot,
    WorldStore,
    build_agent,
    fitting_answer,
    survived,
)
from agentfsm.decisions import ToolExecutionDecision
from agentfsm.errors import AnswerError, BreakpointException, SnapshotError
from agentfsm.events import Event, ModelFailed
from agentfsm.machine import Phase
from agentfsm.messages import ChatMessage
from agentfsm.pauses import AwaitingDecision, AwaitingInput, BreakpointHit, OutcomeUnknown
from agentfsm.snapshot import AgentSnapshot
from agentfsm.tools.tool import Tool
from agentfsm.workers import CallThread

#: The most segments (start, resumes) one path may have before it is cut.
MAX_SEGMENTS = 12
#: Triggers that differ between a run and the same run interrupted and resumed (a call in doubt,
#: waited for or settled by its tool's reconcile function).
_INTERRUPTION_EDGES = frozenset({"pause", "resume", "in_doubt", "reconciled"})


@dataclass(frozen=True, slots=True)
class Scenario:
    """One path: what the world answered at each question, and where the run was interrupted.

    Keys of the mappings are ``"<step>/<call id>"`` for calls and ``"<point>@<step>"`` for hooks.
    ``script`` holds the model's reply at each step (an exception: the model call failed).
    """

    script: list[ChatMessage | Exception] = field(default_factory=list)
    #: ``returns`` (the default) or ``raises``, per call.
    tool_outcomes: dict[str, str] = field(default_factory=dict)
    #: ``approve`` (the default), ``reject``, ``modify`` or ``defer``, per call a strategy covers.
    decisions: dict[str, str] = field(default_factory=dict)
    #: ``approve`` (the default), ``reject`` or ``modify``, per deferred call when the run resumes.
    resume_decisions: dict[str, str] = field(default_factory=dict)
    #: ``rerun`` (the default) or ``settle``, per call in doubt after the crash.
    in_doubt: dict[str, str] = field(default_factory=dict)
    #: ``pass`` (the default), ``rewrite`` or ``tripwire``, per guardrail and what it was shown
    #: (``"<step>/<point>:<guardrail>"``, and ``:<call id>`` for a call's, ``#<digest>`` of a call's arguments).
    guardrails: dict[str, str] = field(default_factory=dict)
    #: ``truthful`` (the default: what the world saw), ``unknown`` or ``raises``: what a tool's reconcile
    #: function answers, per call in doubt after the crash.
    reconciles: dict[str, str] = field(default_factory=dict)
    #: ``valid`` (the default) or ``invalid`` (first an answer that breaks the schema), per question a
    #: tool or a hook asked, keyed ``"<step>/<question id>"``.
    input_answers: dict[str, str] = field(default_factory=dict)
    #: Which of the hook alternatives acted (an index), per hook point and step.
    hook_choices: dict[str, int] = field(default_factory=dict)
    #: The process is killed before this write (counted from 0) to the store, then resumed from it.
    crash_at: int | None = None
    #: A breakpoint pauses the run here (phase, step), and it is resumed from the snapshot.
    pause_at: tuple[str, int] | None = None
    #: The exploration's ``max_steps`` when the path was found: a path cut at that bound is cut at
    #: the same place when replayed.
    max_steps: int | None = None

    @classmethod
    def from_answers(
        cls,
        answers: Mapping[Key, Any],
        crash_at: int | None = None,
        pause_at: tuple[str, int] | None = None,
        max_steps: int | None = None,
    ) -> Scenario:
        """The scenario of a world's answers."""
        scenario = cls(crash_at=crash_at, pause_at=pause_at, max_steps=max_steps)
        steps = sorted(key[1] for key in answers if key[0] == "model")
        replies = {key[1]: value for key, value in answers.items() if key[0] == "model"}
        scenario.script.extend(replies[s] for s in steps)
        by_prefix = {question.prefix: question for question in CALL_QUESTIONS}
        for key, value in answers.items():
            question = by_prefix.get(key[0])
            if question is not None:
                if value != question.default:
                    getattr(scenario, question.field)[f"{key[1]}/{key[2]}"] = value
            elif key[0] == "hook" and value != 0:
                scenario.hook_choices[f"{key[1]}@{key[2]}"] = value
        return scenario

    def answers(self) -> dict[Key, Any]:
        """The world's answers for this scenario (questions it does not name get their first option)."""
        answers: dict[Key, Any] = {("model", i + 1): reply for i, reply in enumerate(self.script)}
        for question in CALL_QUESTIONS:
            for where, value in getattr(self, question.field).items():
                step, call = where.split("/", 1)
                answers[question.key(int(step), call)] = value
        for where, index in self.hook_choices.items():
            point, step = where.rsplit("@", 1)
            answers[("hook", point, int(step))] = index
        return answers

    @property
    def interrupted(self) -> bool:
        """The path is interrupted: by a crash or a breakpoint."""
        return self.crash_at is not None or self.pause_at is not None


@dataclass(slots=True)
class Subject:
    """What is checked: the agent, the conversation it is started with, and the world's bounds.

    The checked copy of the agent and its store are built once; each path puts its world in ``slot``
    and starts from an empty store.
    """

    agent: Agent
    messages: list[ChatMessage]
    state: dict[str, Any]
    bounds: Bounds
    tools: list[Tool]
    hooked: dict[str, int]
    #: The world's model replies by step, built once for every path.
    menus: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    slot: WorldSlot = field(default_factory=WorldSlot)
    store: WorldStore | None = None
    checked: Agent | None = None
    #: Where the checked agent's tools run their own functions.
    thread: CallThread = field(default_factory=lambda: CallThread("agentfsm-checked-tools"))

    def prepared(self, world: World) -> Agent:
        """The checked agent and an empty store, with ``world`` answering."""
        self.slot.world = world
        if self.store is None or self.checked is None:
            self.store = WorldStore(self.slot)
            self.checked = build_agent(
                self.agent,
                self.slot,
                self.store,
                self.bounds.hook_choices,
                self.bounds.tool_timeout,
                thread=self.thread,
            )
        else:
            self.store.empty()
        return self.checked

    def close(self) -> None:
        """Close the store, and end the tools' thread."""
        self.thread.close()
        if self.store is not None:
            self.store.close()
            self.store = self.checked = None

    @classmethod
    def of(
        cls, agent: Agent, messages: Sequence[ChatMessage] | None, state: Mapping[str, Any] | None, bounds: Bounds
    ) -> Subject:
        """The subject for ``agent`` (a user message ``"hi"`` when no messages are given)."""
        hooked = {point.value: len(hooks) for point, hooks in agent._hooks.items()}
        for point in bounds.hook_choices:
            hooked[point] = hooked.get(point, 0) + 1
        return cls(
            agent,
            list(messages) if messages is not None else [ChatMessage.from_user("hi")],
            dict(state or {}),
            bounds,
            agent.known_tools(),
            hooked,
        )


def comparable(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result without what legitimately differs after an interruption (timings, pause/resume/in-doubt edges)."""
    trace = [(r.step, r.source.value, r.dest.value, r.trigger) for r in result["trace"]]
    kept = [r for r in trace if r[3] not in _INTERRUPTION_EDGES]
    return {"ending": "DONE", **{k: v for k, v in result.items() if k != "trace"}, "trace": kept}


def comparable_ending(record: RecordedRun, run: AgentRun) -> dict[str, Any]:
    """A run that ended FAILED or PAUSED, as far as it compares: ending, error type, step, conversation.

    There is no result to compare; an error's message and State's timings may rightly differ.
    """
    return {
        "ending": record.ending,
        "error": None if record.error is None else type(record.error).__name__,
        "step": run.step,
        "messages": list(run.state.data.get("messages") or []),
    }


def execute(
    subject: Subject,
    answers: Mapping[Key, Any],
    *,
    crash_at: int | None = None,
    pause_at: tuple[str, int] | None = None,
    fingerprints: bool = True,
    choose: Any = None,
    remains: bool = False,
) -> World:
    """Run the subject's agent along ``answers`` (killed before write ``crash_at``, paused at ``pause_at``).

    Returns the world, holding the questions asked and the ``RecordedRun``; with ``remains``, also
    what a kill before each write of the first segment would leave (``after_crash`` goes on from it).
    """
    world = _world(subject, answers, crash_at, fingerprints, choose)
    world.keeps_remains = remains
    agent = subject.prepared(world)
    _go_on(subject, world, agent, _first_request(subject, pause_at), "start")
    return world


def after_crash(
    subject: Subject, base: World, crash_at: int, answers: Mapping[Key, Any], resumed: Stretches | None = None
) -> World:
    """The path of ``base`` killed before write ``crash_at`` to its store, then resumed from what the store committed.

    The first segment is not run again: it is what ``base`` (executed with ``remains``) recorded up
    to that write, with the store as it was committed then. The world is the one ``execute`` with
    ``crash_at`` gives: the same questions, records and answers (``answers``: the path's, and the
    ones only the resumed run asks). ``resumed``: the runs resumed so far, by the store they were
    resumed from; a kill that leaves the store as an earlier one did is resumed as it was.
    """
    remains = base.remains[crash_at]
    world = _world(subject, answers, crash_at, False, None)
    world.record = remains.record(base.record)
    world.results = dict(remains.results)
    world.asked = [(dataclasses.replace(asked, fixed=True), answer) for asked, answer in base.asked[: remains.asked]]
    world.segment = 1
    known = resumed.find(remains.store, world.answers) if resumed is not None else None
    if known is not None:
        known.continue_in(world)
        return world
    agent = subject.prepared(world)
    store = subject.store
    assert store is not None
    store.reopen(remains.store)
    mark = Mark.of(world)
    request, started = _resumed_after_crash(subject, store, remains.run_id)
    _go_on(subject, world, agent, request, started)
    if resumed is not None:
        resumed.add(remains.store, Stretch.since(mark, world))
    return world


def paused_at(subject: Subject, answers: Mapping[Key, Any], pause_at: tuple[str, int], first: Stretches) -> World:
    """``execute`` with ``pause_at``; a first segment that a path with the same answers ran before is not run again.

    ``first``: the first segments run so far, by where they paused.
    """
    world = _world(subject, answers, None, False, None)
    agent = subject.prepared(world)
    store = subject.store
    assert store is not None
    known = first.find(pause_at, world.answers)
    if known is not None:
        assert known.then is not None
        known.continue_in(world)
        request, started, image = known.then
        store.reopen(image)
        _go_on(subject, world, agent, request, started)
        return world
    mark = Mark.of(world)
    again, started = _segment(subject, world, agent, _first_request(subject, pause_at), "start")
    if again is not None:  # paused: the rest is the path's own
        first.add(pause_at, Stretch.since(mark, world, (again, started, store.image())))
    _go_on(subject, world, agent, again, started)
    return world


def _first_request(subject: Subject, pause_at: tuple[str, int] | None) -> RunRequest:
    """The request a path starts with: the subject's conversation and State, and a breakpoint at ``pause_at``."""
    break_point = Breakpoint(phase=Phase(pause_at[0]), step=pause_at[1]) if pause_at is not None else None
    return RunRequest(messages=list(subject.messages), state=dict(subject.state), break_point=break_point)


def _world(
    subject: Subject, answers: Mapping[Key, Any], crash_at: int | None, fingerprints: bool, choose: Any
) -> World:
    world = World(subject.bounds, subject.tools, dict(answers), crash_at=crash_at, fingerprints=fingerprints)
    world.choose = choose
    world.menus = subject.menus
    world.fitting_answer = fitting_answer(subject.agent)
    world.record.hooked = subject.hooked
    world.record.guarded = tuple(subject.agent._guardrails)
    world.record.max_agent_steps = subject.agent.max_agent_steps
    return world


def _go_on(subject: Subject, world: World, agent: Agent, request: RunRequest | None, started: str) -> None:
    """Run the segments of the path from ``request`` on, until the run ends, stays paused, or is cut."""
    try:
        while request is not None:
            if len(world.record.segments) >= MAX_SEGMENTS:
                world.record.ending = "cut"
                break
            request, started = _segment(subject, world, agent, request, started)
        if world.record.ending in ("FAILED", "PAUSED") and world.run is not None:
            world.record.comparable = comparable_ending(world.record, world.run)
    finally:
        if world.run is not None:
            world.record.state = dict(world.run.state.data)
        world.dead = False


def _segment(
    subject: Subject, world: World, agent: Agent, request: RunRequest, started: str
) -> tuple[RunRequest | None, str]:
    """Run one segment (a process's stretch of the run); the request that continues it, if any.

    A resumed segment is a new process: it knows only what the store committed (the checked agent
    holds nothing of a run, so the same one serves).
    """
    record = world.record
    store = subject.store
    assert store is not None
    events: list[Event] = []
    world.events = events
    try:
        run = agent.new_run(dataclasses.replace(request, on_event=events.append))
    except Exception as exc:  # a resume refused: the run cannot go on
        record.segments.append(Segment(started, [], "FAILED"))
        record.ending, record.error = "FAILED", exc
        return None, started
    world.run = run
    ended, outcome = _drive(agent, run, world)
    trace = survived(run.trace) if ended in ("crashed", "cut") else list(run.trace)
    if ended == "crashed":
        del events[world.events_at_death :]  # a killed process tells nothing after its death
    if ended == "cut":
        events = events[: next((i for i, e in enumerate(events) if isinstance(e, ModelFailed)), len(events))]
    record.segments.append(Segment(started, trace, ended, events))
    world.segment += 1
    if ended == "crashed":
        store.revive()
        return _resumed_after_crash(subject, store, run.run_id)
    if ended == "PAUSED":
        assert isinstance(outcome, AgentSnapshot)
        snapshot = AgentSnapshot.from_bytes(outcome.to_bytes())
        decisions = _decisions(world, snapshot)
        if isinstance(snapshot.pause, AwaitingInput):
            decisions = _answers(world, agent, snapshot)
        if decisions is None:  # paused for good (nothing the world decides)
            record.ending = "PAUSED"
            return None, started
        return RunRequest(snapshot=snapshot, decisions=decisions), "resume after pause"
    record.ending = ended
    if ended == "DONE":
        assert isinstance(outcome, dict)
        record.result = outcome
        record.comparable = comparable(outcome)
    elif ended == "FAILED":
        record.error = outcome
    return None, started


def _resumed_after_crash(subject: Subject, store: WorldStore, run_id: str) -> tuple[RunRequest, str]:
    """The request a new process continues a killed run with: from the store's latest snapshot, or from the start."""
    try:
        stored = store.latest(run_id)
    except SnapshotError:  # nothing was committed: the run starts again
        return RunRequest(messages=list(subject.messages), state=dict(subject.state)), "restart"
    return RunRequest(snapshot=stored, take_over=True), "resume after crash"


def _drive(agent: Agent, run: AgentRun, world: World) -> tuple[str, Any]:
    """Drive ``run`` as ``Agent.run`` does; how it stopped, and its result, snapshot or error."""
    try:
        return "DONE", drive_sync(run, agent.chat_generator, agent.streaming_callback, agent._save_pause)
    except Killed:
        return "crashed", None
    except PathCut as exc:
        return "cut", exc
    except BreakpointException as exc:
        return "PAUSED", exc.snapshot
    except Exception as exc:
        return "FAILED", exc
    finally:
        if not world.dead:
            agent._release(run)


def _answers(world: World, agent: Agent, snapshot: AgentSnapshot) -> list[Any]:
    """The world's answers to the questions a paused run asks; an unfitting one is tried first where the path says.

    A resume with an answer that breaks its schema must be refused before anything runs: one that
    is taken is recorded (``invalid answer taken``), and the fitting answers are given all the same.
    """
    fitting, unfitting = world.input_answers(snapshot.step, snapshot.awaited_answers())
    if unfitting:
        try:
            bad = {a.question_id: a for a in unfitting}
            refused = agent.new_run(
                RunRequest(snapshot=snapshot, decisions=[bad.get(a.question_id, a) for a in fitting])
            )
        except AnswerError:
            pass
        else:
            agent._release(refused)
            for a in unfitting:
                world.record.decisions.append(
                    Decision(
                        snapshot.step, a.question_id, "", "invalid answer taken", {"answer": a.answer}, world.segment
                    )
                )
    # Answers name their questions: a person's may come in any order, so give them backwards.
    return fitting[::-1]


def _decisions(world: World, snapshot: AgentSnapshot) -> list[ToolExecutionDecision] | None:
    """The world's decisions for a paused run, or ``None`` when it stays paused; ``[]`` after a breakpoint."""
    pause = snapshot.pause
    calls = snapshot.pending_calls_by_key()
    if isinstance(pause, OutcomeUnknown):
        return [world.in_doubt(snapshot.step, key, name) for key, name in snapshot.outcome_unknown_calls().items()]
    if isinstance(pause, AwaitingDecision):
        by_name = {t.name: t for t in world.tools}
        decisions = []
        for key in pause.waiting:
            call = calls[key]
            name = call["tool_name"]
            decided = world.decide(by_name.get(name), name, dict(call["arguments"]), key, RESUME_DECISION)
            decisions.append(decided)
        # Decisions name their calls: a person's answers may come in any order, so give them backwards.
        return decisions[::-1]
    if isinstance(pause, BreakpointHit):
        return []
    return None
