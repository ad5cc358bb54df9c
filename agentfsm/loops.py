"""Loop detection: the fact "the model repeats itself", and what the run does about it.

A model repeats itself when its last ``repeats`` replies that called tools each called the same
tool with the same arguments, answered with the same result (identical calls of one reply count
once): it learns nothing new and would go on until
``max_agent_steps``. With ``Agent(loop_detection=LoopDetection(...))`` the run reads the fact
``loop_detected`` in EXIT_CHECK, after the step's tool results are in; when it holds, the phase's
``on_loop`` hook point runs (``PHASE_WORK``): the agent's ``on_loop`` hooks, then the consequence
picked by ``then``:

- ``"stop"``: the run ends through its own edge, ``loop_stop``, with exit reason ``"loop_detected"``
  (``agentfsm.slices.loops``);
- ``"tell"``: a user message tells the model it repeats itself, and the run goes on (the message
  ends the row of repeated calls, so it is told once per row);
- ``"hooks"``: only the agent's ``on_loop`` hooks act (they may set ``stop_run``, add a message...).

Off by default: a tool polled until something changes (a job's status) repeats itself on purpose,
and ``max_agent_steps`` already bounds every run; an agent without it reads nothing per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentfsm.errors import ConfigurationError, check_int
from agentfsm.messages import ChatMessage, ChatRole
from agentfsm.slices.output import FINAL_ANSWER_TOOL
from agentfsm.state import State

#: What the run does when the model repeats itself.
Consequence = Literal["stop", "tell", "hooks"]
#: The exit reason of a run that ``then="stop"`` ends.
LOOP_EXIT_REASON = "loop_detected"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopDetection:
    """Detect a model that makes the same tool call, with the same result, in ``repeats`` replies in a row.

    >>> LoopDetection(repeats=4, then="tell").then
    'tell'
    """

    #: How many replies in a row making the identical call make a loop (at least 2).
    repeats: int = 3
    #: What the run does then: ``"stop"``, ``"tell"`` the model, or leave it to the ``on_loop`` ``"hooks"``.
    then: Consequence = "stop"
    #: The message ``"tell"`` adds (``{tool}`` and ``{repeats}`` are filled in).
    message: str = (
        "You called {tool} with the same arguments {repeats} times in a row and got the same result each "
        "time. Do not call it again like that: change the arguments, use another tool, or answer."
    )

    def __post_init__(self) -> None:
        check_int("LoopDetection(repeats=...)", self.repeats, 2)
        if self.then not in ("stop", "tell", "hooks"):
            raise ConfigurationError(f"LoopDetection(then=...) must be 'stop', 'tell' or 'hooks', got {self.then!r}.")
        if not isinstance(self.message, str):
            raise ConfigurationError(f"LoopDetection(message=...) must be a string, got {self.message!r}.")

    def to_dict(self) -> dict[str, Any]:
        """Serialize (``Agent.to_dict``)."""
        return {"repeats": self.repeats, "then": self.then, "message": self.message}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopDetection:
        """Invert ``to_dict``."""
        return cls(**data)

    def consequence(self) -> tuple[Any, ...]:
        """The hooks that carry out ``then`` at the ``on_loop`` point: ``"tell"``'s (``"stop"`` is an edge, ``slices.loops``)."""
        if self.then == "tell":
            return (TellModel(self),)
        return ()


def repeated_call(messages: list[ChatMessage], repeats: int) -> str | None:
    """The tool the conversation's last ``repeats`` tool-calling replies all called, with the same arguments and result.

    ``None`` unless each of those replies' calls is that one call. Replies count, not calls: a
    reply asking for the same call three times at once fans out, it does not repeat itself. They
    are read back from the end of the conversation through tool results and the replies that asked
    for them; any other message (a user's, a text reply) ends the row.
    """
    seen: tuple[Any, ...] | None = None
    turns = 0
    answered = False  # the reply being read back had a result matching ``seen``
    for message in reversed(messages):
        role = message.role
        if role is ChatRole.TOOL:
            for result in message.tool_call_results:
                origin = result.origin
                if origin.tool_name == FINAL_ANSWER_TOOL:  # the run's answer, not a tool call: it ends the row
                    return None
                key = (origin.tool_name, origin.arguments, result.result, result.error)  # dicts compare deeply
                if seen is None:
                    seen = key
                elif key != seen:
                    return None
                answered = True
            continue
        if role is ChatRole.ASSISTANT and message.tool_call is not None:
            if answered:
                turns += 1
                if turns >= repeats:
                    return seen[0] if seen is not None else None
                answered = False
            continue
        return None
    return None


class TellModel:
    """Adds a user message telling the model it repeats itself."""

    points = frozenset({"on_loop"})
    #: It writes no flow-control key: the run need not read ``stop_run`` or ``continue_run``.
    writes: frozenset[str] = frozenset()

    def __init__(self, detection: LoopDetection) -> None:
        self.detection = detection

    def run(self, state: State) -> None:
        """Tell the model which call it repeats."""
        tool = repeated_call(state.data["messages"], self.detection.repeats)
        text = self.detection.message.format(tool=tool, repeats=self.detection.repeats)
        state.set("messages", [ChatMessage.from_user(text)])
