"""Guardrails: the input, the answer, each call and each result checked before it goes on (``agentfsm.guardrails``).

Each point is a work item of the phase it guards (``PHASE_WORK``), done last before what it
guards: ``guard_input`` after ``before_llm`` (before every model call, a resumed run's included),
``guard_calls`` once TOOL_PENDING's calls are checked, ``guard_decided`` once CONFIRM's decisions
are taken (a call a person gave new arguments is checked again, as the model's call was),
``guard_results`` after ``after_tool``, ``guard_output`` after ``on_exit`` and ``on_loop`` when an
exit condition is met. A run plans only the points its agent has guardrails at: an agent without
any does none of this work and reads none of these facts (``constants``).

A tripwire that ends the run takes ``guardrail_tripped`` out of the phase, to DONE, with the exit
reason ``guardrail:<name>`` (in LLM_CALL the model is not called; out of TOOL_PENDING or CONFIRM,
every call of the batch gets a result saying it never ran, so the conversation can be continued). With ``on_trip="model"`` a
refused answer goes back to the model (``guardrail_retry``, within ``go_on``'s bounds; past them
the run ends as a tripwire does, ``ending``'s ``refused_ended``), a refused call takes its
``block`` edge to DONE without running (its result is the reason, as an error), a refused result
is replaced by the reason. A rewrite replaces what it guards in the run's data (the conversation,
a call's arguments, checked again), so a snapshot, a resumed run and the model see what passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from agentfsm._core.actions import CheckGuardrails
from agentfsm._core.phases import (
    CALL_READY,
    CALL_UNDECIDED,
    CONFIRM,
    DONE,
    EXIT_CHECK,
    LLM_CALL,
    TOOL_PENDING,
    TOOL_RUN,
    CallStatus,
    Work,
)
from agentfsm._core.rules import CallTransition, Fact, Rule, Slice, when
from agentfsm.decisions import call_fingerprint
from agentfsm.errors import ToolCallBlockedError
from agentfsm.messages import ChatMessage, ChatRole, ToolCall, ToolCallResult
from agentfsm.slices.loop import ENDING, GO_ON, exit_condition
from agentfsm.slices.output import FINAL_ANSWER_TOOL
from agentfsm.state import replace_values

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig
    from agentfsm.guardrails import GuardrailPoint, GuardrailVerdict
    from agentfsm.tools.invoker import PreparedCall

#: The exit reason of a run a guardrail's tripwire ended (``{guardrail}``: its name).
TRIPPED: Final = "guardrail:{guardrail}"
#: The ``meta`` key of the message that tells the model why a guardrail refused its answer (its value: the guardrail's name).
REFUSED_META_KEY: Final = "guardrail"
#: The key of a taken decision's record (``AgentRun.decisions``) that holds the arguments a
#: tool-call guardrail rewrote its new arguments to: a resumed run replays them, not the decision's.
REWRITTEN_PARAMS_KEY: Final = "guardrail_params"
#: The point each guard work item checks (``tool_call``'s twice: once proposed, once a decision changed it).
POINT_OF: Final[Mapping[Work, GuardrailPoint]] = {
    Work.GUARD_INPUT: "input",
    Work.GUARD_CALLS: "tool_call",
    Work.GUARD_DECIDED: "tool_call",
    Work.GUARD_RESULTS: "tool_result",
    Work.GUARD_OUTPUT: "output",
}


def guarded_work(config: RunConfig) -> frozenset[Work]:
    """The guard work items a run of ``config`` does: those of the points its agent has guardrails at."""
    return frozenset(item for item, point in POINT_OF.items() if point in config.guardrails)


def decided_anew(call: PreparedCall) -> bool:
    """Whether a decision gave ``call`` arguments other than those it was proposed (and guarded) with."""
    d = call.decision
    return (
        d is not None
        and d.final_tool_params is not None
        and call_fingerprint(call.call.tool_name, call.call.arguments) != d.call_fingerprint
    )


# -- what each point checks ----------------------------------------------------------------------------


def output_answer(run: AgentRun) -> tuple[str, Any] | None:
    """The answer that leaves the run, and how it is read: ``("text", str)``, ``("final_answer", dict)``, ``("tool", result)``.

    ``None`` when no exit condition is met (no answer leaves).
    """
    met = exit_condition(run)
    messages: list[ChatMessage] = run.data["messages"]
    if met == "text":
        return ("text", messages[-1].text or "")
    if met == f"tool:{FINAL_ANSWER_TOOL}":
        for message in reversed(messages):
            calls = [c for c in message.tool_calls if c.tool_name == FINAL_ANSWER_TOOL]
            if calls:
                return ("final_answer", dict(calls[-1].arguments))
        return None
    if met is not None:
        name = met.removeprefix("tool:")
        for message in reversed(messages):
            result = message.tool_call_result
            if message.role is ChatRole.TOOL and result is not None and result.origin.tool_name == name:
                return ("tool", result.result)
    return None


def _trailing_results(messages: list[ChatMessage]) -> list[tuple[int, ToolCallResult, str]]:
    """The tool results the conversation ends with (the step's): their message's position, the result, its key.

    A result's key is its call's id, or ``#<position>`` among the step's results for a call without one.
    """
    found: list[tuple[int, ToolCallResult]] = []
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role is not ChatRole.TOOL:
            break
        found[:0] = [(i, r) for r in messages[i].tool_call_results]
    return [(i, r, r.origin.id or f"#{n}") for n, (i, r) in enumerate(found)]


def check_action(run: AgentRun, item: Work) -> CheckGuardrails | None:
    """The checks of the point ``item`` guards, or ``None`` when there is nothing to check there."""
    point = POINT_OF[item]
    guardrails = run.config.guardrails[point]
    run.guardrail_trip = None
    subjects: list[tuple[str, Any]]
    if point == "input":
        subjects = [("input", list(run.data["messages"]))]
    elif point == "output":
        answer = output_answer(run)
        subjects = [] if answer is None else [("output", answer[1])]
    elif item is Work.GUARD_DECIDED:
        subjects = [(c.key, c.call) for c in run.pending if c.status is CALL_READY and decided_anew(c)]
    elif point == "tool_call":
        subjects = [
            (c.key, c.call)
            for c in run.pending
            if c.status in (CALL_READY, CALL_UNDECIDED) and not (c.tool is not None and c.tool.is_answer)
        ]
    else:
        subjects = [(key, r) for _, r, key in _trailing_results(run.data["messages"])]
    return CheckGuardrails(point, subjects, guardrails) if subjects else None


# -- what the verdicts do ----------------------------------------------------------------------------------


def apply_verdicts(run: AgentRun, point: str, verdicts: list[GuardrailVerdict]) -> None:
    """Do what the point's verdicts say: rewrites replace what they guard; a tripwire ends, refuses or blocks."""
    for verdict in verdicts:
        if point == "input":
            _apply_input(run, verdict)
        elif point == "output":
            _apply_output(run, verdict)
        elif point == "tool_call":
            _apply_call(run, verdict)
        else:
            _apply_result(run, verdict)


def _set_messages(run: AgentRun, messages: list[ChatMessage]) -> None:
    run.state.set("messages", messages, handler_override=replace_values)


def _with_part(message: ChatMessage, old: object, new: Any) -> ChatMessage:
    # Equal, not the same object: a resumed run's pending calls are read apart from its conversation.
    content = tuple(new if part == old else part for part in message._content)
    return ChatMessage(message._role, content, message._name, message._meta)


def _apply_input(run: AgentRun, verdict: GuardrailVerdict) -> None:
    if verdict.rewrites:
        _set_messages(run, list(verdict.value))
    if verdict.tripped is not None:
        run.guardrail_trip = verdict


def _apply_output(run: AgentRun, verdict: GuardrailVerdict) -> None:
    if verdict.rewrites:
        _rewrite_answer(run, verdict.value)
    if verdict.tripped is not None:
        run.guardrail_trip = verdict


def _rewrite_answer(run: AgentRun, value: Any) -> None:
    """Replace the answer the conversation ends with by ``value`` (a text reply's text, or the answer tool's arguments)."""
    answer = output_answer(run)
    assert answer is not None
    messages: list[ChatMessage] = list(run.data["messages"])
    how = answer[0]
    if how == "text":
        last = messages[-1]
        parts = [p for p in last._content if p.kind != "text"]
        messages[-1] = ChatMessage(last._role, (*parts, _text_part(str(value))), last._name, last._meta)
    else:
        for i in range(len(messages) - 1, -1, -1):
            message = messages[i]
            if how == "final_answer":
                calls = [c for c in message.tool_calls if c.tool_name == FINAL_ANSWER_TOOL]
                if calls:
                    old = calls[-1]
                    messages[i] = _with_part(message, old, ToolCall(old.tool_name, dict(value), old.id, old.extra))
                    break
            elif message.role is ChatRole.TOOL and message.tool_call_result is not None:
                old_result = message.tool_call_result
                messages[i] = _with_part(
                    message, old_result, ToolCallResult(value, old_result.origin, old_result.error)
                )
                break
    _set_messages(run, messages)


def _text_part(text: str) -> Any:
    from agentfsm.messages import TextContent

    return TextContent(text)


def _apply_call(run: AgentRun, verdict: GuardrailVerdict) -> None:
    call = next(c for c in run.pending if c.key == verdict.subject)
    if verdict.rewrites:
        new: ToolCall = verdict.value
        old = call.call
        if call.decision is not None:
            # Arguments a decision gave: its record keeps the rewrite, which a resumed run replays.
            _record_rewrite(run, call.key, new.arguments)
        else:
            # The conversation and the pending calls say what the call is: a snapshot, a resumed run and the model see it.
            run.calls = [new if c is old else c for c in run.calls]
            _set_messages(run, [_with_part(m, old, new) if old in m._content else m for m in run.data["messages"]])
        [checked] = run.config.invoker.check([new], run.state, run.current_tools())
        call.call, call.tool, call.arguments, call.error = checked.call, checked.tool, checked.arguments, checked.error
        if checked.error is not None:
            run.move_call(call, "guard_refused")
            return
        run._give_key(call)
    if verdict.tripped is not None and verdict.on_trip == "model":
        # The call never runs; its result says why (kept with the step's results: a resumed run restores it).
        run.settle_call(
            call, "block", ToolCallBlockedError(f"Guardrail {verdict.tripped!r} refused the call: {verdict.reason}")
        )
    elif verdict.tripped is not None:
        run.guardrail_trip = verdict


def _record_rewrite(run: AgentRun, key: str, arguments: Mapping[str, Any]) -> None:
    for i in range(len(run.decisions) - 1, -1, -1):
        taken = run.decisions[i]
        if taken.get("tool_call_id") == key and taken.get("step") == run.step:
            # A new record, not the old one changed: snapshots already handed out keep theirs.
            run.decisions[i] = {**taken, REWRITTEN_PARAMS_KEY: dict(arguments)}
            return


def _apply_result(run: AgentRun, verdict: GuardrailVerdict) -> None:
    if not verdict.rewrites and (verdict.tripped is None or verdict.on_trip == "end"):
        if verdict.tripped is not None:
            run.guardrail_trip = verdict
        return
    messages: list[ChatMessage] = list(run.data["messages"])
    for i, old, key in _trailing_results(messages):
        if key != verdict.subject:
            continue
        new = verdict.value
        if verdict.tripped is not None and verdict.on_trip == "model":
            new = ToolCallResult(
                f"Guardrail {verdict.tripped!r} withheld the result: {verdict.reason}", old.origin, True
            )
        messages[i] = _with_part(messages[i], old, new)
    _set_messages(run, messages)
    if verdict.tripped is not None and verdict.on_trip == "end":
        run.guardrail_trip = verdict


# -- the slice -------------------------------------------------------------------------------------------


def _tripped(run: AgentRun) -> bool:
    trip = run.guardrail_trip
    return trip is not None and trip.on_trip == "end"


def _answer_refused(run: AgentRun) -> bool:
    trip = run.guardrail_trip
    return trip is not None and trip.on_trip == "model"


def _guardrail(run: AgentRun) -> str:
    trip = run.guardrail_trip
    return "" if trip is None or trip.tripped is None else trip.tripped


def _send_back(run: AgentRun) -> None:
    """Tell the model why its answer was refused: it answers again."""
    trip = run.guardrail_trip
    assert trip is not None and trip.tripped is not None
    run.guardrail_trip = None
    message = ChatMessage.from_user(
        f"Your answer was refused ({trip.tripped}): {trip.reason}\nAnswer again.",
        meta={REFUSED_META_KEY: trip.tripped},
    )
    run.state.append("messages", [message])


def _answer_the_batch(run: AgentRun) -> None:
    """A tool-call tripwire ended the run: each call of the batch not answered yet gets a result saying it never ran.

    An assistant message whose calls have no results cannot be continued (chat APIs refuse it).
    """
    trip = run.guardrail_trip
    assert trip is not None
    for c in run.pending:
        if c.status not in (CALL_READY, CALL_UNDECIDED):
            continue  # it has its result: it failed its checks, was rejected or refused
        if c.key == trip.subject:
            run.settle_call(
                c, "block", ToolCallBlockedError(f"Guardrail {trip.tripped!r} refused the call: {trip.reason}")
            )
        else:
            run.settle_call(
                c,
                "run_ended",
                ToolCallBlockedError(
                    f"Not run: the run ended when guardrail {trip.tripped!r} refused call {trip.subject}."
                ),
            )
    run.state.append("messages", run.config.invoker.finish(run.pending, run.state))
    run.calls, run.pending = [], []


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    guardrails = [g for gs in config.guardrails.values() for g in gs]
    if not any(g.on_trip == "end" for g in guardrails):
        yield ("guardrail_tripped", False)
    if not any(g.on_trip == "model" for g in config.guardrails.get("output", ())):
        yield ("answer_refused", False)


def _tripwire(phase: Any, order: int, effect: Any = None) -> Rule:
    return Rule(
        phase, order, "guardrail_tripped", DONE, when(guardrail_tripped=True), exit_reason=TRIPPED, effect=effect
    )


R, U = CallStatus.READY, CallStatus.UNDECIDED

SLICE = Slice(
    "guardrails",
    facts=(
        Fact("guardrail_tripped", "a guardrail tripped", "no guardrail tripped", _tripped),
        Fact("answer_refused", "a guardrail refused the answer", "no answer refused", _answer_refused),
    ),
    # Before continue_run (30): a refused answer goes back to the model, whatever keeps the run going.
    rules=(
        _tripwire(LLM_CALL, 20),
        _tripwire(TOOL_PENDING, 20, _answer_the_batch),
        _tripwire(CONFIRM, 20, _answer_the_batch),
        _tripwire(TOOL_RUN, 20),
        _tripwire(EXIT_CHECK, 15),
        Rule(
            EXIT_CHECK,
            25,
            "guardrail_retry",
            GO_ON.name,
            when(answer_refused=True),
            triggers={"capped": "guardrail_capped", "limited": "guardrail_limited"},
            effect=_send_back,
        ),
        # A refused answer that may not be tried again does not leave: the run ends as a tripwire ends it.
        Rule(ENDING.name, 5, "refused_ended", DONE, when(answer_refused=True), exit_reason=TRIPPED),
    ),
    call_edges=(
        CallTransition("block", R, CallStatus.DONE, "a tool-call guardrail refused it: its result says why"),
        CallTransition("block", U, CallStatus.DONE, "a tool-call guardrail refused it: its result says why"),
        CallTransition("guard_refused", R, CallStatus.FAILED, "a guardrail rewrote its arguments, and they do not fit"),
        CallTransition("guard_refused", U, CallStatus.FAILED, "a guardrail rewrote its arguments, and they do not fit"),
        CallTransition("run_ended", R, CallStatus.DONE, "a tool-call tripwire ended the run: its result says so"),
        CallTransition("run_ended", U, CallStatus.DONE, "a tool-call tripwire ended the run: its result says so"),
    ),
    # The model is not called once an input guardrail tripped; no answer is guarded unless one is met.
    skips={
        Work.CALL_MODEL: ("guardrail_tripped", True),
        Work.AFTER_LLM: ("guardrail_tripped", True),
        Work.GUARD_OUTPUT: ("exit_reached", False),
    },
    exit_fields={"guardrail": _guardrail},
    constants=_constants,
)
