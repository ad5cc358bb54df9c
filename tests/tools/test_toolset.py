"""The Toolset examples of the documented API, and the collection interface."""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, Tool, ToolCall, ToolInvoker, Toolset
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.state import State
from agentfsm.tools.toolset import toolset_from_dict
from tests.helpers import call, calls

INT_PAIR = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def add_numbers(a: int, b: int) -> int:
    return a + b


def subtract_numbers(a: int, b: int) -> int:
    return a - b


add_tool = Tool(name="add", description="Add two numbers", parameters=INT_PAIR, function=add_numbers)
subtract_tool = Tool(name="subtract", description="Subtract b from a", parameters=INT_PAIR, function=subtract_numbers)


def test_group_related_tools() -> None:
    math_toolset = Toolset([add_tool, subtract_tool])
    invoker = ToolInvoker(tools=math_toolset)
    state = State({})
    prepared = invoker.prepare([ToolCall("subtract", {"a": 5, "b": 2}, id="1")], state)
    invoker.execute_sync(prepared)
    [message] = invoker.finish(prepared, state)
    assert message.tool_call_result is not None and message.tool_call_result.result == "3"


def test_collection_interface() -> None:
    math_toolset = Toolset([add_tool])
    assert len(math_toolset) == 1 and list(math_toolset) == [add_tool] and math_toolset[0] is add_tool
    assert "add" in math_toolset and add_tool in math_toolset and "subtract" not in math_toolset
    math_toolset.add(subtract_tool)
    assert [t.name for t in math_toolset] == ["add", "subtract"]
    with pytest.raises(ValueError, match="Duplicate tool names: \\['add'\\]"):
        math_toolset.add(add_tool)
    with pytest.raises(TypeError, match="takes a Tool or a Toolset"):
        math_toolset.add("add")  # type: ignore[arg-type]
    combined = Toolset([add_tool]) + [subtract_tool]  # noqa: RUF005 - the operator under test
    assert [t.name for t in combined] == ["add", "subtract"]
    assert [t.name for t in Toolset([add_tool]) + Toolset([subtract_tool])] == ["add", "subtract"]
    merged = Toolset([add_tool])
    merged.add(Toolset([subtract_tool]))
    assert len(merged) == 2


class CalculatorToolset(Toolset):
    """A toolset for calculator operations (tools built dynamically, as in the documented example)."""

    def __init__(self) -> None:
        super().__init__(self._create_tools())

    def _create_tools(self) -> list[Tool]:
        return [
            Tool(name="add", description="Add two numbers", parameters=INT_PAIR, function=lambda a, b: a + b),
            Tool(name="multiply", description="Multiply two numbers", parameters=INT_PAIR, function=lambda a, b: a * b),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"type": f"{type(self).__module__}.{type(self).__qualname__}", "data": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CalculatorToolset:
        return cls()


def test_dynamic_toolset_subclass_in_an_agent_and_serialized() -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("multiply", a=6, b=7)), "42"]), tools=CalculatorToolset()
    )
    result = agent.run([ChatMessage.from_user("6 * 7?")])
    assert result["messages"][2].tool_call_result.result == "42"
    restored = Agent.from_dict(agent.to_dict(), allowed_modules=["tests"])
    assert isinstance(restored.tools, CalculatorToolset)
    assert isinstance(toolset_from_dict(CalculatorToolset().to_dict(), allowed_modules=["tests"]), CalculatorToolset)


class ConnectedToolset(Toolset):
    """Builds its tools in warm_up, like a toolset that must first connect to a server."""

    def __init__(self) -> None:
        super().__init__([])
        self.connections = 0

    def warm_up(self) -> None:
        if not self.tools:
            self.connections += 1
            self.tools = [
                Tool(name="remote_add", description="Add remotely", parameters=INT_PAIR, function=add_numbers)
            ]


def test_toolset_that_loads_its_tools_in_warm_up() -> None:
    toolset = ConnectedToolset()
    agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("remote_add", a=1, b=2)), "3"]), tools=[toolset])
    result = agent.run([ChatMessage.from_user("1 + 2?")])
    assert result["messages"][2].tool_call_result.result == "3"
    agent.warm_up()
    assert toolset.connections == 1


def test_default_serialization_round_trip() -> None:
    toolset = Toolset([add_tool, subtract_tool])
    restored = Toolset.from_dict(toolset.to_dict(), allowed_modules=["tests"])
    assert [t.name for t in restored] == ["add", "subtract"]
    assert restored[0].invoke(a=1, b=2) == 3
