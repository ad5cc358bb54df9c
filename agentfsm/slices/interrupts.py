"""Interrupts: a tool call or a hook asks a person a typed question (``ask_user``), and the run waits for the answer.

A call whose tool asked (``agentfsm.interrupts.Asker``) and has no answer takes its
``await_input`` call edge instead of ``finish``: it has no result, so the step's results wait
(``after_tool`` and the result guardrails are skipped while a call has none), and once TOOL_RUN's
work is done the run takes ``input_pause`` to PAUSED, the pause reason ``AwaitingInput`` listing
one question per asking call. Resumed with answers (checked against each question's schema
first), each answered call takes ``answered`` back to ready, and TOOL_RUN's work runs it again:
its ``k``-th ``ask_user`` returns the ``k``-th answer. A hook that asks stops its point's hooks
there, and the run takes the ``hook_input`` interrupt to PAUSED where the point stands; it resumes
at that hook. The answers a unit of work (a step's calls, a hook point) was given are kept in the
snapshots (``input_answers``) until that work is done. A run none of whose tools or hooks asks
never reads the slice's facts: its table and plan leave them out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import (
    CALL_AWAITING_INPUT,
    CALL_READY,
    EXIT_CHECK,
    LLM_CALL,
    PAUSED,
    TOOL_PENDING,
    TOOL_RUN,
    CallStatus,
    Phase,
    Work,
)
from agentfsm._core.rules import CallTransition, Fact, Interrupt, Rule, Slice, when
from agentfsm.interrupts import ASK_USER, Asker
from agentfsm.pauses import AwaitingInput, InputQuestion
from agentfsm.signatures import names_keyword

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig
    from agentfsm.hooks import Hook
    from agentfsm.tools.invoker import PreparedCall

#: The hook points whose hooks may ask: those of the phases a run can pause from (and so resume into).
ASKING_POINTS: dict[Work, Phase] = {
    Work.BEFORE_LLM: LLM_CALL,
    Work.AFTER_LLM: LLM_CALL,
    Work.BEFORE_TOOL: TOOL_PENDING,
    Work.AFTER_TOOL: TOOL_RUN,
    Work.ON_EXIT: EXIT_CHECK,
    Work.ON_LOOP: EXIT_CHECK,
}


def hook_asks(h: Hook) -> bool:
    """Whether the hook declares an ``ask_user`` parameter (``**kwargs`` alone does not count)."""
    declared = getattr(h, "asks_user", None)  # a hook that wraps another says whether that one asks
    if isinstance(declared, bool):
        return declared
    function = getattr(h, "function", None)
    return names_keyword(function if callable(function) else h.run, ASK_USER)


def asking_hooks(hooks: Mapping[Work, Iterable[Hook]]) -> frozenset[Work]:
    """The hook points with a hook that may ask (``RunConfig.asking_hooks``): worked out once, by the agent."""
    return frozenset(point for point, given in hooks.items() if any(hook_asks(h) for h in given))


def tools_ask(config: RunConfig) -> bool:
    """Whether a call of a run of ``config`` may ask: a tool takes ``ask_user``, or a dynamic toolset may show one."""
    return bool(config.dynamic) or any(t.takes_ask for t in config.tools.values())


def calls_asking(run: AgentRun) -> bool:
    """Whether a pending call asked a question that has no answer yet."""
    for c in run.pending:  # noqa: SIM110 (a loop, not any() over a generator: read at every step)
        if c.status is CALL_AWAITING_INPUT:
            return True
    return False


def hook_asking(run: AgentRun) -> bool:
    """Whether a hook of the point under way asked a question that has no answer yet."""
    return run.hook_question is not None


def give_askers(run: AgentRun, calls: Iterable[PreparedCall]) -> None:
    """Give each ready call of a tool that takes ``ask_user`` its asker, reading the answers the run was given."""
    for c in calls:
        if c.status is CALL_READY and c.tool is not None and c.tool.takes_ask:
            c.asker = Asker(run.answers, c.key, tool_call_id=c.key, tool_name=c.call.tool_name)


def hook_asker(run: AgentRun, point: Work, index: int) -> Asker | None:
    """The asker of the ``index``-th hook of ``point`` (``None`` where the run cannot pause: see ``ASKING_POINTS``)."""
    if point not in ASKING_POINTS:
        return None
    return Asker(run.answers, f"{point.value}.{index}", hook_point=point.value, hook=index)


def asked(call: PreparedCall) -> bool:
    """Whether the finished attempt of ``call`` asked a question that has no answer: it takes ``await_input``."""
    asker = call.asker
    return asker is not None and asker.asked is not None  # type: ignore[attr-defined]


def awaiting_input(run: AgentRun) -> AwaitingInput:
    """Why a run pauses for input: the open question of each asking call, or the asking hook's."""
    if run.hook_question is not None:
        return AwaitingInput([run.hook_question])
    return AwaitingInput([c.question for c in run.pending if c.status is CALL_AWAITING_INPUT and c.question])


def restore(run: AgentRun, pause: AwaitingInput, answered: Iterable[str]) -> None:
    """A resumed run's askers: calls whose question is answered run again, the others wait; an asking hook resumes.

    ``answered``: the ids of the questions answered now.
    """
    given = set(answered)
    by_call: dict[str, InputQuestion] = {q.tool_call_id: q for q in pause.questions if q.tool_call_id is not None}
    for c in run.pending:
        question = by_call.get(c.key)
        if question is None or c.status is not CALL_READY:
            continue
        run.move_call(c, "await_input")
        c.question = question
        if question.id in given:
            run.move_call(c, "answered")
            c.question = None
    for q in pause.questions:
        if q.hook_point is not None and q.hook is not None:
            run.hook_restart = (Work(q.hook_point), q.hook)


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    off = [] if tools_ask(config) else [("calls_asking", False)]
    return off + ([] if config.asking_hooks else [("hook_asking", False)])


A = CallStatus.AWAITING_INPUT

SLICE = Slice(
    "interrupts",
    facts=(
        Fact("calls_asking", "a call asked a person", "no call asks", calls_asking),
        Fact("hook_asking", "a hook asks", "no hook asks", hook_asking),
    ),
    # Once every other call of the step has its result (the retried ones included), the run waits for the answers.
    rules=(Rule(TOOL_RUN, 58, "input_pause", PAUSED, when(calls_asking=True), pause=awaiting_input),),
    interrupts=(
        Interrupt(
            "hook_input",
            tuple(dict.fromkeys(ASKING_POINTS.values())),
            (PAUSED,),
            when(hook_asking=True),
            pause=awaiting_input,
        ),
    ),
    call_edges=(
        CallTransition("await_input", CallStatus.READY, A, "its tool asked a person (ask_user), no answer yet"),
        CallTransition("answered", A, CallStatus.READY, "its questions are answered: it runs again"),
    ),
    constants=_constants,
)
