"""``CompiledSchema``: its fast check says what the reference validator says, and a schema never reaches outside itself."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from agentfsm.errors import SchemaError
from agentfsm.schemas import CompiledSchema

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(2**63, 2**70),
    st.floats(-3, 3),
    st.sampled_from([1.0, 2.5, float("nan"), float("inf")]),
    st.sampled_from(["", "a", "ab", "abc", "é"]),
)
#: JSON values, and Python values JSON encodes as such (a tuple is an array).
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    ),
    max_leaves=8,
)
types = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])


def keywords(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """One keyword of draft 2020-12 with its argument (subschemas drawn from ``inner``)."""
    bound = st.one_of(st.integers(-2, 3), st.sampled_from([0.5, 2.0]))
    return st.one_of(
        st.builds(lambda t: {"type": t}, st.one_of(types, st.lists(types, min_size=1, max_size=3, unique=True))),
        st.builds(lambda v: {"enum": v}, st.lists(values, min_size=1, max_size=3)),
        st.builds(lambda v: {"const": v}, values),
        st.builds(lambda k, n: {k: n}, st.sampled_from(["minimum", "maximum", "exclusiveMinimum"]), bound),
        st.builds(
            lambda k, n: {k: n}, st.sampled_from(["minLength", "maxLength", "minItems", "maxItems"]), st.integers(0, 3)
        ),
        st.builds(lambda k, n: {k: n}, st.sampled_from(["minProperties", "maxProperties"]), st.integers(0, 3)),
        st.builds(lambda b: {"uniqueItems": b}, st.booleans()),
        st.builds(lambda s: {"items": s}, inner),
        st.builds(lambda ss: {"prefixItems": ss}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda s: {"contains": s}, inner),
        st.builds(
            lambda props, required: {"properties": props, "required": required},
            st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
            st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
        ),
        st.builds(lambda s: {"additionalProperties": s}, st.one_of(st.booleans(), inner)),
        st.builds(lambda s: {"unevaluatedProperties": s}, st.booleans()),
        st.builds(
            lambda k, ss: {k: ss}, st.sampled_from(["anyOf", "allOf", "oneOf"]), st.lists(inner, min_size=1, max_size=2)
        ),
        st.builds(lambda s: {"not": s}, inner),
    )


subschemas = st.recursive(
    st.just({}),
    lambda inner: st.lists(keywords(inner), min_size=1, max_size=3).map(
        lambda parts: {k: v for p in parts for k, v in p.items()}
    ),
    max_leaves=6,
)
#: Schemas, some behind a ``$ref`` to their ``$defs`` (at the root only: no cycle of references).
schemas = st.one_of(subschemas, st.builds(lambda s: {"$defs": {"d": s}, "$ref": "#/$defs/d"}, subschemas))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, value=values)
def test_the_check_says_what_the_reference_validator_says(schema: dict[str, Any], value: Any) -> None:
    compiled = CompiledSchema(schema, "generated")
    expected = compiled.reference.is_valid(value)
    assert compiled.is_valid(value) == expected, (schema, value)
    assert (compiled.errors(value) == []) == expected


def test_the_reference_is_jsonschemas_draft_2020_12_reading_a_tuple_as_an_array() -> None:
    schema = {"type": "object", "properties": {"point": {"type": "array", "prefixItems": [{"type": "integer"}]}}}
    compiled = CompiledSchema(schema, "point")
    for value in ({"point": [1]}, {"point": ["x"]}, {"point": 3}, {"point": [1.5]}):
        assert compiled.is_valid(value) == Draft202012Validator(schema).is_valid(value)
    assert compiled.is_valid({"point": (1,)}) and not compiled.is_valid({"point": ("x",)})


@pytest.mark.parametrize(
    ("schema", "value", "fits"),
    [
        ({"type": "number", "multipleOf": 0.1}, 0.3, False),  # floats, as the reference computes them
        ({"type": "number"}, float("nan"), True),
        ({"not": {"type": "number"}}, float("nan"), False),  # the compiled check reads a NaN as null
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, {"x": float("inf")}, False),
        (
            {"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}},
            {"x": float("inf")},
            False,
        ),
        ({"type": "object"}, {1: "a"}, True),  # a key JSON would write as a string
        ({"type": "string"}, b"x", False),
    ],
)
def test_values_the_fast_check_reads_otherwise_get_the_references_answer(
    schema: dict[str, Any], value: Any, fits: bool
) -> None:
    compiled = CompiledSchema(schema, "example")
    assert compiled.is_valid(value) is fits
    assert (compiled.errors(value) == []) is fits


def test_patterns_are_ecma_262_read_alike_by_both_checks() -> None:
    digits = CompiledSchema({"type": "string", "pattern": r"^\d+$"}, "digits")
    assert digits.is_valid("12") and not digits.is_valid("١٢")  # ECMA-262's \d: the ASCII digits
    assert digits.errors("x")[0].message == r"'x' does not match '^\\d+$'"
    keyed = {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False}
    compiled = CompiledSchema(keyed, "keyed")
    assert compiled.is_valid({"x-a": 1}) and not compiled.is_valid({"x-a": "1"}) and not compiled.is_valid({"y": 1})
    assert [e.message for e in compiled.errors({"y": 1})] == [
        "Additional properties are not allowed ('y' was unexpected)"
    ]
    assert compiled.reference.is_valid({"x-a": 1}) and not compiled.reference.is_valid({"y": 1})
    with pytest.raises(SchemaError, match=r"pattern '\^abc\\\\Z' is not an ECMA-262"):
        CompiledSchema({"type": "string", "pattern": r"^abc\Z"}, "python-only")  # Python's \Z
    mixed = {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    with pytest.raises(SchemaError, match="patternProperties with unevaluatedProperties"):
        CompiledSchema(mixed, "mixed")


def test_a_schema_too_large_or_too_deep_is_refused_unread() -> None:
    from agentfsm.schemas import MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH

    large = {"type": "object", "description": "x" * MAX_SCHEMA_BYTES}
    with pytest.raises(SchemaError, match="more than the"):
        CompiledSchema(large, "large")
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH + 1):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaError, match="nests deeper"):
        CompiledSchema(deep, "deep")


@pytest.mark.parametrize("value", [1, "a", {"b": b"bytes"}])
def test_references_with_no_end_never_crash_the_check(value: Any) -> None:
    compiled = CompiledSchema({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "looping")
    assert (compiled.errors(value) == []) is compiled.is_valid(value)


def test_a_property_named_after_a_keyword_is_a_name() -> None:
    schema = {"type": "object", "properties": {"pattern": {"type": "string"}, "multipleOf": {"type": "integer"}}}
    compiled = CompiledSchema(schema, "grep")
    assert compiled.is_valid({"pattern": "a.*", "multipleOf": 3})
    assert not compiled.is_valid({"pattern": 1})
    assert [e.message for e in compiled.errors({"pattern": 1})] == ["1 is not of type 'string'"]


@pytest.mark.parametrize("schema", [{"type": "array"}, {"type": "array", "items": {"type": "string"}}])
def test_a_value_too_deep_for_the_reference_is_refused_with_the_reason(schema: dict[str, Any]) -> None:
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    compiled = CompiledSchema(schema, "deep")
    assert not compiled.is_valid(deep)
    [error] = compiled.errors(deep)
    assert "deeper than 64" in error.message


def test_references_inside_the_schema_and_to_meta_schemas_resolve() -> None:
    for schema in (
        {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}},
        {
            "$id": "https://example.com/root.json",
            "$defs": {"n": {"$id": "n.json", "type": "integer"}},
            "properties": {"a": {"$ref": "n.json"}},
        },
        {"$defs": {"n": {"$anchor": "number", "type": "integer"}}, "properties": {"a": {"$ref": "#number"}}},
        {"properties": {"a": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}},
        {"properties": {"a": {"$ref": "http://json-schema.org/draft-07/schema#"}}},
    ):
        compiled = CompiledSchema(schema, "example")
        assert compiled.is_valid({"a": 1}) == Draft202012Validator(schema).is_valid({"a": 1})


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "nope"}, "not a valid JSON schema at type"),
        ({"$ref": "#/$defs/missing"}, "cannot be used"),
        ({"$ref": "https://example.com/schema.json"}, "never fetched"),
        ({"properties": {"a": {"items": {"$ref": "file:///etc/passwd"}}}}, "file:///etc/passwd"),
        ({"patternProperties": {"^a": {"$ref": "#/$defs/missing"}}}, "does not resolve"),
    ],
)
def test_a_schema_that_cannot_be_used_is_refused_when_given(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message) as refused:
        CompiledSchema(schema, "Tool 'x': parameters")
    assert str(refused.value).startswith("Tool 'x': parameters")
