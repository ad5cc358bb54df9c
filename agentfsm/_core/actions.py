"""What a run asks its driver to do next, as data: ``AgentRun.next_action`` returns one of these.

The driver performs the action and reports the result back to the run (``model_replied``,
``tools_ran``, ``backed_off``, ``reconciled``, ``decided``, ``hooks_ran``, ``guardrails_checked``); a ``Pause``,
``Finish`` or ``Fail`` ends the driving.
Each driver handles every kind (a new one a driver does not handle fails type checking:
``assert_never``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfsm._core.phases import Work
    from agentfsm.guardrails import Guardrail
    from agentfsm.hitl.strategies import Decider
    from agentfsm.hooks import Hook
    from agentfsm.messages import ChatMessage
    from agentfsm.reconcile import InDoubtCall, ReconcileFunction
    from agentfsm.snapshot import AgentSnapshot
    from agentfsm.tools.invoker import PreparedCall
    from agentfsm.tools.tool import Tool


@dataclass(slots=True)
class CallModel:
    """Call the chat generator with these messages and tools, then ``model_replied``.

    ``messages`` is the conversation as it stood at the call, a list of its own: a generator that
    keeps it never sees later messages appear in it.
    """

    messages: list[ChatMessage]
    tools: list[Tool]
    #: Passed to the generator as ``generation_kwargs`` (a ``response_format``), when the run has some.
    generation_kwargs: dict[str, Any] | None = None
    #: Seconds the driver waits for the reply (``None``: as long as the generator takes).
    timeout: float | None = None


@dataclass(slots=True)
class RunTools:
    """Execute the ready calls, report each to ``tool_completed``, then ``tools_ran``."""

    calls: list[PreparedCall]


@dataclass(slots=True)
class Backoff:
    """Wait ``delay`` seconds before the next attempt of ``calls`` (their attempts failed), then ``backed_off``.

    The wait ends early when the run's ``RunHandle`` is cancelled (or its task is): the run stops
    at the transition that follows, before any call runs again.
    """

    calls: list[PreparedCall]
    delay: float


@dataclass(slots=True)
class Reconcile:
    """Ask each call in doubt's reconcile function whether its effect happened, then ``reconciled`` with one answer per call.

    ``agentfsm.reconcile.ask`` / ``ask_async`` ask one (each driver calls one): a function that
    raises or answers wrong gives an ``Unknown`` saying so, never a guess.
    """

    calls: list[PreparedCall]
    questions: list[InDoubtCall]
    functions: list[ReconcileFunction]

    def asked(self) -> list[tuple[ReconcileFunction, InDoubtCall]]:
        """Each call's reconcile function, with what it is asked."""
        return list(zip(self.functions, self.questions, strict=True))


@dataclass(slots=True)
class Confirm:
    """Ask each call's confirmation strategy for its decision, then ``decided`` with one per call, in order.

    A strategy that defers (it raised ``HITLBreakpointException``) is reported as ``None``: the call
    stays undecided and the run pauses for the decision.
    """

    calls: list[PreparedCall]
    strategies: list[Decider]

    def asked(self) -> list[tuple[PreparedCall, Decider]]:
        """Each call, with the strategy that decides it."""
        return list(zip(self.calls, self.strategies, strict=True))


@dataclass(frozen=True, slots=True)
class RunHooks:
    """Run these hooks on the run's ``state``, in order, then ``hooks_ran``.

    ``error`` (``on_error`` only) is the exception that failed the run: hooks that take an ``error``
    keyword are given it.
    """

    point: Work
    hooks: tuple[Hook, ...]
    error: BaseException | None = None
    #: The run's ``hook_context`` (``Agent.run(hook_context=...)``): hooks that take it are given it.
    context: dict[str, Any] | None = None
    #: The position among the point's hooks of the first of ``hooks`` (a run resumed at a hook that asked).
    first: int = 0


@dataclass(frozen=True, slots=True)
class CheckGuardrails:
    """Show each subject's value to the point's guardrails, in order, then ``guardrails_checked`` with the verdicts.

    ``agentfsm.guardrails.check_sync`` / ``check_async`` perform it (each driver calls one): what a
    rewrite or a tripwire does to the run is the run's, once it is reported.
    """

    point: str
    #: What is checked: (subject, value) pairs: ``("input", messages)``, ``("output", answer)``, a call's
    #: key with its ``ToolCall`` or its ``ToolCallResult``.
    subjects: list[tuple[str, Any]]
    guardrails: tuple[Guardrail, ...]


@dataclass(slots=True)
class Pause:
    """A breakpoint matched; the driver raises ``BreakpointException`` with this snapshot."""

    snapshot: AgentSnapshot


@dataclass(slots=True)
class Finish:
    """The run is over; ``result`` is what ``Agent.run`` returns."""

    result: dict[str, Any]


@dataclass(slots=True)
class Fail:
    """The run failed and its ``on_error`` hooks ran: the driver raises ``error`` to the caller."""

    error: BaseException


Action = CallModel | RunTools | Backoff | Reconcile | Confirm | RunHooks | CheckGuardrails | Pause | Finish | Fail
