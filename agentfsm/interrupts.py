"""Asking a person from inside a tool or a hook: the ``ask_user`` parameter, and the answers to it.

A tool function (or a hook) that declares a parameter named ``ask_user`` is given an ``AskUser``:
calling it with a question and the JSON schema of the answer pauses the run until a person
answers. The parameter is never in the schema the model sees::

    @tool
    def transfer(amount: int, ask_user: AskUser) -> str:
        account = ask_user("Which account?", {"enum": ["checking", "savings"]})
        return f"moved {amount} from {account}"

The first time, ``ask_user`` has no answer: it raises ``InputRequired``, the call ends without a
result, and once every other call of the step has its result the run pauses
(``InputBreakpointException``, pause reason ``AwaitingInput``) with one ``InputQuestion`` per
asking call, each with its ``id``. Resuming with answers
(``agent.run(snapshot=..., decisions=[InputAnswer(id, answer)])``) checks each against its
question's schema first (``AnswerError``: nothing runs, the run still waits), then **runs the
asking call again from its start**: its first ``ask_user`` returns the first answer, its second
asks the next question (and the run pauses again), and so on. Whatever the tool did before its
first ``ask_user`` it does again on each run: ask before any effect, or make the part before the
ask safe to repeat (``check_agent`` flags a tool that asks and is not idempotent). A hook asks the
same way; the run pauses where the hook's point stands, and resumes at that hook (the hooks of the
point before it do not run again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentfsm.errors import AnswerError, ConfigurationError, ConfigurationTypeError, InputRequired
from agentfsm.pauses import AwaitingInput, InputQuestion
from agentfsm.schemas import CompiledSchema
from agentfsm.serialization import MAX_VALUE_DEPTH, brief, nests_deeper

__all__ = [
    "ASK_USER",
    "AskUser",
    "Asker",
    "InputAnswer",
    "InputQuestion",
    "check_answers",
    "outside_run",
    "split_answers",
]


#: The parameter through which a tool's function (or a hook) asks a person.
ASK_USER = "ask_user"


class AskUser(Protocol):
    """What a tool's or hook's ``ask_user`` parameter is given: ask a person, get the answer."""

    def __call__(self, question: str, response_schema: Mapping[str, Any] | None = None) -> Any:
        """The answer to ``question``, which fits ``response_schema`` (a JSON schema; ``None``: any JSON value).

        Raises:
            InputRequired: no answer yet; let it through, the run pauses for it.
            ConfigurationError: ``response_schema`` is no valid JSON schema, or the run cannot pause here.
        """


@dataclass(frozen=True, slots=True)
class InputAnswer:
    """A person's answer to the question ``question_id`` of a paused run, passed with its decisions."""

    question_id: str
    answer: Any

    def to_dict(self) -> dict[str, Any]:
        """As data (how a durable continuation carries it)."""
        return {"question_id": self.question_id, "answer": self.answer}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InputAnswer:
        """Invert ``to_dict``; ``AnswerError`` for data that is not an answer."""
        if (
            not isinstance(data.get("question_id"), str)
            or "answer" not in data
            or set(data) - {"question_id", "answer"}
        ):
            raise AnswerError(
                f"An answer is {{'question_id': str, 'answer': <JSON value>}}, got {brief(dict(data), 120)}."
            )
        return cls(data["question_id"], data["answer"])


def _is_answer(value: Any) -> bool:
    return isinstance(value, InputAnswer) or (isinstance(value, Mapping) and "question_id" in value)


def split_answers(values: Sequence[Any]) -> tuple[Any, list[InputAnswer]]:
    """A resume's ``decisions`` as the decisions on calls and the answers to questions (``InputAnswer`` or its dict).

    ``values`` that are not a list or tuple are given back as they are: the decisions' own check says what is wrong.
    """
    if not isinstance(values, (list, tuple)):
        return values, []
    decisions = [v for v in values if not _is_answer(v)]
    answers = [v if isinstance(v, InputAnswer) else InputAnswer.from_dict(v) for v in values if _is_answer(v)]
    return decisions, answers


def check_answers(run_id: str, pause: Any, answers: Sequence[InputAnswer]) -> list[InputAnswer]:
    """``answers`` checked against the open questions of run ``run_id`` (``pause``: why it paused).

    ``AnswerError`` for an answer to no open question, two answers to one, an answer that does
    not fit its question's schema, or one nested too deep; nothing changes.
    """
    if not answers:
        return []
    questions = {q.id: q for q in pause.questions} if isinstance(pause, AwaitingInput) else {}
    if not questions:
        raise AnswerError(f"Run {run_id} asked no question: there is nothing to answer. Nothing ran.")
    seen: set[str] = set()
    for a in answers:
        question = questions.get(a.question_id)
        if question is None:
            raise AnswerError(
                f"Run {run_id} asked no question {a.question_id!r}; its open questions are {sorted(questions)}. "
                "Nothing ran."
            )
        if a.question_id in seen:
            raise AnswerError(f"Question {a.question_id!r} of run {run_id} is answered twice. Nothing ran.")
        seen.add(a.question_id)
        if isinstance(a.answer, (dict, list)) and nests_deeper(a.answer, MAX_VALUE_DEPTH):
            raise AnswerError(f"The answer to {a.question_id!r} nests deeper than {MAX_VALUE_DEPTH} levels.")
        schema = CompiledSchema(question.response_schema, f"The schema of question {a.question_id!r}")
        if not schema.is_valid(a.answer):
            problems = "; ".join(e.message for e in schema.errors(a.answer))
            raise AnswerError(
                f"The answer {brief(a.answer, 80)} to {a.question_id!r} ({question.question!r}) does not fit its "
                f"schema: {problems}. Nothing ran; the run still waits for it."
            )
    return list(answers)


class Asker:
    """What one tool call's (or one hook's) ``ask_user`` is given in a run: the answers so far, and what it asked.

    Its ``n``-th question (counted from 0) is ``<prefix>.<n>``: answered, it returns the answer;
    else it records the question (``asked``) and raises ``InputRequired``.
    """

    __slots__ = ("_answers", "_count", "asked", "hook", "hook_point", "prefix", "tool_call_id", "tool_name")

    def __init__(
        self,
        answers: Mapping[str, Any],
        prefix: str,
        *,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        hook_point: str | None = None,
        hook: int | None = None,
    ) -> None:
        self._answers = answers
        self._count = 0
        self.prefix = prefix
        self.tool_call_id, self.tool_name, self.hook_point, self.hook = tool_call_id, tool_name, hook_point, hook
        #: The first question it asked that has no answer (then the call or hook ends without result).
        self.asked: InputQuestion | None = None

    def __call__(self, question: str, response_schema: Mapping[str, Any] | None = None) -> Any:
        """Ask a person (``AskUser``)."""
        if not isinstance(question, str) or not question:
            raise ConfigurationTypeError(f"{ASK_USER}: the question is a non-empty string, got {brief(question, 80)}.")
        if response_schema is not None and not isinstance(response_schema, Mapping):
            raise ConfigurationTypeError(
                f"{ASK_USER}: response_schema is a JSON schema (a dict) or None, got {type(response_schema).__name__}."
            )
        schema = dict(response_schema or {})
        CompiledSchema(schema, f"{ASK_USER}: response_schema of {question!r}")  # SchemaError when it is none
        question_id = f"{self.prefix}.{self._count}"
        self._count += 1
        if question_id in self._answers:
            return self._answers[question_id]
        if self.asked is None:
            self.asked = InputQuestion(
                question_id, question, schema, self.tool_call_id, self.tool_name, self.hook_point, self.hook
            )
        raise InputRequired(
            f"{question!r} ({question_id}) has no answer yet: let InputRequired through, the run pauses for it.",
            question_id,
        )


def outside_run(question: str, response_schema: Mapping[str, Any] | None = None) -> Any:
    """The ``ask_user`` of a call made outside a run (an invoker used on its own), or where a run cannot pause."""
    raise ConfigurationError(
        f"{ASK_USER}({question!r}) was called where no run can pause for the answer (a tool invoked outside an "
        "agent's run, or a before_run, after_run or on_error hook): ask from a tool or a hook of a running phase."
    )
