from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Literal

import orjson
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import AgentSnapshot, ChatMessage, State
from agentfsm.errors import DeserializationError, SerializationError
from agentfsm.serialization import (
    ENV_ALLOWED_MODULES,
    MAX_VALUE_DEPTH,
    TAG,
    allow_modules,
    deserialize_callable,
    deserialize_type,
    deserialize_value,
    dump_json,
    import_path,
    load_json,
    serialize_callable,
    serialize_type,
    serialize_value,
)


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Model(pydantic.BaseModel):
    name: str
    tags: list[str]


def test_refused_module_names_the_three_ways_to_allow_it() -> None:
    with pytest.raises(DeserializationError) as info:
        import_path("os.system")
    message = str(info.value)
    assert "'os'" in message
    assert "allow_modules('os')" in message
    assert "allowed_modules=['os']" in message
    assert ENV_ALLOWED_MODULES in message


def test_allow_list_per_call_env_and_process(monkeypatch: pytest.MonkeyPatch, allow_tests_modules: None) -> None:
    assert import_path("json.JSONEncoder", allowed_modules=["json"]).__name__ == "JSONEncoder"
    monkeypatch.setenv(ENV_ALLOWED_MODULES, "json, textwrap")
    assert import_path("textwrap.dedent", expect="callable").__name__ == "dedent"
    assert import_path("tests.test_serialization.Point") is Point  # allowed by the fixture


def test_prefix_must_match_whole_module_names() -> None:
    with pytest.raises(DeserializationError):
        import_path("jsonschema.validate", allowed_modules=["json"])


def test_allow_modules_rejects_non_module_names() -> None:
    with pytest.raises(ValueError, match="not a module path"):
        allow_modules("my app")


def test_import_path_errors() -> None:
    with pytest.raises(DeserializationError, match="not a dotted import path"):
        import_path("nodots")
    with pytest.raises(DeserializationError, match="has no attribute"):
        import_path("agentfsm.messages.Nope")
    with pytest.raises(DeserializationError, match="does not name a function or a class"):
        deserialize_callable("agentfsm.serialization.TAG")
    with pytest.raises(DeserializationError, match="does not name a class"):
        import_path("agentfsm.state.merge_lists")


class Outer:
    """A class whose nested class and methods are named by path."""

    class Inner:
        """Nested: reached through its class."""

    @classmethod
    def build(cls) -> Outer:
        return cls()

    @staticmethod
    def helper() -> None:
        """A static method."""


def test_paths_go_down_through_classes(allow_tests_modules: None) -> None:
    assert import_path("tests.test_serialization.Outer.Inner") is Outer.Inner
    assert isinstance(import_path("tests.test_serialization.Outer.build", expect="callable")(), Outer)
    assert import_path("tests.test_serialization.Outer.helper", expect="callable") is Outer.helper
    with pytest.raises(DeserializationError, match="is a module"):
        import_path("tests.test_serialization.pydantic.BaseModel")
    with pytest.raises(DeserializationError, match="is not a class"):
        import_path("agentfsm.serialization.TAG.upper", expect="callable")
    with pytest.raises(DeserializationError, match="dunder names are never resolved"):
        import_path("tests.test_serialization.Outer.__init__", expect="callable")


def test_builtins_offers_plain_data_types_only() -> None:
    assert import_path("builtins.dict") is dict
    assert import_path("builtins.bytes.fromhex", expect="callable") == bytes.fromhex
    for path in ("builtins.eval", "builtins.open", "builtins.type", "builtins.str.upper"):
        with pytest.raises(DeserializationError, match="plain data types"):
            import_path(path)  # a method is a callable, not a class
    assert deserialize_type("builtins.int") is int


def test_typing_is_for_annotations_only() -> None:
    assert deserialize_type("typing.Optional[typing.List[int]]") == typing.Optional[typing.List[int]]  # noqa: UP006, UP045
    for text in ("typing.sys", "typing.cast", "typing.Literal[x]", "os.path"):
        with pytest.raises(DeserializationError):
            deserialize_type(text)
    with pytest.raises(DeserializationError, match="'typing'"):
        import_path("typing.Any")
    with pytest.raises(DeserializationError, match="given as a string"):
        deserialize_type(None)  # type: ignore[arg-type]


def local_function() -> None:
    """Module-level: serializable."""


def test_callables_by_reference() -> None:
    assert serialize_callable(local_function) == "tests.test_serialization.local_function"
    assert deserialize_callable("tests.test_serialization.local_function", ["tests"]) is local_function
    with pytest.raises(SerializationError, match="define it at module level"):
        serialize_callable(lambda: None)

    def nested() -> None: ...

    with pytest.raises(SerializationError, match="module level"):
        serialize_callable(nested)


@pytest.mark.parametrize(
    "tp",
    [str, int, list[ChatMessage], dict[str, int], int | None, Literal["a", 1], Any, tuple[int, ...], list[Point], None],
)
def test_type_round_trip(tp: Any) -> None:
    expected = type(None) if tp is None else tp
    assert deserialize_type(serialize_type(tp), ["tests"]) == expected


def test_deserialize_type_never_evaluates_code() -> None:
    with pytest.raises(DeserializationError):
        deserialize_type("__import__('os').system('true')")
    with pytest.raises(DeserializationError):
        deserialize_type("os.path")
    with pytest.raises(DeserializationError, match="not a type annotation"):
        deserialize_type("list[")


def test_tagged_values_round_trip() -> None:
    value = {
        "point": Point(1, 2),
        "model": Model(name="a", tags=["x"]),
        "message": ChatMessage.from_user("hi"),
        "tuple": (1, "a"),
        "set": {1, 2},
        "frozen": frozenset({"a"}),
        "int_keys": {1: "one"},
        "looks_tagged": {TAG: "not really"},
    }
    assert deserialize_value(serialize_value(value), ["tests"]) == value


def test_unserializable_value_explains_what_to_do() -> None:
    with pytest.raises(SerializationError, match="give the class to_dict"):
        serialize_value(object())


def test_malformed_tagged_values() -> None:
    with pytest.raises(DeserializationError, match="Unknown value tag"):
        deserialize_value({TAG: "pickle"})
    with pytest.raises(DeserializationError, match="Malformed"):
        deserialize_value({TAG: "tuple"})
    with pytest.raises(DeserializationError, match="not in the allow-list"):
        deserialize_value({TAG: "object", "type": "subprocess.Popen", "data": {}})


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)


@given(json_like)
def test_plain_json_passes_through_unchanged(value: Any) -> None:
    assert serialize_value(value) == value
    assert deserialize_value(value) == value


any_number = st.integers() | st.floats() | st.sampled_from([2**70, -(2**70), 2**64, -(2**63) - 1, 10**400])
any_text = st.text(max_size=6) | st.sampled_from(["\udcff", "a\ud800b", "\udfff\ud800"])


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, NaN equal to itself."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner))


@given(nested(any_number | any_text))
def test_big_ints_nan_and_lone_surrogates_survive_a_round_trip(value: Any) -> None:
    assert same(deserialize_value(load_json(dump_json(serialize_value(value)))), value)


@given(nested(any_number))
def test_big_ints_and_nan_are_tagged_so_that_any_json_writer_keeps_them(value: Any) -> None:
    assert same(deserialize_value(load_json(orjson.dumps(serialize_value(value)))), value)


SNAPSHOT_FIELDS = {
    "run_id": "r",
    "phase": "LLM_CALL",
    "step": 0,
    "messages": [],
    "agent_fingerprint": "f",
    "created_at": "2026-01-01T00:00:00+00:00",
}


def test_2_to_the_70_in_state_is_an_int_after_a_snapshot_round_trip() -> None:
    state = State({"big": {"type": int}}, {"big": 2**70})
    written = AgentSnapshot.from_bytes(
        AgentSnapshot.model_validate({**SNAPSHOT_FIELDS, "state": serialize_value(state.data)}).to_bytes()
    )
    assert deserialize_value(written.state)["big"] == 2**70


def test_bad_tagged_numbers_and_too_deep_values_are_refused_typed() -> None:
    for bad in ({TAG: "int", "value": 5}, {TAG: "int", "value": "x"}, {TAG: "float", "value": "1.5"}):
        with pytest.raises(DeserializationError, match="tagged"):
            deserialize_value(bad)
    nested: Any = []
    for _ in range(MAX_VALUE_DEPTH + 1):
        nested = [nested]
    with pytest.raises(SerializationError, match="deeper"):
        serialize_value(nested)
    with pytest.raises(DeserializationError, match="deeper"):
        deserialize_value(nested)


def test_json_text_that_is_not_json_is_refused_typed() -> None:
    for bad in (b"", b"{", b"NaN", b'{"a": Infinity}', b"\xff", b"[" * 5000 + b"]" * 5000):
        with pytest.raises(DeserializationError):
            load_json(bad)
