from __future__ import annotations

from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import ChatMessage, State, merge_lists, replace_values
from agentfsm.errors import ConfigurationError, SchemaError
from agentfsm.state import complete_schema


def concat_strings(current: Any, new: Any) -> str:
    """A custom handler (module level, so that it serializes)."""
    return f"{current or ''}{new}"


def test_seed_usage_example() -> None:
    state = State(
        schema={"gh_repo_name": {"type": str}, "user_name": {"type": str}},
        data={"gh_repo_name": "my_repo", "user_name": "my_user_name"},
    )
    assert state.get("gh_repo_name") == "my_repo"
    assert state.has("user_name")
    assert state.schema["messages"] == {"type": list[ChatMessage], "handler": merge_lists}


def test_default_handlers_merge_lists_and_replace_others() -> None:
    state = State({"docs": {"type": list[str]}, "count": {"type": int}})
    assert state.schema["docs"]["handler"] is merge_lists
    assert state.schema["count"]["handler"] is replace_values
    state.set("docs", ["a"])
    state.set("docs", ["b", "c"])
    state.set("docs", "d")
    state.set("count", 1)
    state.set("count", 2)
    assert state.data == {"docs": ["a", "b", "c", "d"], "count": 2}


def test_handler_override_and_custom_handler() -> None:
    state = State({"docs": {"type": list[str]}, "log": {"type": str, "handler": concat_strings}})
    state.set("docs", ["a"])
    state.set("docs", ["z"], handler_override=replace_values)
    state.set("log", "x")
    state.set("log", "y")
    assert state.get("docs") == ["z"]
    assert state.get("log") == "xy"


def test_get_returns_a_copy_and_default() -> None:
    state = State({"docs": {"type": list[str]}}, {"docs": ["a"]})
    state.get("docs").append("mutated")
    assert state.get("docs") == ["a"]
    assert state.get("missing", 7) == 7
    assert not state.has("missing")


def test_merge_lists_semantics() -> None:
    assert merge_lists(None, [1]) == [1]
    assert merge_lists(None, 1) == [1]
    assert merge_lists(0, 1) == [0, 1]
    current = [1]
    assert merge_lists(current, [2]) == [1, 2]
    assert current == [1], "merge_lists must not mutate its input"
    assert replace_values([1], [2]) == [2]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"x": {}}, "Key 'x' is missing a 'type' entry"),
        ({"x": {"type": "str"}}, "'type' for key 'x' must be a Python type"),
        ({"x": {"type": int, "handler": 3}}, "'handler' for key 'x' must be callable"),
        ({"messages": {"type": str}}, "'messages' must be of type list"),
        ({"x": {"type": int, "default": 3}}, "key 'x' has unknown entries"),
        ({1: {"type": int}}, "key 1 must be a string"),
    ],
)
def test_invalid_schemas_name_the_key(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message) as info:
        State(schema)
    assert isinstance(info.value, ValueError)


def test_a_state_on_a_complete_schema_is_the_same_state_and_has_its_own_schema() -> None:
    schema = {"docs": {"type": list[str]}, "count": {"type": int, "handler": replace_values}}
    data = {"docs": ["a"], "count": 1, "messages": [ChatMessage.from_user("hi")]}
    complete = complete_schema(schema)
    assert complete["messages"]["handler"] is merge_lists and complete["docs"]["handler"] is merge_lists
    first, second = State.from_complete_schema(complete, data), State.from_complete_schema(complete)
    assert first == State(schema, data)
    first.schema["docs"]["handler"] = replace_values
    assert second.schema["docs"]["handler"] is merge_lists is complete["docs"]["handler"]
    with pytest.raises(SchemaError, match="'bad'"):
        complete_schema({"bad": {}})


def test_set_unknown_key_is_a_clear_value_error() -> None:
    state = State({})
    with pytest.raises(ValueError, match="Key 'nope' not found in schema"):
        state.set("nope", 1)
    with pytest.raises(ConfigurationError):
        State({}, {"nope": 1})


def test_to_dict_is_readable_json() -> None:
    state = State({"log": {"type": str, "handler": concat_strings}}, {"messages": [ChatMessage.from_user("hi")]})
    data = state.to_dict()
    assert data["schema"]["log"] == {"type": "str", "handler": "tests.test_state.concat_strings"}
    assert data["schema"]["messages"]["type"] == "list[agentfsm.messages.ChatMessage]"
    assert data["data"]["messages"][0]["data"]["role"] == "user"


# -- property: State.from_dict(s.to_dict()) == s ----------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.integers(), inner, max_size=2)
    ),
    max_leaves=10,
)
types = st.sampled_from(
    [int, str, float, bool, list[int], dict[str, Any], list[str], Any, int | None, Literal["a", "b"], tuple[int, str]]
)
handlers = st.sampled_from([None, merge_lists, replace_values, concat_strings])
messages = st.lists(st.builds(ChatMessage.from_user, st.text(max_size=5)), max_size=3)


@given(
    schema=st.dictionaries(
        st.text(alphabet="abcdefgh", min_size=1, max_size=4),
        st.fixed_dictionaries({"type": types}, optional={"handler": handlers}),
        max_size=4,
    ),
    data=st.data(),
)
def test_state_round_trips_through_to_dict(schema: dict[str, Any], data: st.DataObject) -> None:
    initial = {key: data.draw(values) for key in schema if data.draw(st.booleans())}
    state = State(schema, {**initial, "messages": data.draw(messages)})
    assert State.from_dict(state.to_dict(), allowed_modules=["tests"]) == state


@given(first=values, second=values)
def test_merge_then_serialize_equals_serialize_then_merge(first: Any, second: Any) -> None:
    state = State({"items": {"type": list[Any]}})
    state.set("items", first)
    restored = State.from_dict(state.to_dict(), allowed_modules=["tests"])
    state.set("items", second)
    restored.set("items", second)
    assert restored == state
