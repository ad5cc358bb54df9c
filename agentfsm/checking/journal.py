"""The journal check: a store's (or DBOS's) record of runs against what their tools did outside them.

Durable engines are tested by asserting invariants of the whole system after faults, not a
scripted outcome. ``check_journal`` does that for agentfsm's runs: it reads every run a store keeps
(``SnapshotStore``, or ``agentfsm.durable.DurableRuns`` for DBOS: ``runs``, ``history``, ``load``)
and an effect log kept by the test's tools (``EffectLog``: one ``Effect`` per time a tool did its
work, named by the call's idempotency key), and checks the rules of ``RULES``:

- a call of a tool that is not idempotent had its effect at most once, and once more for each
  decision that ran it again after a crash (``effect_repeated``);
- a call has one result recorded, whatever the number of times an idempotent tool ran
  (``results_differ``);
- every call is done, failed, rejected or surfaced in doubt: a call whose effect happened has its
  result in the record or is listed as started (in doubt once resumed) (``call_dropped``); a
  finished run answered every call (``call_unanswered``); an effect names a call of a run the
  store keeps (``effect_unknown``);
- every decision names a call of its step, for that call's tool and arguments, once
  (``decision_unbound``, ``decision_repeated``), and was applied: a rejected call never ran, a
  call settled from outside did not run again (``decision_ignored``);
- a run's snapshots are one timeline: each one's trace is the one before it, extended
  (``timeline_forked``), and none is missing: their numbers follow one another, so a write the
  store reported as made, and then lost, shows even when the later snapshots agree (``timeline_gap``);
  with ``finished=True``, no run is left active (``left_active``).

A call is known by its idempotency key (``agentfsm.tools.tool.idempotency_key``: the run id, the
step and the call's key), the one a tool taking an ``idempotency_key`` parameter is given: record
that key with each effect.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentfsm.decisions import call_fingerprint
from agentfsm.errors import AgentCheckFailed, SnapshotError
from agentfsm.machine import ACTIVE_PHASES, Phase
from agentfsm.messages import ChatMessage
from agentfsm.pauses import OutcomeUnknown, RunStatus
from agentfsm.serialization import dump_json, load_json
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores.base import RunInfo, SnapshotInfo
from agentfsm.tools.tool import idempotency_key

#: The rules ``check_journal`` checks, by name.
RULES: dict[str, str] = {
    "effect_repeated": "a call of a tool that is not idempotent had its effect more than once, unasked",
    "results_differ": "a call has more than one result recorded",
    "call_dropped": "a call's effect happened, and the record neither has its result nor lists it as started",
    "call_unanswered": "a run that is done has a call with no result",
    "effect_unknown": "an effect names no call of any run the store keeps",
    "decision_unbound": "a decision names no call of its step, or another tool, or other arguments",
    "decision_repeated": "a call was decided twice",
    "decision_ignored": "a decision was not applied: a rejected call ran, or a settled call ran again",
    "timeline_forked": "a run's snapshots are not one timeline (a trace is not the one before it, extended)",
    "timeline_gap": "a run's snapshots skip a number: a write the store said it made is not there",
    "left_active": "a run is still active when every run should have ended",
}


@dataclass(frozen=True, slots=True)
class Effect:
    """One time a tool did its work outside the run: its call's idempotency key, its tool, and what it returned."""

    key: str
    tool_name: str
    result: Any = None


class EffectLog:
    """An append-only file of effects, one JSON line each, that any process's tools add to.

    Each ``record`` is one ``write`` to a file opened for appending, so lines from processes
    writing at once never mix (POSIX appends are atomic for a line this small).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def record(self, key: str, tool_name: str, result: Any = None) -> None:
        """Add the effect of the call with idempotency key ``key``."""
        line = dump_json({"key": key, "tool_name": tool_name, "result": result}) + b"\n"
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)

    def effects(self) -> list[Effect]:
        """Every effect recorded so far, oldest first (a line being written is not one yet)."""
        try:
            lines = self.path.read_bytes().split(b"\n")[:-1]
        except FileNotFoundError:
            return []
        return [Effect(d["key"], d["tool_name"], d.get("result")) for d in map(load_json, lines)]

    def clear(self) -> None:
        """Forget every effect."""
        self.path.unlink(missing_ok=True)


class RunRecords(Protocol):
    """What the check reads runs from: a ``SnapshotStore``, or ``agentfsm.durable.DurableRuns``."""

    def runs(self) -> list[RunInfo]:
        """Every run."""
        ...

    def history(self, run_id: str) -> list[SnapshotInfo]:
        """A run's snapshots, oldest first."""
        ...

    def load(self, run_id: str, seq: int) -> AgentSnapshot:
        """One snapshot of a run."""
        ...


@dataclass(frozen=True, slots=True)
class JournalProblem:
    """A rule (``RULES``) that a run's record and the effects break, and how."""

    rule: str
    run_id: str
    message: str
    #: The call it is about (``<step>/<call key>``), if any.
    call: str | None = None

    def __str__(self) -> str:
        where = f" {self.call}" if self.call else ""
        return f"{self.rule} (run {self.run_id}{where}): {self.message}"


@dataclass(frozen=True, slots=True)
class JournalReport:
    """What ``check_journal`` read and what it found: counts, and the problems (none when the record holds)."""

    runs: int
    calls: int
    effects: int
    decisions: int
    #: Calls that were surfaced in doubt (decided after a crash, or waiting for that decision).
    in_doubt: int
    problems: tuple[JournalProblem, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every rule holds."""
        return not self.problems

    def text(self) -> str:
        """The counts, then one line per problem."""
        head = (
            f"{self.runs} runs, {self.calls} calls, {self.effects} effects, {self.decisions} decisions, "
            f"{self.in_doubt} in doubt: {len(self.problems) or 'no'} problems"
        )
        return "\n".join([head, *(f"- {p}" for p in self.problems)])

    def raise_for_problems(self) -> None:
        """Raise ``AgentCheckFailed`` (an ``AssertionError``) listing the problems, if any; its ``result`` is this report."""
        if self.problems:
            raise AgentCheckFailed(self.text(), self)


@dataclass(slots=True)
class _Call:
    """One call of a run, as its record shows it."""

    run_id: str
    step: int
    key: str
    tool_name: str
    arguments: dict[str, Any]
    results: list[Any] = field(default_factory=list)
    #: Listed as started and not finished (in doubt once the run resumes), or waiting for a decision in doubt.
    started: bool = False
    in_doubt: bool = False
    #: Decisions taken for it: confirmations, and decisions on it in doubt.
    confirmations: list[dict[str, Any]] = field(default_factory=list)
    doubts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.step}/{self.key}"


def _snapshots(records: RunRecords, run_id: str) -> tuple[list[AgentSnapshot], list[JournalProblem]]:
    """The run's snapshots that can be read, and a ``timeline_gap`` for each number its history skips."""
    found, problems = [], []
    infos = records.history(run_id)
    for before, after in itertools.pairwise(infos):
        if after.seq != before.seq + 1:
            missing = f"{before.seq + 1}" if after.seq == before.seq + 2 else f"{before.seq + 1} to {after.seq - 1}"
            problems.append(
                JournalProblem(
                    "timeline_gap",
                    run_id,
                    f"its snapshots go from {before.seq} ({before.phase.value}, step {before.step}) to {after.seq} "
                    f"({after.phase.value}, step {after.step}): snapshot {missing} is not stored",
                )
            )
    for info in infos:
        try:
            found.append(records.load(run_id, info.seq))
        except SnapshotError:
            continue  # a point the record cannot show (a durable run's, before its first phase)
    return found, problems


def _reopened_trace(snapshot: AgentSnapshot) -> list[Any]:
    """The trace a run resumed from ``snapshot`` starts from (a finished run's record resumes before its last edge)."""
    return list(snapshot.trace[:-1] if snapshot.ended else snapshot.trace)


def _tool_steps(trace: Sequence[Any]) -> list[int]:
    """The step of each reply that proposed calls, in order: the edges from LLM_CALL to TOOL_PENDING."""
    return [r["step"] for r in trace if r["source"] is Phase.LLM_CALL and r["dest"] is Phase.TOOL_PENDING]


def _calls_of(run_id: str, final: AgentSnapshot) -> list[_Call]:
    """The calls of a run's conversation, and of its last step (whose results are not in the conversation yet)."""
    messages = [ChatMessage.from_dict(m) for m in final.messages]
    steps = _tool_steps(final.trace)
    calls: list[_Call] = []
    turn: dict[str, _Call] = {}
    turns = 0
    for message in messages:
        if message.tool_calls:
            step = steps[turns] if turns < len(steps) else -1
            turns += 1
            turn = {}
            for position, c in enumerate(message.tool_calls):
                key = c.id if c.id is not None else f"#{position}"
                turn[key] = _Call(run_id, step, key, c.tool_name, dict(c.arguments))
                calls.append(turn[key])
        for result in message.tool_call_results:
            origin = result.origin
            match = turn.get(origin.id) if origin.id is not None else None
            if match is None:
                match = next(
                    (
                        c
                        for c in turn.values()
                        if (c.tool_name, c.arguments) == (origin.tool_name, dict(origin.arguments))
                    ),
                    None,
                )
            if match is not None:
                match.results.append(result.result)
    where = final.reopened() if final.ended and final.trace and final.trace[-1]["source"] in ACTIVE_PHASES else final
    if where.phase in (Phase.TOOL_PENDING, Phase.CONFIRM, Phase.TOOL_RUN):
        # The last step's calls: their results are in the snapshot until the step's tools are done.
        unknown = set(where.outcome_unknown_calls())
        doubted = isinstance(where.pause, OutcomeUnknown)
        known = {(c.step, c.key): c for c in calls}
        for key, data in where.pending_calls_by_key().items():
            call = known.get((where.step, key))
            if call is None:
                call = _Call(run_id, where.step, key, data["tool_name"], dict(data["arguments"]))
                calls.append(call)
            outcome = where.completed_tool_results.get(key)
            if outcome is not None and not call.results:
                call.results.append(outcome.get("value", outcome.get("error")))
            call.started = key in unknown
            call.in_doubt = doubted and key in unknown
    return calls


def _edges(trace: Sequence[Any]) -> list[tuple[Any, ...]]:
    """A trace's edges, without how long each took (a view derived again measures its own)."""
    return [(r["step"], r["source"], r["dest"], r["trigger"]) for r in trace]


def _timeline(run_id: str, snapshots: Sequence[AgentSnapshot]) -> list[JournalProblem]:
    problems = []
    for before, after in itertools.pairwise(snapshots):
        start, whole, later = _edges(_reopened_trace(before)), _edges(before.trace), _edges(after.trace)
        if later[: len(start)] != start and later[: len(whole)] != whole:
            problems.append(
                JournalProblem(
                    "timeline_forked",
                    run_id,
                    f"snapshot {after.seq} ({after.phase.value}, step {after.step}) does not go on from snapshot "
                    f"{before.seq} ({before.phase.value}, step {before.step}): its trace is not that one's, extended",
                )
            )
    return problems


def _outcomes(run_id: str, snapshots: Sequence[AgentSnapshot]) -> list[JournalProblem]:
    """A call's result, once recorded, never changes in the later snapshots of its step."""
    seen: dict[tuple[int, str], Any] = {}
    problems = []
    for snapshot in snapshots:
        for key, outcome in snapshot.completed_tool_results.items():
            before = seen.setdefault((snapshot.step, key), outcome)
            if before != outcome:
                problems.append(
                    JournalProblem(
                        "results_differ",
                        run_id,
                        f"its result was recorded as {before!r}, then as {outcome!r}",
                        f"{snapshot.step}/{key}",
                    )
                )
                seen[(snapshot.step, key)] = outcome
    return problems


def _decisions(
    run_id: str, snapshots: Sequence[AgentSnapshot], calls: dict[tuple[int, str], _Call]
) -> list[JournalProblem]:
    """Attach each decision the record holds to its call; the problems of one that fits none, or a second one."""
    problems = []
    taken: dict[tuple[int, str, bool], dict[str, Any]] = {}
    for snapshot in snapshots:
        for d in snapshot.decisions:
            step, key, doubt = d.get("step"), d.get("tool_call_id"), bool(d.get("outcome_unknown"))
            if not isinstance(step, int) or not isinstance(key, str):
                problems.append(JournalProblem("decision_unbound", run_id, f"a decision names no call: {d!r}"))
                continue
            before = taken.get((step, key, doubt))
            if before is not None:
                if before != d:
                    problems.append(
                        JournalProblem("decision_repeated", run_id, f"decided {before!r}, then {d!r}", f"{step}/{key}")
                    )
                continue
            taken[(step, key, doubt)] = d
            call = calls.get((step, key))
            if call is None:
                problems.append(
                    JournalProblem("decision_unbound", run_id, "no call of its step has this key", f"{step}/{key}")
                )
                continue
            fingerprint = d.get("call_fingerprint")
            if d.get("tool_name") != call.tool_name or (
                fingerprint is not None
                and not doubt
                and fingerprint != call_fingerprint(call.tool_name, call.arguments)
                and not d.get("final_tool_params")
            ):
                problems.append(
                    JournalProblem(
                        "decision_unbound",
                        run_id,
                        f"the decision was taken for {d.get('tool_name')} (fingerprint {fingerprint}), "
                        f"the call is {call.tool_name}({call.arguments})",
                        call.name,
                    )
                )
            (call.doubts if doubt else call.confirmations).append(d)
    return problems


def check_journal(
    records: RunRecords,
    effects: EffectLog | Iterable[Effect],
    *,
    idempotent: Collection[str] = (),
    run_ids: Collection[str] | None = None,
    finished: bool = False,
) -> JournalReport:
    """Check a store's record of runs against the effects their tools had (see ``RULES``): a ``JournalReport``.

    ``records``: a ``SnapshotStore``, or ``agentfsm.durable.DurableRuns(db, durable_agent)``.
    ``effects``: an ``EffectLog`` (or the effects themselves) the tools recorded, each under its
    call's idempotency key. ``idempotent``: the names of the tools that may run again
    (``@tool(idempotent=True)``). ``run_ids``: the runs to check (default: all; an effect of
    another run is then not reported). ``finished``: every run should have ended (paused, done or
    failed). ``report.raise_for_problems()`` raises ``AgentCheckFailed`` when a rule is broken.
    """
    done = list(effects.effects() if isinstance(effects, EffectLog) else effects)
    infos = [r for r in records.runs() if run_ids is None or r.run_id in run_ids]
    problems: list[JournalProblem] = []
    by_key: dict[str, _Call] = {}
    all_calls: list[_Call] = []
    statuses: dict[str, RunStatus] = {}
    decisions = 0
    for info in infos:
        statuses[info.run_id] = info.status
        if finished and info.status is RunStatus.ACTIVE:
            problems.append(JournalProblem("left_active", info.run_id, f"the run is still active (owner {info.owner})"))
        snapshots, gaps = _snapshots(records, info.run_id)
        problems += gaps
        if not snapshots:
            continue
        problems += _timeline(info.run_id, snapshots)
        problems += _outcomes(info.run_id, snapshots)
        calls = _calls_of(info.run_id, snapshots[-1])
        keyed = {(c.step, c.key): c for c in calls}
        problems += _decisions(info.run_id, snapshots, keyed)
        decisions += sum(len(c.confirmations) + len(c.doubts) for c in calls)
        for c in calls:
            steps = [c.step] if c.step >= 0 else range(snapshots[-1].step + 1)
            for step in steps:
                by_key[idempotency_key(c.run_id, step, c.key)] = c
        all_calls += calls
    counts: dict[int, int] = {}
    for effect in done:
        call = by_key.get(effect.key)
        if call is None:
            if run_ids is None:
                problems.append(
                    JournalProblem(
                        "effect_unknown",
                        "?",
                        f"an effect of {effect.tool_name} (key {effect.key}) names no call of any run",
                    )
                )
            continue
        counts[id(call)] = counts.get(id(call), 0) + 1
    for c in all_calls:
        n = counts.get(id(c), 0)
        problems += _call_problems(c, n, idempotent, statuses.get(c.run_id))
    in_doubt = sum(1 for c in all_calls if c.doubts or c.in_doubt)
    return JournalReport(len(infos), len(all_calls), len(done), decisions, in_doubt, tuple(problems))


def _call_problems(c: _Call, ran: int, idempotent: Collection[str], status: RunStatus | None) -> list[JournalProblem]:
    problems = []

    def problem(rule: str, message: str) -> None:
        problems.append(JournalProblem(rule, c.run_id, message, c.name))

    if len(c.results) > 1:
        problem("results_differ", f"{len(c.results)} results recorded: {c.results!r}")
    reruns = sum(1 for d in c.doubts if d.get("execute"))
    if c.tool_name not in idempotent and ran > 1 + reruns:
        asked = f" ({reruns} asked by a decision)" if reruns else ""
        problem("effect_repeated", f"{c.tool_name} had its effect {ran} times{asked}")
    rejected = any(not d.get("execute") for d in c.confirmations)
    if rejected and ran:
        problem("decision_ignored", f"it was rejected, and {c.tool_name} ran {ran} times")
    settled = any(not d.get("execute") for d in c.doubts)
    if settled and not reruns and ran > 1:
        problem("decision_ignored", f"it was settled from outside, and {c.tool_name} ran {ran} times")
    if ran and not c.results and not c.started and not rejected:
        problem(
            "call_dropped",
            f"{c.tool_name} had its effect, and the record has no result and does not list it as started",
        )
    if status is RunStatus.DONE and not c.results:
        problem("call_unanswered", "the run is done, and this call has no result")
    return problems
