"""Decisions on a run's tool calls: the one check every way of deciding goes through.

A decision (``agentfsm.decisions.ToolExecutionDecision``, or its dict) names the call it was taken
for (``tool_call_id``), its tool, and may carry the fingerprint of that call's tool name and
arguments as proposed (``call_fingerprint``). ``check_decisions`` refuses, with ``DecisionError`` and before anything runs, one that
names no call waiting for a decision, another tool, or a call whose arguments changed since, and
two decisions for one call. In-process resumes (``agentfsm._core.resume``), a run's own strategies
(``AgentRun.decided``) and durable continuations (``agentfsm.durable``, and so ``agentfsm decide``)
all call it; the review page resumes in-process.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from agentfsm.decisions import ToolExecutionDecision, as_decisions, call_fingerprint
from agentfsm.errors import DecisionError
from agentfsm.interrupts import InputAnswer, check_answers, split_answers
from agentfsm.machine import Phase
from agentfsm.snapshot import AgentSnapshot


def check_decisions(
    run_id: str,
    calls: Mapping[str, tuple[str, Mapping[str, Any]]],
    waiting: Collection[str],
    decisions: Sequence[Any],
    where: str = "",
) -> list[ToolExecutionDecision]:
    """``decisions`` as ``ToolExecutionDecision`` values, each checked against the calls of run ``run_id``.

    ``calls``: the run's pending calls by key, as proposed (tool name, arguments); ``waiting``: the
    keys of those that wait for a decision. ``where`` says where the run stands, for the message
    when nothing waits. ``DecisionError`` for the first decision that does not fit; nothing changes.
    """
    taken = as_decisions(decisions)
    if taken and not waiting:
        raise DecisionError(f"Run {run_id} is not waiting for decisions{where}. Nothing ran.")
    seen: set[str | None] = set()
    for d in taken:
        call = calls.get(d.tool_call_id) if d.tool_call_id is not None else None
        if call is not None and (d.tool_call_id not in waiting or d.tool_call_id in seen):
            raise DecisionError(f"Tool call {d.tool_call_id!r} is decided already in run {run_id}. Nothing ran.")
        if call is None:
            raise DecisionError(
                f"No pending tool call {d.tool_call_id!r} in run {run_id}; the calls waiting for a decision "
                f"are {sorted(waiting)}. Nothing ran."
            )
        seen.add(d.tool_call_id)
        tool_name, arguments = call
        if d.tool_name != tool_name:
            raise DecisionError(
                f"The decision for {d.tool_call_id!r} was taken for another call: it is a {tool_name} call, "
                f"not {d.tool_name}. Nothing ran."
            )
        if d.call_fingerprint is not None and d.call_fingerprint != call_fingerprint(tool_name, dict(arguments)):
            raise DecisionError(
                f"The decision for {d.tool_call_id!r} was taken for another call (fingerprint {d.call_fingerprint}); "
                f"the pending call is {tool_name}({dict(arguments)}), fingerprint "
                f"{call_fingerprint(tool_name, dict(arguments))}. Nothing ran."
            )
    return taken


def decidable_calls(snapshot: AgentSnapshot) -> list[str]:
    """The keys of the calls of ``snapshot`` a decision may be given for.

    Those a paused run waits for (``awaited_decisions``), those that may have run before a crash
    (``outcome_unknown_calls``), and, for a run that stands in CONFIRM, every pending call not
    decided yet (whether a strategy covers it is the agent's to say).
    """
    awaited = snapshot.awaited_decisions()
    keys = dict.fromkeys([*awaited, *snapshot.outcome_unknown_calls()])
    if snapshot.phase is Phase.CONFIRM and not awaited:
        decided = {d.get("tool_call_id") for d in snapshot.decisions if d.get("step") == snapshot.step}
        keys.update(dict.fromkeys(k for k in snapshot.pending_calls_by_key() if k not in decided))
    return list(keys)


def check_snapshot_decisions(
    snapshot: AgentSnapshot, decisions: Sequence[Any]
) -> list[ToolExecutionDecision | InputAnswer]:
    """``check_decisions`` for the run ``snapshot`` holds: the paths that decide a stored or paused run.

    Answers to the questions it asked (``InputAnswer``, or their dicts) among ``decisions`` are
    checked against those questions (``agentfsm.interrupts.check_answers``); they come last.
    """
    given, answers = split_answers(decisions)
    calls = {key: (c["tool_name"], c["arguments"]) for key, c in snapshot.pending_calls_by_key().items()}
    where = f": it resumes in {snapshot.phase.value}"
    taken: list[ToolExecutionDecision | InputAnswer] = list(
        check_decisions(snapshot.run_id, calls, decidable_calls(snapshot), given, where)
    )
    return taken + check_answers(snapshot.run_id, snapshot.pause, answers)
