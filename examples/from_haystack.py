"""A Haystack agent, ported: hooks, a confirmation strategy with its own UI, a component tool, a state schema.

Everything from the imports to ``build_agent`` is Haystack code, unchanged but for two details that
are not code of the agent: the component drops Haystack's ``@component`` / ``@component.output_types`` decorators
(agentfsm takes any object with ``run() -> dict``), and the model is scripted so that the example
runs without an API key (``agentfsm.generators.OpenAIChatGenerator`` is the drop-in for Haystack's).
docs/differences-from-haystack.md lists what else behaves differently, and why.

Run it with ``python examples/from_haystack.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Haystack's imports were:
#   from haystack.components.agents import Agent
#   from haystack.components.agents.state import State, replace_values
#   from haystack.dataclasses import ChatMessage, ToolCall
#   from haystack.hooks import hook
#   from haystack.human_in_the_loop import (
#       AlwaysAskPolicy, BlockingConfirmationStrategy, ConfirmationUI, ConfirmationUIResult,
#   )
#   from haystack.tools import ComponentTool
from agentfsm import Agent, ChatMessage, ComponentTool, State, ToolCall, hook, replace_values
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, ConfirmationUI, ConfirmationUIResult


@dataclass
class Document:
    """A document of the library."""

    content: str
    year: int


@dataclass
class SearchFilters:
    """Which documents a search returns."""

    min_year: int = 2000
    max_results: int = 2


LIBRARY = [
    Document("Tokamaks confine plasma with magnetic fields.", 1968),
    Document("A startup reported net energy gain from its stellarator.", 2026),
    Document("Inertial confinement reached ignition at NIF.", 2022),
]


class DocumentSearch:
    """Search the fusion library."""

    def run(self, query: str, filters: SearchFilters) -> dict[str, Any]:
        """Find the documents about a query.

        :param query: What to look for.
        :param filters: Which documents count: the oldest year and how many to return.
        """
        found = [d for d in LIBRARY if d.year >= filters.min_year]
        found.sort(key=lambda d: d.year, reverse=True)
        return {"documents": found[: filters.max_results]}


class ReviewerUI(ConfirmationUI):
    """A reviewer who lets searches run, but never for documents older than 2020."""

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        """Narrow searches that reach too far back."""
        print(f"review: {tool_name}({tool_params})")
        if tool_params["filters"]["min_year"] < 2020:
            new_params = {**tool_params, "filters": {**tool_params["filters"], "min_year": 2020}}
            return ConfirmationUIResult(action="modify", feedback="recent documents only", new_tool_params=new_params)
        return ConfirmationUIResult(action="confirm")


@hook
def build_context(state: State) -> None:
    """before_llm: a system prompt built at run time, once."""
    if state.get("step_count") == 0:
        system = ChatMessage.from_system("You are a research assistant. Cite the documents you found.")
        state.set("messages", [system, *state.data["messages"]], handler_override=replace_values)


@hook
def record_tool_calls(state: State) -> None:
    """before_tool: record the calls about to run in the state's ``trace``."""
    pending = state.data["messages"][-1].tool_calls
    state.set("trace", [f"{tc.tool_name}({tc.arguments['query']})" for tc in pending])


@hook
def require_documents(state: State) -> None:
    """on_exit: no answer before the library was searched."""
    if not state.get("documents"):
        state.set("messages", [ChatMessage.from_user("Search the library before answering.")])


def build_agent(chat_generator: Any) -> Agent:
    """The agent, as it was configured in Haystack."""
    search = ComponentTool(
        component=DocumentSearch(),
        name="search",
        outputs_to_state={"documents": {"source": "documents"}},
    )
    return Agent(
        chat_generator=chat_generator,
        tools=[search],
        state_schema={"documents": {"type": list[Document]}, "trace": {"type": list[str]}},
        hooks={"before_llm": [build_context], "before_tool": [record_tool_calls], "on_exit": [require_documents]},
        confirmation_strategies={"search": BlockingConfirmationStrategy(AlwaysAskPolicy(), ReviewerUI())},
    )


def scripted_model() -> ScriptedChatGenerator:
    """What a model answers here: first without searching, then a search, then the answer."""
    search = ToolCall("search", {"query": "fusion", "filters": {"min_year": 1900, "max_results": 3}})
    return ScriptedChatGenerator(
        [
            "Fusion is always thirty years away.",
            ChatMessage.from_assistant(tool_calls=[search]),
            "A startup reported net energy gain from its stellarator (2026); NIF reached ignition (2022).",
        ]
    )


def main() -> None:
    """Run the ported agent."""
    agent = build_agent(scripted_model())
    agent.warm_up()
    result = agent.run(messages=[ChatMessage.from_user("What is new in fusion energy?")])
    print(f"answer: {result['last_message'].text}")
    print(f"documents: {[(d.content[:20], d.year) for d in result['documents']]}")
    print(f"trace (the state_schema's key): {result['trace']}")
    # agentfsm's own facts about the run; the result's "trace" key is the state_schema's.
    print(f"exit: {result.exit_reason} after {result['step_count']} model calls")
    agent.close()


if __name__ == "__main__":
    main()
