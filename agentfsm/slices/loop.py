"""The agent loop itself: call the model, run the tools it asks for, and go on until an exit condition is met.

Its rules are each phase's own ways out (a reply with tool calls or text, the tools run, an exit
condition met, ``max_agent_steps``) and its last (when no capability's rule holds), and the choices
every "go on" leads to: ``go_on`` (may the run call the model again? not past ``max_agent_steps``)
and ``ending`` (how a run that may not go on ends: DONE, unless a capability says FAILED).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import (
    ACTIVE_PHASES,
    DONE,
    EXIT_CHECK,
    FAILED,
    IDLE,
    LLM_CALL,
    PAUSED,
    TOOL_PENDING,
    TOOL_RUN,
    CallStatus,
    Work,
)
from agentfsm._core.rules import OTHERWISE, CallTransition, Choice, Fact, Interrupt, Rule, Slice, when
from agentfsm.logs import logger
from agentfsm.messages import ChatMessage, ChatRole

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig

#: The choice every "go on" leads to, and the one a run that may not go on ends through.
GO_ON = Choice("go_on", "may the model be called again?")
ENDING = Choice("ending", "how does the run end?")
#: The exit reason of a run that made ``max_agent_steps`` model calls.
MAX_STEPS = "max_agent_steps"


def exit_condition(run: AgentRun) -> str | None:
    """The exit condition the end of the conversation meets: ``"text"``, ``"tool:<name>"`` or ``None``.

    A reply without tool calls to run meets ``"text"``. A step's tool results meet ``"tool:<name>"``
    for the first exit-condition tool that ran in it, if none of that tool's calls failed.
    """
    messages: list[ChatMessage] = run.data.get("messages") or []
    if not messages:
        return None
    last = messages[-1]
    role = last.role
    if role is ChatRole.ASSISTANT:
        return None if run.has_tools and last.tool_call is not None else "text"
    exits = run.config.tool_exits
    if role is not ChatRole.TOOL or not exits:
        return None
    failed: dict[str, bool] = {}
    for message in reversed(messages):
        if message.role is not ChatRole.TOOL:
            break
        for result in message.tool_call_results:
            name = result.origin.tool_name
            failed[name] = failed.get(name, False) or result.error
    met = [name for name in reversed(failed) if name in exits]
    if met and not any(failed[name] for name in met):
        return f"tool:{met[0]}"
    return None


def _has_tool_calls(run: AgentRun) -> bool:
    return bool(run.calls)


def _exit_reached(run: AgentRun) -> bool:
    return exit_condition(run) is not None


def _steps_left(run: AgentRun) -> bool:
    return run.step < run.config.max_agent_steps


def _model_calls_allowed(run: AgentRun) -> bool:
    return run.config.max_agent_steps > 0


def _warn_steps_reached(run: AgentRun) -> None:
    steps = run.config.max_agent_steps
    # Through standard logging (the default) the event's record prints as its ``message``: Haystack's
    # warning, word for word, which its users' tests and log searches match.
    message = f"Agent reached maximum agent steps of {steps}, stopping."
    logger.warning("max_agent_steps reached", run_id=run.run_id, max_agent_steps=steps, message=message)


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    return [("model_calls_allowed", config.max_agent_steps > 0)]


SLICE = Slice(
    "loop",
    facts=(
        Fact("has_tool_calls", "reply has tool calls", "no tool calls to run", _has_tool_calls),
        Fact("exit_reached", "exit condition met", "no exit condition met", _exit_reached),
        Fact("steps_left", "steps left", "max_agent_steps reached", _steps_left),
        # max_agent_steps=0: the run ends without calling the model, with the conversation it was given.
        Fact("model_calls_allowed", "max_agent_steps above 0", "max_agent_steps is 0", _model_calls_allowed),
    ),
    rules=(
        Rule(
            IDLE,
            50,
            "max_steps",
            DONE,
            when(model_calls_allowed=False),
            exit_reason=MAX_STEPS,
            effect=_warn_steps_reached,
        ),
        Rule(IDLE, OTHERWISE, "start", LLM_CALL),
        Rule(LLM_CALL, 50, "tool_calls", TOOL_PENDING, when(has_tool_calls=True)),
        Rule(LLM_CALL, OTHERWISE, "text_reply", EXIT_CHECK),
        Rule(TOOL_PENDING, OTHERWISE, "run_tools", TOOL_RUN),
        Rule(TOOL_RUN, OTHERWISE, "tools_done", EXIT_CHECK),
        Rule(EXIT_CHECK, 60, "exit", DONE, when(exit_reached=True), exit_reason="{exit_condition}"),
        # Usage limits are read before the next model call, once the step's tool calls are answered.
        Rule(EXIT_CHECK, OTHERWISE, "continue", GO_ON.name, triggers={"capped": "max_steps", "limited": "usage_limit"}),
        # A run that would call the model again is bounded by max_agent_steps, whatever keeps it going.
        Rule(
            GO_ON.name,
            10,
            "capped",
            ENDING.name,
            when(steps_left=False),
            exit_reason=MAX_STEPS,
            effect=_warn_steps_reached,
        ),
        Rule(GO_ON.name, OTHERWISE, "go", LLM_CALL),
        Rule(ENDING.name, OTHERWISE, "ended", DONE),
    ),
    choices=(GO_ON, ENDING),
    interrupts=(
        Interrupt("pause", ACTIVE_PHASES, (PAUSED,), note="breakpoint matches"),
        Interrupt("resume", (PAUSED,), ACTIVE_PHASES, note="phase recorded in snapshot"),
        Interrupt("fail", ACTIVE_PHASES, (FAILED,), note="unhandled error"),
    ),
    call_edges=(
        CallTransition("check", CallStatus.PROPOSED, CallStatus.READY, "its tool exists and the arguments fit"),
        CallTransition("refuse", CallStatus.PROPOSED, CallStatus.FAILED, "unknown tool or bad arguments"),
        CallTransition("finish", CallStatus.READY, CallStatus.DONE, "the tool returned or raised"),
        CallTransition(
            "time_out",
            CallStatus.READY,
            CallStatus.DONE,
            "no result within its timeout: a timeout error, a late result dropped",
        ),
        CallTransition("restore", CallStatus.READY, CallStatus.DONE, "its result is recorded in the snapshot"),
    ),
    skips={Work.ON_EXIT: ("exit_reached", False)},
    exit_fields={"exit_condition": exit_condition},
    constants=_constants,
)
