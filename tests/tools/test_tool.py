from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic
import pytest

from agentfsm import Tool, create_tool_from_function, tool
from agentfsm.errors import DeserializationError, SchemaError, SchemaGenerationError, ToolArgumentsError
from agentfsm.tools.tool import tool_from_dict

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def add(a: int, b: int) -> int:
    return a + b


def test_tool_basics() -> None:
    t = Tool("add", "Add two integers.", ADD_SCHEMA, add)
    assert t.invoke(a=1, b=2) == 3
    assert t.tool_spec == {"name": "add", "description": "Add two integers.", "parameters": ADD_SCHEMA}
    t.warm_up()
    t.validate_arguments({"a": 1, "b": 2})


def test_invalid_schema_is_a_value_error_naming_the_problem() -> None:
    with pytest.raises(SchemaError, match="not a valid JSON schema at properties/a/type") as info:
        Tool("add", "d", {"type": "object", "properties": {"a": {"type": "integr"}}}, add)
    assert isinstance(info.value, ValueError)
    with pytest.raises(SchemaError, match="must describe an object"):
        Tool("add", "d", {"type": "string"}, add)


def test_async_function_is_refused() -> None:
    async def fetch() -> str:
        return ""

    with pytest.raises(ValueError, match="async functions are not supported"):
        Tool("fetch", "d", {"type": "object"}, fetch)


@pytest.mark.parametrize(
    "config",
    [
        {"outputs_to_state": ["documents"]},
        {"outputs_to_state": {"documents": "docs"}},
        {"outputs_to_state": {"documents": {"source": 1}}},
        {"outputs_to_state": {"documents": {"handler": "not callable"}}},
        {"inputs_from_state": {"repo": 1}},
        {"outputs_to_string": {"source": 3}},
        {"outputs_to_string": {"raw_result": "yes"}},
        {"outputs_to_string": {"docs": "format"}},
    ],
)
def test_wrong_typed_configuration_is_a_type_error(config: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        Tool("add", "d", ADD_SCHEMA, add, **config)


def test_arguments_are_checked_against_the_schema() -> None:
    t = Tool("add", "d", ADD_SCHEMA, add)
    with pytest.raises(ToolArgumentsError, match="'b' is a required property") as info:
        t.validate_arguments({"a": 1})
    with pytest.raises(ToolArgumentsError, match="a: 'x' is not of type 'integer'"):
        t.validate_arguments({"a": "x", "b": 1})
    assert isinstance(info.value, ValueError)


def get_weather(
    city: Annotated[str, "the city for which to get the weather"] = "Munich",
    unit: Annotated[Literal["Celsius", "Fahrenheit"], "the unit for the temperature"] = "Celsius",
) -> str:
    """A simple function to get the current weather for a location."""
    return f"Weather report for {city}: 20 {unit}, sunny"


def test_create_tool_from_function_matches_the_documented_example() -> None:
    t = create_tool_from_function(get_weather)
    assert t.name == "get_weather"
    assert t.description == "A simple function to get the current weather for a location."
    assert t.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "the city for which to get the weather", "default": "Munich"},
            "unit": {
                "type": "string",
                "enum": ["Celsius", "Fahrenheit"],
                "description": "the unit for the temperature",
                "default": "Celsius",
            },
        },
    }
    assert t.invoke(city="Berlin") == "Weather report for Berlin: 20 Celsius, sunny"


def test_tool_decorator_bare_and_with_options() -> None:
    decorated = tool(get_weather)
    assert isinstance(decorated, Tool)
    assert decorated.name == "get_weather"
    assert decorated.parameters == create_tool_from_function(get_weather).parameters, "the documented @tool output"
    named = tool(name="weather", description="")(get_weather)
    assert (named.name, named.description) == ("weather", "")


@dataclass
class Address:
    street: str
    number: int


class Person(pydantic.BaseModel):
    name: str
    tags: list[str] = []


def register(person: Person, address: Address, nickname: str | None = None, scores: list[float] | None = None) -> str:
    """Register a person."""
    return person.name


def test_nested_models_optional_and_lists() -> None:
    schema = create_tool_from_function(register).parameters
    assert schema["required"] == ["person", "address"]
    assert schema["properties"]["nickname"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert schema["properties"]["scores"]["anyOf"][0] == {"type": "array", "items": {"type": "number"}}
    assert schema["$defs"]["Address"]["required"] == ["street", "number"]
    assert "title" not in schema["properties"]["person"]


class Opaque:
    """Not a type pydantic can describe."""


def opaque(x: Opaque) -> None:
    """Takes an opaque object."""


def test_functions_the_schema_cannot_describe() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ValueError, match="parameter 'x' has no type hint"):
        create_tool_from_function(untyped)

    with pytest.raises(SchemaGenerationError, match=r"JSON schema.*'opaque'"):
        create_tool_from_function(opaque)

    def unresolvable(x: NotDefinedAnywhere) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(SchemaGenerationError, match=r"type hints.*'unresolvable'"):
        create_tool_from_function(unresolvable)


def test_to_dict_from_dict() -> None:
    t = create_tool_from_function(get_weather, outputs_to_state={"report": {"handler": str.upper}})
    data = t.to_dict()
    assert data["data"]["function"] == "tests.tools.test_tool.get_weather"
    assert data["data"]["outputs_to_state"] == {"report": {"handler": "builtins.str.upper"}}
    restored = tool_from_dict(data, allowed_modules=["tests"])
    assert restored == t
    with pytest.raises(DeserializationError, match="not a Tool class"):
        tool_from_dict({**data, "type": "agentfsm.state.State"})


def test_schemas_with_2020_12_keywords_are_still_checked_exactly() -> None:
    schema = {
        "type": "object",
        "properties": {"point": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}},
        "required": ["point"],
    }
    t = Tool("p", "d", schema, lambda point: point)
    t.validate_arguments({"point": [1, "a"]})
    with pytest.raises(ToolArgumentsError, match="point/1: 2 is not of type 'string'"):
        t.validate_arguments({"point": [1, 2]})


def test_validation_never_changes_the_arguments() -> None:
    t = create_tool_from_function(get_weather)
    arguments = {"city": "Berlin"}
    t.validate_arguments(arguments)
    assert arguments == {"city": "Berlin"}, "defaults are the function's business, not written into the call"
