"""AgentResult: what ``Agent.run`` returns, a dict as Haystack documents it, with the run's own facts beside it."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfsm._core.records import TransitionRecord
    from agentfsm.messages import ChatMessage


class AgentResult(dict[str, Any]):
    """The result of a run: its State data (``messages`` and the ``state_schema`` keys) and ``last_message``.

    The counters the agent keeps are always there: ``step_count`` (model calls) and
    ``tool_call_counts`` (``{}`` when no tool ran), as the seeds' hooks read them.
    agentfsm adds ``exit_reason`` (``"text"``, ``"tool:<name>"``, ``"max_agent_steps"``, a hook's
    ``stop_run``) and ``trace`` (a ``TransitionRecord`` per edge) under those keys, unless the run's
    State declares a key of the same name (in the agent's ``state_schema``, or a hook's): the key is
    then the user's, as Haystack's Agent documents ("any additional keys defined in the state_schema"),
    and holds the State's value, or is absent while the State has none. Whatever the schema, the
    attributes ``exit_reason``, ``trace`` and ``last_message`` are always agentfsm's.
    An agent with an ``output_type`` adds ``output``: the final answer as a value of that type
    (``None`` when the run ended without an answer, say at ``max_agent_steps``), under the same rule.

    >>> from agentfsm import Agent, ChatMessage
    >>> from agentfsm.generators import ScriptedChatGenerator
    >>> agent = Agent(chat_generator=ScriptedChatGenerator(["Hi."]), state_schema={"trace": {"type": list[str]}})
    >>> result = agent.run([ChatMessage.from_user("Hello")], trace=["mine"])
    >>> result["trace"], result.exit_reason, len(result.trace)
    (['mine'], 'text', 3)
    """

    __slots__ = ("exit_reason", "has_output", "last_message", "output", "state_keys", "trace")

    def __init__(
        self,
        data: Mapping[str, Any],
        exit_reason: str | None,
        trace: list[TransitionRecord],
        *output: Any,
        state_keys: Collection[str] = (),
    ) -> None:
        """The result of a run with this State ``data``; ``output``: its parsed answer, when the agent has an output type.

        ``state_keys`` are the names the run's State schema declares: agentfsm's values never take them.
        """
        messages = data.get("messages") or []
        #: The last message of the conversation (None when it is empty).
        self.last_message: ChatMessage | None = messages[-1] if messages else None
        #: Why the run ended.
        self.exit_reason = exit_reason
        #: Every edge the run took, in order.
        self.trace = list(trace)
        #: Whether the agent has an output type (and so the result an ``output``).
        self.has_output = bool(output)
        #: The final answer as a value of the agent's ``output_type`` (``None`` without one).
        self.output: Any = output[0] if output else None
        #: The names the run's State schema declares: the user's keys, and the agent's own.
        self.state_keys = frozenset(state_keys)
        super().__init__(data)
        # The run's State holds the counts once a tool has run; a run without one counted none.
        self.setdefault("tool_call_counts", {})
        # The State's keys win, set or not: agentfsm's values fill only the names the schema left free.
        ours = [("last_message", self.last_message), ("exit_reason", exit_reason), ("trace", self.trace)]
        if output:
            ours.append(("output", self.output))
        for key, value in ours:
            if key not in self.state_keys:
                self.setdefault(key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # A key that is the user's keeps its value, one that is agentfsm's is rebuilt equal.
        output = (self.output,) if self.has_output else ()
        return functools.partial(type(self), state_keys=self.state_keys), (
            dict(self),
            self.exit_reason,
            self.trace,
            *output,
        )
