"""What travels in A2A messages: the agent's questions as an ``input-required`` task's message, and the answers back.

A task that waits for input says so in its status message: a text part that asks a person, and a
data part ``{"interrupts": [...]}`` with each question (``agentfsm._serving.questions``: its id,
why, the call it is about, the JSON schema of its answer). The answer is a message on the same task
with a data part ``{"resume": [{"interruptId": ..., "status": "resolved", "payload": {...}}]}``
(AG-UI's form of answers), or, for a person at a plain A2A client, the text ``approve`` or
``reject`` (followed by feedback: ``reject: too much``), which answers every question at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import Message, Part

from agentfsm._serving.questions import Question, Reply
from agentfsm.errors import ProtocolRequestError

#: The keys of the data parts: the questions a task asks, and the answers a message gives.
INTERRUPTS = "interrupts"
RESUME = "resume"


def question_parts(questions: Sequence[Question]) -> list[Part]:
    """The status message of a task that waits: a text for a person, then the questions as data."""
    text = "\n".join(q.message for q in questions)
    hint = "Answer with a data part {'resume': [...]} (one entry per interrupt), or with the text approve or reject."
    return [new_text_part(f"{text}\n{hint}"), new_data_part({INTERRUPTS: [q.to_dict() for q in questions]})]


def questions_in(message: Message) -> list[dict[str, Any]]:
    """The questions a waiting task's status message asks (its ``interrupts`` data), as data."""
    for data in get_data_parts(list(message.parts)):
        if isinstance(data, dict) and isinstance(data.get(INTERRUPTS), list):
            return [q for q in data[INTERRUPTS] if isinstance(q, dict)]
    return []


def answer_parts(replies: Sequence[Reply]) -> list[Part]:
    """A message's parts that answer questions: ``{"resume": [...]}``."""
    entries = []
    for reply in replies:
        entry: dict[str, Any] = {"interruptId": reply.question_id, "status": reply.status}
        if reply.payload is not None:
            entry["payload"] = reply.payload
        entries.append(entry)
    return [new_data_part({RESUME: entries})]


def replies_in(message: Message, questions: Sequence[Question]) -> list[Reply]:
    """The answers a message gives to ``questions``.

    Raises:
        ProtocolRequestError: the message answers nothing (no ``resume`` data, no ``approve`` or
            ``reject`` text), or its ``resume`` entries are malformed.
    """
    for data in get_data_parts(list(message.parts)):
        if isinstance(data, dict) and RESUME in data:
            entries = data[RESUME]
            if not isinstance(entries, list):
                raise ProtocolRequestError("'resume' must be a list of answers. Nothing ran.")
            replies = []
            for entry in entries:
                if not (isinstance(entry, dict) and isinstance(entry.get("interruptId"), str)):
                    raise ProtocolRequestError("Each answer names its 'interruptId'. Nothing ran.")
                status = entry.get("status", "resolved")
                if status not in ("resolved", "cancelled"):
                    raise ProtocolRequestError(f"An answer's status is 'resolved' or 'cancelled', not {status!r}.")
                replies.append(Reply(entry["interruptId"], status, entry.get("payload")))
            return replies
    text = " ".join(get_text_parts(list(message.parts))).strip()
    word, _, feedback = text.partition(":")
    if word.strip().lower() in ("approve", "reject"):
        payload: dict[str, Any] = {"approved": word.strip().lower() == "approve"}
        if feedback.strip() and not payload["approved"]:
            payload["feedback"] = feedback.strip()
        return [
            Reply(q.id, "resolved", payload)
            if q.tool_name is not None
            else Reply(q.id, "resolved", {})
            if payload["approved"]
            else Reply(q.id, "cancelled")
            for q in questions
        ]
    raise ProtocolRequestError(
        "The task waits for answers: send a data part {'resume': [...]}, or the text approve or reject. Nothing ran."
    )
