"""Confirmation strategies: how the decision for a tool call is taken, now or later."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from agentfsm.decisions import ToolExecutionDecision, call_fingerprint
from agentfsm.errors import HITLBreakpointException
from agentfsm.hitl.policies import ConfirmationPolicy
from agentfsm.hitl.user_interfaces import ConfirmationUI
from agentfsm.serialization import Slot, object_from_dict, object_path
from agentfsm.signatures import accepted_keywords


def optional_keywords(function: Callable[..., Any], offered: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords of ``offered`` that ``function`` declares (all of them when it takes ``**kwargs``).

    What agentfsm gives beyond a protocol's own arguments (a tool's schema, the run's context) is a
    capability a user's callable opts into by naming it; one written to the plain signature is
    called with that signature.
    """
    keywords = accepted_keywords(function)  # a callable without a signature takes only its protocol's arguments
    if keywords is None:
        return dict(offered)
    return {name: value for name, value in offered.items() if name in keywords}


class Decider(Protocol):
    """What a run needs of a confirmation strategy: ``run`` deciding one call.

    ``ConfirmationStrategy`` subclasses are deciders, and so is any object with this ``run`` (it may
    take the optional keywords ``ConfirmationStrategy`` lists, and have ``run_async``).
    """

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
    ) -> ToolExecutionDecision:
        """Decide one call, or raise ``HITLBreakpointException`` to leave it to a later resume."""
        ...


class ConfirmationStrategy:
    """Base class of confirmation strategies: ``run`` returns the decision for one call.

    A strategy that cannot decide now raises ``HITLBreakpointException``: the run pauses in CONFIRM
    and its snapshot waits for the decision (``agent.run(snapshot=..., decisions=[...])``). A
    strategy's ``run`` (or ``run_async``) that declares one of the keywords ``tool_schema`` (the
    tool's parameter schema), ``confirmation_strategy_context`` or ``hook_context`` (the run's
    request-scoped objects) is given it too.
    """

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
    ) -> ToolExecutionDecision:
        """Decide one call."""
        raise NotImplementedError(f"{type(self).__name__} must implement run().")

    def restore(self, decisions: list[ToolExecutionDecision]) -> None:
        """Learn again from the decisions of a resumed run (nothing by default)."""

    def to_dict(self) -> dict[str, Any]:
        """Serialize the strategy."""
        return {"type": object_path(type(self)), "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> ConfirmationStrategy:
        """Deserialize the strategy."""
        return cls(**data.get("init_parameters", {}))


def decision_from(
    tool_name: str, tool_params: dict[str, Any], tool_call_id: str | None, action: str, **answer: Any
) -> ToolExecutionDecision:
    """The decision for a UI's ``action``: confirm (run as proposed), modify (run with new parameters) or reject."""
    fingerprint = call_fingerprint(tool_name, tool_params)
    if action == "confirm":
        return ToolExecutionDecision(tool_name, True, tool_call_id, answer.get("feedback"), tool_params, fingerprint)
    if action == "modify" and answer.get("new_tool_params") is not None:
        params = answer["new_tool_params"]
        feedback = answer.get("feedback") or f"The user changed the arguments from {tool_params} to {params}."
        return ToolExecutionDecision(tool_name, True, tool_call_id, feedback, params, fingerprint)
    feedback = answer.get("feedback")
    return ToolExecutionDecision(tool_name, False, tool_call_id, feedback, None, fingerprint)


class BlockingConfirmationStrategy(ConfirmationStrategy):
    """Asks through ``confirmation_ui`` while the run waits, when ``confirmation_policy`` says to ask.

    Under ``Agent.run_async`` the UI runs in a worker thread: the event loop is never blocked. The
    UI is given the keywords its ``get_user_confirmation`` declares of those the strategy is given
    (``tool_schema``, to check edited arguments).
    """

    def __init__(self, confirmation_policy: ConfirmationPolicy, confirmation_ui: ConfirmationUI) -> None:
        self.confirmation_policy = confirmation_policy
        self.confirmation_ui = confirmation_ui

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> ToolExecutionDecision:
        """Ask (if the policy says so) and turn the answer into a decision."""
        if not self.confirmation_policy.should_ask(tool_name, tool_description, tool_params):
            return decision_from(tool_name, tool_params, tool_call_id, "confirm")
        ask = self.confirmation_ui.get_user_confirmation
        result = ask(tool_name, tool_description, tool_params, **optional_keywords(ask, kwargs))
        learn = getattr(self.confirmation_policy, "update_after_confirmation", None)
        if callable(learn):  # optional for a policy that does not derive from ConfirmationPolicy
            learn(tool_name, tool_description, tool_params, result)
        return decision_from(
            tool_name,
            tool_params,
            tool_call_id,
            result.action,
            feedback=result.feedback,
            new_tool_params=result.new_tool_params,
        )

    def restore(self, decisions: list[ToolExecutionDecision]) -> None:
        """The policy learns again from the resumed run's decisions (``AskOncePolicy`` remembers)."""
        restore = getattr(self.confirmation_policy, "restore", None)
        if callable(restore):
            restore(decisions)

    def to_dict(self) -> dict[str, Any]:
        """Serialize the strategy with its policy and UI."""
        return {
            "type": object_path(type(self)),
            "init_parameters": {
                "confirmation_policy": self.confirmation_policy.to_dict(),
                "confirmation_ui": self.confirmation_ui.to_dict(),
            },
        }

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None
    ) -> BlockingConfirmationStrategy:
        """Deserialize; the policy's and UI's classes are resolved through the allow-list."""
        params = data["init_parameters"]
        policy, ui = params["confirmation_policy"], params["confirmation_ui"]
        return cls(
            object_from_dict(policy, allowed_modules, CONFIRMATION_POLICY, whole=True),
            object_from_dict(ui, allowed_modules, CONFIRMATION_UI, whole=True),
        )


#: Where a document names a confirmation policy, a confirmation UI and a confirmation strategy.
CONFIRMATION_POLICY = Slot("a confirmation policy class (with should_ask())", methods=("should_ask", "from_dict"))
CONFIRMATION_UI = Slot(
    "a confirmation UI class (with get_user_confirmation())", methods=("get_user_confirmation", "from_dict")
)
CONFIRMATION_STRATEGY = Slot("a confirmation strategy class (with run() and from_dict())", methods=("run", "from_dict"))


class BreakpointConfirmationStrategy(ConfirmationStrategy):
    """Pauses the run for a decision taken later, anywhere: the snapshot is saved in ``snapshot_file_path``.

    The run takes CONFIRM -> PAUSED (``hitl_pause``) and raises ``HITLBreakpointException``; resume it
    with ``agent.run(snapshot=..., decisions=[...])``.
    """

    def __init__(self, snapshot_file_path: str) -> None:
        self.snapshot_file_path = snapshot_file_path

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
    ) -> ToolExecutionDecision:
        """Always raises ``HITLBreakpointException``: the decision comes from outside the run."""
        raise HITLBreakpointException(
            f"Tool {tool_name!r} needs a decision.", tool_name, self.snapshot_file_path, tool_call_id
        )

    def to_dict(self) -> dict[str, Any]:
        """Serialize the strategy."""
        return {"type": object_path(type(self)), "init_parameters": {"snapshot_file_path": self.snapshot_file_path}}
