"""Budgets: end a run cleanly, before its next model call, once it has used what it was given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfsm.errors import check_int
from agentfsm.messages import ChatMessage
from agentfsm.state import State

#: Usage counts that are a reply's whole cost, by API: OpenAI-style, else Anthropic-style parts.
_TOTAL_KEYS = ("total_tokens",)
_PART_KEYS = (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens"))


def total_tokens(usage: Mapping[str, int] | None) -> int:
    """The tokens a run's ``token_usage`` adds up to: ``total_tokens``, else its input and output parts."""
    if not usage:
        return 0
    for key in _TOTAL_KEYS:
        if key in usage:
            return usage[key]
    return max(sum(usage.get(key, 0) for key in parts) for parts in _PART_KEYS)


def _stop(state: State, reason: str, message: str | None) -> None:
    if message is not None:
        state.set("messages", [ChatMessage.from_assistant(message)])
    state.set("stop_run", reason)


class TokenBudgetHook:
    """A ``before_llm`` hook: once ``token_usage`` reaches ``max_total_tokens``, the run ends (exit reason ``"token_budget"``).

    The model is not called again; with ``add_final_message`` the conversation ends with an
    assistant message saying why. Usage comes from the replies' ``usage`` metadata, so a model
    client that does not report it never reaches the budget.

    Kept for code written to Haystack's hook; ``Agent(usage_limits=UsageLimits(total_tokens=...))``
    bounds the same count through the machine's own ``usage_limit`` edge (exit reason
    ``"usage_limit:total_tokens"``, drawn on the agent's diagram) and refuses a model that reports
    no usage instead of never stopping it.
    """

    points = frozenset({"before_llm"})

    def __init__(self, max_total_tokens: int, add_final_message: bool = False) -> None:
        self.max_total_tokens = check_int("max_total_tokens", max_total_tokens, 1)
        self.add_final_message = add_final_message

    def run(self, state: State) -> None:
        """Stop the run when the budget is used up."""
        used = total_tokens(state.data.get("token_usage"))
        if used >= self.max_total_tokens and not state.data.get("stop_run"):
            note = f"I stopped here: this run used {used} tokens, its budget is {self.max_total_tokens}."
            _stop(state, "token_budget", note if self.add_final_message else None)

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"max_total_tokens": self.max_total_tokens, "add_final_message": self.add_final_message}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenBudgetHook:
        """Deserialize."""
        return cls(**data)


class StepBudgetHook:
    """A ``before_llm`` hook: once the run has made ``max_tool_calls`` tool calls, it ends (exit reason ``"tool_call_budget"``).

    Counted from State's ``tool_call_counts`` (every tool, failed calls included), so the count
    survives pauses and resumes. ``add_final_message`` as for ``TokenBudgetHook``.

    ``Agent(usage_limits=UsageLimits(tool_calls=...))`` is the declared form: it stops the call that
    would go past the limit (this hook lets a whole step's calls run), with exit reason
    ``"usage_limit:tool_calls"``.
    """

    points = frozenset({"before_llm"})

    def __init__(self, max_tool_calls: int, add_final_message: bool = False) -> None:
        self.max_tool_calls = check_int("max_tool_calls", max_tool_calls, 1)
        self.add_final_message = add_final_message

    def run(self, state: State) -> None:
        """Stop the run when the budget is used up."""
        made = sum((state.data.get("tool_call_counts") or {}).values())
        if made >= self.max_tool_calls and not state.data.get("stop_run"):
            note = f"I stopped here: this run made {made} tool calls, its budget is {self.max_tool_calls}."
            _stop(state, "tool_call_budget", note if self.add_final_message else None)

    def to_dict(self) -> dict[str, Any]:
        """Serialize."""
        return {"max_tool_calls": self.max_tool_calls, "add_final_message": self.add_final_message}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepBudgetHook:
        """Deserialize."""
        return cls(**data)
