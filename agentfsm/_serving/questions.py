"""A paused run's questions, and the answers to them as decisions: what both protocols ask and read.

A run that pauses waits for something from outside: a decision on each call a confirmation
strategy deferred, on each call whose outcome a crash left unknown, or a word to go on past a
breakpoint. ``questions_of`` lists them as ``Question``s (an id, why, a prompt for a person, the
JSON schema of the answer); the AG-UI endpoint sends them as the interrupts of its run's end, the
A2A server as the data of an ``input-required`` task. ``decide`` reads the ``Reply`` to each as
the run's decisions, which the run then checks as every decision is checked (single-use, bound to
the call's exact arguments: ``agentfsm._core.decisions``).

A question a tool call or a hook asked (``ask_user``, reason ``INPUT``) keeps its id and its own
schema, and is answered with a value that fits it: the answer becomes an ``InputAnswer``; a
cancelled one leaves the run paused. A call's question is answered ``{"approved": true}`` (run it), ``{"approved": true, "editedArgs":
{...}}`` (run it with these arguments instead, checked against the tool), or ``{"approved":
false, "feedback": "..."}`` (do not run it; the model is told the feedback); a cancelled one is
not run. Every open question must be answered at once, and nothing else; otherwise
``ProtocolRequestError``, and nothing runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema

from agentfsm.decisions import ToolExecutionDecision
from agentfsm.errors import DecisionError, ProtocolRequestError, ToolArgumentsError
from agentfsm.interrupts import InputAnswer
from agentfsm.pauses import AwaitingDecision, AwaitingInput, BreakpointHit, OutcomeUnknown
from agentfsm.snapshot import AgentSnapshot
from agentfsm.tools.tool import Tool

#: Why a run asks (the AG-UI interrupt ``reason``): a call waits for approval (AG-UI's core value),
#: a call may have run before a crash, or a breakpoint stopped the run.
TOOL_CALL = "tool_call"
OUTCOME_UNKNOWN = "agentfsm:outcome_unknown"
BREAKPOINT = "agentfsm:breakpoint"
#: A tool call or a hook asked a person (``ask_user``): the answer is a JSON value fitting the question's schema.
INPUT = "agentfsm:input"

#: The id of the question a breakpoint asks (one per pause).
BREAKPOINT_ID = "breakpoint"

#: What the user is told when a question on a call is cancelled instead of answered.
CANCELLED_FEEDBACK = "The user cancelled this call: it was not run."


def approval_schema(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON schema of an answer on a call: approved, and feedback; with ``arguments`` (a tool's parameters), editedArgs."""
    properties: dict[str, Any] = {
        "approved": {"type": "boolean", "description": "Run the call (true) or not (false)."},
        "feedback": {"type": "string", "description": "Why, for the model (when not approved)."},
    }
    if arguments is not None:
        properties["editedArgs"] = {
            **dict(arguments),
            "description": "Run the call with these arguments instead (a full replacement, checked against the tool).",
        }
    return {"type": "object", "properties": properties, "required": ["approved"], "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class Question:
    """One thing a paused run waits for from outside."""

    #: The question's id, which its answer names: the call's key, or ``BREAKPOINT_ID``.
    id: str
    #: Why: ``TOOL_CALL``, ``OUTCOME_UNKNOWN``, ``INPUT`` or ``BREAKPOINT``.
    reason: str
    #: What to ask a person.
    message: str
    #: The JSON schema of the answer.
    response_schema: dict[str, Any]
    #: The call asked about (its key), its tool and its arguments; None for a breakpoint.
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As data (``reason``, ``id``...), the form the A2A server sends it in."""
        return {
            "id": self.id,
            "reason": self.reason,
            "message": self.message,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "arguments": self.arguments,
            "responseSchema": self.response_schema,
        }


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to one question: resolved with a ``payload``, or cancelled."""

    question_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None


def _call_text(name: str, arguments: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"{name}({shown})"


def questions_of(snapshot: AgentSnapshot, tools: Mapping[str, Tool]) -> list[Question]:
    """What the paused run of ``snapshot`` waits for; empty for a run that waits for nothing (cancelled, or not paused)."""
    pause = snapshot.pause
    if isinstance(pause, BreakpointHit):
        message = (
            f"The run stopped at a breakpoint before {snapshot.phase.value} (step {snapshot.step}): answer to go on."
        )
        return [Question(BREAKPOINT_ID, BREAKPOINT, message, {"type": "object"})]
    if isinstance(pause, AwaitingInput):
        calls = snapshot.pending_calls_by_key()
        return [
            Question(
                q.id,
                INPUT,
                q.question,
                q.response_schema,
                q.tool_call_id,
                q.tool_name,
                dict(calls[q.tool_call_id]["arguments"]) if q.tool_call_id in calls else {},
            )
            for q in pause.questions
        ]
    if not isinstance(pause, AwaitingDecision | OutcomeUnknown):
        return []
    calls = snapshot.pending_calls_by_key()
    questions = []
    for key in snapshot.awaited_decisions():
        if key not in calls:
            continue
        name, arguments = calls[key]["tool_name"], dict(calls[key]["arguments"])
        tool = tools.get(name)
        if isinstance(pause, AwaitingDecision):
            description = f" ({tool.description})" if tool is not None and tool.description else ""
            message = f"Approve {_call_text(name, arguments)}{description}?"
            schema = approval_schema(tool.parameters if tool is not None else {"type": "object"})
            questions.append(Question(key, TOOL_CALL, message, schema, key, name, arguments))
        else:
            message = (
                f"{_call_text(name, arguments)} may have run before the run stopped, and its result was not "
                "recorded: approve to run it again, or do not, and your feedback is its result."
            )
            questions.append(Question(key, OUTCOME_UNKNOWN, message, approval_schema(None), key, name, arguments))
    return questions


@dataclass(frozen=True, slots=True)
class Resumption:
    """What the answers say: resume the run with ``decisions``, or (a breakpoint's question cancelled) leave it."""

    #: ``ToolExecutionDecision``s, and ``InputAnswer``s for the questions a tool or a hook asked.
    decisions: list[ToolExecutionDecision | InputAnswer]
    go_on: bool = True


def decide(questions: Sequence[Question], replies: Sequence[Reply], tools: Mapping[str, Tool]) -> Resumption:
    """The ``replies`` to ``questions`` as decisions, each checked against its question's schema and its tool.

    Raises:
        ProtocolRequestError: a reply to no open question, two replies to one, an open question
            left unanswered, a payload that does not fit its schema, edited arguments the tool
            refuses. Nothing was decided.
    """
    from agentfsm.hitl.answers import Answer, decisions_from_answers

    open_ids = {q.id: q for q in questions}
    given: dict[str, Reply] = {}
    for reply in replies:
        if reply.question_id not in open_ids:
            raise ProtocolRequestError(
                f"There is no open interrupt {reply.question_id!r} to answer; the open ones are "
                f"{sorted(open_ids) or 'none'}. Nothing ran."
            )
        if reply.question_id in given:
            raise ProtocolRequestError(f"Interrupt {reply.question_id!r} is answered twice. Nothing ran.")
        given[reply.question_id] = reply
    missing = [q for q in open_ids if q not in given]
    if missing:
        raise ProtocolRequestError(
            f"The run waits for answers to every open interrupt at once; {missing} are not answered. Nothing ran."
        )
    answers: dict[str, Answer] = {}
    answered: list[InputAnswer] = []
    calls: dict[str, dict[str, Any]] = {}
    for question in questions:
        reply = given[question.id]
        if reply.status == "resolved":
            try:
                jsonschema.validate(reply.payload, question.response_schema)
            except jsonschema.ValidationError as exc:
                raise ProtocolRequestError(
                    f"The answer to interrupt {question.id!r} does not fit its schema: {exc.message}. Nothing ran."
                ) from None
        if question.reason in (BREAKPOINT, INPUT):
            if reply.status == "cancelled":
                return Resumption([], go_on=False)
            if question.reason == INPUT:
                answered.append(InputAnswer(question.id, reply.payload))
            continue
        assert question.tool_name is not None
        calls[question.id] = {"tool_name": question.tool_name, "arguments": question.arguments}
        payload: dict[str, Any] = (
            reply.payload if reply.status == "resolved" else {"approved": False, "feedback": CANCELLED_FEEDBACK}
        )
        if payload.get("approved"):
            edited = payload.get("editedArgs")
            answers[question.id] = (
                Answer("approve") if edited is None else Answer("modify", arguments=json.dumps(edited))
            )
        else:
            feedback = payload.get("feedback")
            answers[question.id] = Answer("reject", feedback=feedback if isinstance(feedback, str) else None)
    try:
        return Resumption([*decisions_from_answers(calls, answers, tools.values()), *answered])
    except (DecisionError, ToolArgumentsError) as exc:
        raise ProtocolRequestError(f"{exc} Nothing ran.") from None
