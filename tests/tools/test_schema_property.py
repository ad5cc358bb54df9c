"""Property: the schema generated from a typed signature accepts exactly the arguments the function accepts."""

from __future__ import annotations

import inspect
from typing import Any, Literal

from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from agentfsm import create_tool_from_function
from agentfsm.errors import ToolArgumentsError


def _int(v: Any) -> bool:
    # JSON Schema counts a number with a zero fractional part (1.0) as an integer.
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


# type -> does a JSON value belong to it (JSON rules: booleans are not numbers)
TYPES: dict[str, tuple[Any, Any]] = {
    "int": (int, _int),
    "float": (float, lambda v: _int(v) or isinstance(v, float)),
    "str": (str, lambda v: isinstance(v, str)),
    "bool": (bool, lambda v: isinstance(v, bool)),
    "list_int": (list[int], lambda v: isinstance(v, list) and all(_int(x) for x in v)),
    "list_str": (list[str], lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "literal": (Literal["red", "green"], lambda v: v in ("red", "green") and isinstance(v, str)),
    "optional_int": (int | None, lambda v: v is None or _int(v)),
    "dict": (dict[str, int], lambda v: isinstance(v, dict) and all(_int(x) for x in v.values())),
}

json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False),
    st.sampled_from(["red", "green", "blue", ""]),
    st.lists(st.integers(-3, 3), max_size=3),
    st.lists(st.sampled_from(["a", "b"]), max_size=2),
    st.lists(st.one_of(st.integers(), st.text(max_size=2)), min_size=1, max_size=3),
    st.dictionaries(st.sampled_from(["x", "y"]), st.one_of(st.integers(-2, 2), st.text(max_size=2)), max_size=2),
)

signatures = st.lists(
    st.tuples(st.sampled_from(sorted(TYPES)), st.booleans()),  # (type, has a default)
    min_size=1,
    max_size=5,
)


def make_function(spec: list[tuple[str, bool]]) -> Any:
    parameters = []
    annotations: dict[str, Any] = {}
    # Parameters with defaults come last, as Python requires.
    for i, (kind, has_default) in sorted(enumerate(spec), key=lambda item: item[1][1]):
        name = f"p{i}"
        annotations[name] = TYPES[kind][0]
        default = None if has_default else inspect.Parameter.empty
        parameters.append(
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=TYPES[kind][0])
        )

    def function(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    function.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    function.__annotations__ = {**annotations, "return": dict}
    function.__doc__ = "Generated."
    return function


@given(spec=signatures, data=st.data())
def test_schema_accepts_exactly_the_valid_argument_sets(spec: list[tuple[str, bool]], data: st.DataObject) -> None:
    tool = create_tool_from_function(make_function(spec), name="generated")
    arguments = {}
    for i, _ in enumerate(spec):
        if data.draw(st.booleans(), label=f"give p{i}"):
            arguments[f"p{i}"] = data.draw(json_values, label=f"p{i}")
    required_given = all(f"p{i}" in arguments for i, (_, has_default) in enumerate(spec) if not has_default)

    def accepted(name: str, value: Any) -> bool:
        kind, has_default = spec[int(name[1:])]
        # A parameter whose default is None also accepts null.
        return bool(TYPES[kind][1](value)) or (value is None and has_default)

    expected = required_given and all(accepted(name, value) for name, value in arguments.items())
    try:
        tool.validate_arguments(arguments)
        valid = True
    except ToolArgumentsError:
        valid = False
    assert valid == expected, (spec, arguments, tool.parameters)
    assert Draft202012Validator(tool.parameters).is_valid(arguments) == expected, "the check agrees with jsonschema"
    if expected:
        assert tool.invoke(**arguments) == arguments
