"""Structured output: a run that ends on an answer ends on one that fits the agent's ``output_type``.

The answer (a text reply, or a call of the final-answer tool) is checked in EXIT_CHECK
(``agentfsm.output``). One that does not fit goes back to the model with what is wrong
(``output_retry``), on a budget of its own (``output_retries``) and within ``go_on``'s bounds;
past any of them the run fails (``output_failed``, or ``ending``'s ``answer_failed``) with an
``OutputValidationError``. An agent without an output type checks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from agentfsm._core.phases import EXIT_CHECK, FAILED
from agentfsm._core.rules import Fact, Rule, Slice, when
from agentfsm.errors import OutputValidationError
from agentfsm.messages import ChatMessage, ChatRole
from agentfsm.slices.loop import ENDING, GO_ON, exit_condition

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig

#: The tool a model calls to give its final answer when its client has no native response format.
FINAL_ANSWER_TOOL = "final_answer"
#: The ``meta`` key of the message that tells the model why its answer was refused (its value: the try's number).
RETRY_META_KEY = "output_retry"


def answer_of(messages: list[ChatMessage], exit_condition: str | None) -> str | dict[str, Any] | None:
    """The final answer a conversation ends with: a text reply's text, or the final-answer tool's arguments."""
    if exit_condition == "text":
        return messages[-1].text or ""
    if exit_condition == f"tool:{FINAL_ANSWER_TOOL}":
        for message in reversed(messages):
            if message.role is ChatRole.ASSISTANT:
                calls = [c for c in message.tool_calls if c.tool_name == FINAL_ANSWER_TOOL]
                return dict(calls[-1].arguments) if calls else None
    return None


def retries_made(messages: list[ChatMessage]) -> int:
    """How many times the model was sent back since the last user message of its own (not a retry's)."""
    count = 0
    for message in reversed(messages):
        if message.role is ChatRole.USER:
            if RETRY_META_KEY not in message.meta:
                break
            count += 1
    return count


def retry_message(problems: list[str], number: int, tool: bool) -> ChatMessage:
    """The user message that sends the model back: what is wrong with its answer, and how to answer."""
    how = f"Call the {FINAL_ANSWER_TOOL} tool again" if tool else "Answer again with only a JSON value"
    return ChatMessage.from_user(
        "Your final answer does not match the required schema:\n"
        + "\n".join(f"- {p}" for p in problems)
        + f"\n{how}, fixing these problems.",
        meta={RETRY_META_KEY: number},
    )


def checked_output(run: AgentRun) -> tuple[Any, list[str]] | None:
    """The final answer checked against the output type: (parsed value, problems); ``None`` when there is none.

    The conversation must end on an answer: a text reply, or a call of the final-answer tool. The
    check is kept for the conversation's version it was made for.
    """
    output = run.config.output
    if output is None:
        return None
    version = run.conversation_version()
    kept = run.output_check
    if kept is None or kept[0] != version:
        answer = answer_of(run.data["messages"], exit_condition(run))
        kept = run.output_check = (version, None if answer is None else output.check(answer))
    return kept[1]


def output_value(run: AgentRun) -> Any:
    """The final answer as the output type's value (``None``: the run ended without a fitting answer)."""
    checked = checked_output(run)
    return None if checked is None or checked[1] else checked[0]


def _output_invalid(run: AgentRun) -> bool:
    checked = checked_output(run)
    return checked is not None and bool(checked[1])


def _output_retries_left(run: AgentRun) -> bool:
    return retries_made(run.data["messages"]) < run.config.output_retries


def _send_back(run: AgentRun) -> None:
    """Tell the model what is wrong with its answer."""
    checked = checked_output(run)
    assert checked is not None
    number = retries_made(run.data["messages"]) + 1
    tool = FINAL_ANSWER_TOOL in run.config.tools
    run.state.append("messages", [retry_message(checked[1], number, tool)])


def _failed(run: AgentRun) -> OutputValidationError:
    """The error of a run whose answer does not fit, once it may not try again."""
    checked = checked_output(run)
    assert checked is not None and run.config.output is not None
    answer = answer_of(run.data["messages"], exit_condition(run))
    return OutputValidationError(
        run.config.output.name,
        checked[1],
        answer if isinstance(answer, str) else orjson.dumps(answer).decode(),  # a tool's arguments, as JSON
        retries_made(run.data["messages"]),
    )


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    if config.output is None:
        return [("output_invalid", False), ("output_retries_left", False)]
    return [("output_retries_left", False)] if config.output_retries == 0 else []


SLICE = Slice(
    "output",
    facts=(
        Fact("output_invalid", "answer does not fit output_type", "answer fits", _output_invalid),
        Fact("output_retries_left", "output retries left", "output_retries used up", _output_retries_left),
    ),
    rules=(
        Rule(
            EXIT_CHECK,
            40,
            "output_failed",
            FAILED,
            when(exit_reached=True, output_invalid=True, output_retries_left=False),
            error=_failed,
        ),
        Rule(
            EXIT_CHECK,
            50,
            "output_retry",
            GO_ON.name,
            when(exit_reached=True, output_invalid=True),
            triggers={"capped": "output_capped", "limited": "output_limited"},
            effect=_send_back,
        ),
        # A run retrying an answer that may not call the model again fails with the answer's problems.
        Rule(
            ENDING.name,
            10,
            "answer_failed",
            FAILED,
            when(exit_reached=True, continue_requested=False, output_invalid=True),
            error=_failed,
        ),
    ),
    constants=_constants,
)
