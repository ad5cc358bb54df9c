from __future__ import annotations

from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, SearchableToolset, Tool, Toolset
from agentfsm.errors import ConfigurationError, UnsupportedOperationError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.testing import assert_resume_equivalent
from tests.helpers import call, calls

CALLED: list[str] = []


def run_tool(name: str, **kwargs: Any) -> str:
    CALLED.append(name)
    return f"{name} ran with {kwargs}"


def get_weather(city: str) -> str:
    return run_tool("get_weather", city=city)


def send_email(to: str, body: str) -> str:
    return run_tool("send_email", to=to)


def other(**kwargs: Any) -> str:
    return run_tool("other")


DESCRIPTIONS = {
    "get_weather": "Get the current weather forecast for a city",
    "send_email": "Send an email message to a recipient",
    "read_inbox": "Read the latest messages of the mail inbox",
    "create_invoice": "Create an invoice for a customer",
    "translate_text": "Translate text into another language",
    "convert_currency": "Convert an amount between currencies",
    "book_flight": "Book a flight ticket between two airports",
    "find_restaurant": "Find a restaurant nearby",
    "stock_price": "Look up the price of a stock",
    "set_reminder": "Set a reminder at a given time",
}
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "to": {"type": "string"}, "body": {"type": "string"}},
}


def catalog(size: int = 10) -> list[Tool]:
    functions = {"get_weather": get_weather, "send_email": send_email}
    return [Tool(name, d, SCHEMA, functions.get(name, other)) for name, d in list(DESCRIPTIONS.items())[:size]]


def test_small_catalogs_pass_through() -> None:
    toolset = SearchableToolset(catalog(5))
    assert toolset.passthrough
    assert [t.name for t in toolset] == list(DESCRIPTIONS)[:5]
    assert len(toolset) == 5 and "send_email" in toolset


def test_search_finds_relevant_tools() -> None:
    toolset = SearchableToolset(catalog())
    assert [t.name for t in toolset] == ["search_tools"]
    assert toolset.search("send an email")[0].name == "send_email"
    assert toolset.search("weather in Milan")[0].name == "get_weather"
    assert len(toolset.search("weather email invoice flight", k=2)) == 2
    assert toolset.search("zzzz qqqq") == []
    search_tool = toolset[0]
    assert set(search_tool.parameters["properties"]) == {"tool_keywords", "k"}
    assert search_tool.parameters["required"] == ["tool_keywords"]


def test_found_tools_become_callable_in_the_next_steps() -> None:
    CALLED.clear()
    script = [
        calls(call("get_weather", city="Milan")),  # not discovered yet: an error the model can read
        calls(call("search_tools", tool_keywords="weather forecast")),
        calls(call("get_weather", city="Milan")),
        "It is sunny in Milan.",
    ]
    gen = ScriptedChatGenerator(script)
    toolset = SearchableToolset(catalog())
    result = Agent(chat_generator=gen, tools=toolset).run([ChatMessage.from_user("What's the weather in Milan?")])
    results = [m.tool_call_result for m in result["messages"] if m.tool_call_result]
    assert results[0].error and "Tool 'get_weather' not found" in results[0].result
    assert (
        results[1].result.startswith("Found ") and "get_weather: Get the current weather forecast" in results[1].result
    )
    assert not results[2].error and CALLED == ["get_weather"]
    assert gen.calls[0]["tools"] == gen.calls[1]["tools"] == ["search_tools"]
    assert gen.calls[2]["tools"][0] == "search_tools" and "get_weather" in gen.calls[2]["tools"]
    assert len(gen.calls[2]["tools"]) <= 1 + 3, "at most top_k tools were found"
    toolset.clear()
    assert [t.name for t in toolset] == ["search_tools"]


def test_exit_conditions_may_name_catalog_tools() -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator([]), tools=SearchableToolset(catalog()), exit_conditions=["send_email"]
    )
    assert agent.exit_conditions == ["send_email"]
    with pytest.raises(ValueError, match="Invalid exit conditions"):
        Agent(chat_generator=ScriptedChatGenerator([]), tools=SearchableToolset(catalog()), exit_conditions=["nope"])


def test_resume_finds_the_discovered_tools_again() -> None:
    script = [
        calls(call("search_tools", tool_keywords="send email")),
        calls(call("send_email", to="ann", body="hi")),
        "Sent.",
    ]
    checked = assert_resume_equivalent(
        lambda: Agent(chat_generator=ScriptedChatGenerator(script), tools=SearchableToolset(catalog())),
        [ChatMessage.from_user("Email Ann")],
        side_effects=CALLED,
        allowed_modules=["tests"],
    )
    assert checked > 5
    assert CALLED == ["send_email"]


def test_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="subset of"):
        SearchableToolset(catalog(), search_tool_parameters_description={"query": "x"})
    with pytest.raises(ConfigurationError, match="top_k"):
        SearchableToolset(catalog(), top_k=0)
    with pytest.raises(UnsupportedOperationError, match="not supported for SearchableToolset"):
        SearchableToolset(catalog()).add(catalog(1)[0])
    with pytest.raises(NotImplementedError):
        SearchableToolset(catalog()).add(Toolset())


def test_custom_search_tool_and_serialization() -> None:
    toolset = SearchableToolset(
        Toolset(catalog()),
        top_k=2,
        search_tool_name="find_tools",
        search_tool_description="Find tools.",
        search_tool_parameters_description={"tool_keywords": "What you need"},
    )
    search_tool = toolset[0]
    assert (search_tool.name, search_tool.description) == ("find_tools", "Find tools.")
    assert search_tool.parameters["properties"]["tool_keywords"]["description"] == "What you need"
    restored = SearchableToolset.from_dict(toolset.to_dict(), allowed_modules=["tests"])
    assert [t.name for t in restored] == ["find_tools"] and restored.top_k == 2
    assert [t.name for t in restored.search("email")] == [t.name for t in toolset.search("email")]


def test_an_agent_with_a_searchable_toolset_in_its_tool_list_round_trips() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator([]), tools=[SearchableToolset(catalog(), top_k=2)])
    restored = Agent.from_dict(agent.to_dict(), allowed_modules=["tests"])
    assert isinstance(restored.tools, list) and isinstance(restored.tools[0], SearchableToolset)
    assert restored.tools[0].top_k == 2 and restored.to_dict() == agent.to_dict()
