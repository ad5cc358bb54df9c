"""JSON schemas that come with data (a tool's parameters, an output type): checked once, then applied without I/O.

A schema is data and may come from elsewhere (an MCP server lists its tools' schemas), so applying
it never fetches a URL or reads a file: every ``$ref`` must resolve inside the schema (or to a JSON
Schema meta-schema), else the schema is refused with ``SchemaError`` when it is given. Nor can a
schema hold the process: one larger than ``MAX_SCHEMA_BYTES`` or nested deeper than
``MAX_SCHEMA_DEPTH`` is refused, and a ``pattern`` is an ECMA-262 regular expression (as JSON Schema
says) read by jsonschema-rs's engine, which matches in linear time and, for the backreferences and
look-arounds that need backtracking, gives up past ``PATTERN_BACKTRACK_LIMIT`` steps (the value then
does not fit). A pattern that engine cannot read refuses the schema.

``CompiledSchema`` checks values against a schema (draft 2020-12) many times. The reference is
``jsonschema``'s validator, whose messages say what is wrong (its ``pattern``, ``patternProperties``
and ``additionalProperties`` read patterns as above); a compiled check (``jsonschema_rs``, about
five times faster than compiled Python code) answers first wherever it reads schema and value as
the reference does, and the reference decides wherever it refuses one. It reads them otherwise,
so the reference alone checks:

- schemas using ``multipleOf`` (exact decimals, against floats), or holding data JSON cannot (a NaN, a tuple);
- values holding a NaN or an infinity (read as null by the compiled check), or nested deeper than
  ``MAX_VALUE_DEPTH``, or holding what JSON has no type for (bytes).

Both read a tuple in a value as an array, as JSON encodes it; ``format`` is an annotation for both,
as draft 2020-12 says.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import jsonschema_specifications
import orjson
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError as JSONSchemaError
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012

from agentfsm.errors import SchemaError
from agentfsm.serialization import MAX_VALUE_DEPTH, nests_deeper

#: Keywords the compiled check and the reference validator read differently.
_REFERENCE_ONLY = frozenset({"multipleOf"})
#: The largest schema (as JSON) and the deepest one applied: past them a schema is refused unread.
MAX_SCHEMA_BYTES = 4 * 1024 * 1024
MAX_SCHEMA_DEPTH = 128
#: The backtracking steps a pattern with backreferences or look-arounds may take on one value.
PATTERN_BACKTRACK_LIMIT = 100_000
#: How both checks read patterns: ECMA-262, in bounded time.
_PATTERNS = jsonschema_rs.FancyRegexOptions(backtrack_limit=PATTERN_BACKTRACK_LIMIT)
#: Keywords (draft 2020-12) whose value is a schema; a list of schemas; a map of names to schemas.
_SUBSCHEMA = frozenset(
    {
        "items",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SUBSCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
#: Where a value's containers are: a tuple is an array, as JSON encodes it.
_CONTAINERS = (dict, list, tuple)
#: Values both checks read alike, needing no look inside.
_SCALARS = frozenset({int, str, bool, type(None)})


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs class


@functools.lru_cache(maxsize=4096)
def _pattern_check(pattern: str) -> jsonschema_rs.Validator:
    """A check that a string matches ``pattern`` (anywhere in it), in bounded time; ``ValueError`` for no pattern it reads."""
    try:
        return jsonschema_rs.Draft202012Validator({"pattern": pattern}, pattern_options=_PATTERNS)
    except jsonschema_rs.ValidationError:
        raise ValueError(pattern) from None


def _matches(pattern: str, text: Any) -> bool:
    """Whether the string ``text`` matches ``pattern``, as the compiled check reads it (a pattern is checked when its schema is)."""
    return isinstance(text, str) and _pattern_check(pattern).is_valid(text)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(_matches(p, k) for p in patterns)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        shown = ", ".join(repr(k) for k in sorted(extras, key=str))
        yield ValidationError(
            f"Additional properties are not allowed ({shown} {'was' if len(extras) == 1 else 'were'} unexpected)"
        )


#: The reference validator, reading a tuple as an array, as JSON encodes it and as the compiled check
#: reads it, and patterns as the compiled check reads them (``jsonschema`` would use Python's
#: backtracking ``re``, which one pattern can keep busy for ever).
_Reference: type[Draft202012Validator] = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("array", lambda _, value: isinstance(value, list | tuple)),
)
#: What a ``$ref`` resolves from: the schema itself and the meta-schemas, never a retrieval.
_NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]  # an attrs class
_META_SCHEMAS: Registry[Any] = jsonschema_specifications.REGISTRY.combine(_NO_RETRIEVAL)
#: The URI a schema without an ``$id`` of its own is known by while its references are resolved.
_SCHEMA_URI = "urn:agentfsm:schema"


def _check_references(resource: Resource[Any], resolver: Any) -> None:
    """Resolve every ``$ref`` and ``$dynamicRef`` of ``resource`` and its subschemas with ``resolver`` (a ``referencing`` one).

    ``Unresolvable`` for one that does not resolve.
    """
    resolver = resolver.in_subresource(resource)
    contents = resource.contents
    if isinstance(contents, dict):
        for key in ("$ref", "$dynamicRef"):
            ref = contents.get(key)
            if isinstance(ref, str):
                resolver.lookup(ref)
    for subresource in resource.subresources():
        _check_references(subresource, resolver)


def _json_data(value: Any) -> bool:
    """Whether ``value`` is JSON as it is: string keys, finite numbers, lists (not tuples)."""
    kind = type(value)
    if kind is dict:
        return all(type(k) is str and _json_data(v) for k, v in value.items())
    if kind is list:
        return all(_json_data(v) for v in value)
    if kind is float:
        return math.isfinite(value)
    return kind in (str, int, bool, type(None))


def _read_alike(schema: Any) -> bool:
    """Whether the compiled check reads ``schema`` (a schema, or a part in a schema's place) as the reference does."""
    if type(schema) is not dict:
        return type(schema) is bool
    for key, value in schema.items():
        if key in _REFERENCE_ONLY:
            return False
        if key in _SUBSCHEMA:
            alike = _read_alike(value)
        elif key in _SUBSCHEMA_LISTS:
            alike = type(value) is list and all(_read_alike(s) for s in value)
        elif key in _SUBSCHEMA_MAPS:
            alike = type(value) is dict and all(_read_alike(s) for s in value.values())
        else:  # data: const, enum, bounds, required, annotations...
            alike = _json_data(value)
        if not alike:
            return False
    return True


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether the compiled check reads ``value`` as the reference does: its floats finite, ``MAX_VALUE_DEPTH`` levels at most.

    Containers of other types than ``dict``, ``list`` and ``tuple`` (subclasses) are left to the reference.
    """
    kind = type(value)
    if kind is dict:
        items: Any = value.values()
    elif kind is list or kind is tuple:
        items = value
    elif isinstance(value, float):
        return math.isfinite(value)
    else:
        return not isinstance(value, _CONTAINERS)
    if depth == MAX_VALUE_DEPTH:
        return False
    for item in items:  # noqa: SIM110 (a loop: all() over a generator doubles the cost of every tool call's check)
        if type(item) not in _SCALARS and not _plain(item, depth + 1):
            return False
    return True


def _check_bounds(schema: Any, what: str) -> None:
    """``SchemaError`` for a schema too large or too deeply nested to check in bounded time."""
    if nests_deeper(schema, MAX_SCHEMA_DEPTH):
        raise SchemaError(f"{what} nests deeper than {MAX_SCHEMA_DEPTH} levels: it is not checked.")
    try:
        size = len(orjson.dumps(schema, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):  # not JSON data: the meta-schema check says why
        return
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(
            f"{what} is {size} bytes of JSON, more than the {MAX_SCHEMA_BYTES} a schema may be: it is not checked."
        )


def _check_schema(schema: Any, what: str) -> None:
    """``SchemaError`` unless ``schema`` is a valid draft 2020-12 schema whose patterns are read in bounded time."""
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path) or "<root>"
        raise SchemaError(f"{what} is not a valid JSON schema at {where}: {exc.message}") from None
    except ValueError:  # data JSON has no form for (a tuple, a NaN...): the reference's own check reads it
        try:
            Draft202012Validator.check_schema(schema)
        except JSONSchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "<root>"
            raise SchemaError(f"{what} is not a valid JSON schema at {where}: {exc.message}") from None
    subschemas = list(_subschemas(schema))
    for subschema in subschemas:
        patterns = [subschema.get("pattern"), *subschema.get("patternProperties", {})]
        for pattern in patterns:
            try:
                if isinstance(pattern, str):
                    _pattern_check(pattern)
            except ValueError:
                raise SchemaError(
                    f"{what} cannot be used: its pattern {pattern[:200]!r} is not an ECMA-262 regular expression "
                    "that can be checked in bounded time (JSON Schema's patterns are ECMA-262)."
                ) from None
    keywords = {key for subschema in subschemas for key in subschema}
    if {"patternProperties", "unevaluatedProperties"} <= keywords:
        raise SchemaError(
            f"{what} cannot be used: it combines patternProperties with unevaluatedProperties, which is not "
            "checked in bounded time; use additionalProperties."
        )


def _subschemas(schema: Any) -> Iterator[dict[str, Any]]:
    """``schema`` and every schema inside it (its keywords' subschemas), as dicts."""
    if type(schema) is not dict:
        return
    yield schema
    for key, value in schema.items():
        if key in _SUBSCHEMA:
            yield from _subschemas(value)
        elif key in _SUBSCHEMA_LISTS and type(value) is list:
            for item in value:
                yield from _subschemas(item)
        elif key in _SUBSCHEMA_MAPS and type(value) is dict:
            for item in value.values():
                yield from _subschemas(item)


class CompiledSchema:
    """A JSON schema (draft 2020-12) checked once, to check values against many times.

    ``what`` names the schema in the ``SchemaError`` raised when it cannot be used: not a valid
    schema, or a ``$ref`` that does not resolve inside it.

    >>> CompiledSchema({"type": "object", "required": ["a"]}, "example").is_valid({"a": 1})
    True
    """

    __slots__ = ("_compiled", "reference", "schema")

    def __init__(self, schema: dict[str, Any], what: str) -> None:
        _check_bounds(schema, what)
        _check_schema(schema, what)
        resource = DRAFT202012.create_resource(schema)
        try:
            registry = _META_SCHEMAS.with_resource(_SCHEMA_URI, resource)
            _check_references(resource, registry.resolver(base_uri=_SCHEMA_URI))
        except Unresolvable as exc:
            raise SchemaError(
                f"{what} cannot be used: its $ref {exc.ref!r} does not resolve inside it. A $ref must point "
                "inside the schema (a URL or a file is never fetched): put what it names under $defs."
            ) from None
        self.schema = schema
        #: The reference validator: exact for every keyword, and its errors say what is wrong.
        self.reference = _Reference(schema, registry=_NO_RETRIEVAL)
        self._compiled: jsonschema_rs.Validator | None = None
        if _read_alike(schema):
            # A schema it cannot compile (a meta-schema it does not hold...) is checked by the reference alone.
            with contextlib.suppress(jsonschema_rs.ValidationError, ValueError):
                self._compiled = jsonschema_rs.Draft202012Validator(
                    schema, validate_formats=False, retriever=_refuse_retrieval, pattern_options=_PATTERNS
                )

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` fits the schema, as the reference validator says.

        A value nested deeper than ``MAX_VALUE_DEPTH`` does not fit: the reference validator would
        exhaust Python's recursion limit on it.
        """
        compiled = self._compiled
        if compiled is not None and _plain(value):
            try:
                if compiled.is_valid(value):
                    return True
            except ValueError:  # a Python value JSON has no type for (bytes, a key that is not a string...)
                pass
        if nests_deeper(value, MAX_VALUE_DEPTH):
            return False
        try:
            return bool(self.reference.is_valid(value))
        except RecursionError:  # the schema's references lead to each other without reading the value
            return False

    def errors(self, value: Any) -> list[ValidationError]:
        """What is wrong with ``value``, in the order of where it is: ``[]`` exactly when it fits (``is_valid``)."""
        if self.is_valid(value):
            return []
        if nests_deeper(value, MAX_VALUE_DEPTH):
            return [ValidationError(f"the value nests deeper than {MAX_VALUE_DEPTH} levels")]
        try:
            return sorted(self.reference.iter_errors(value), key=lambda e: list(e.path))
        except RecursionError:
            return [ValidationError("the schema's $refs lead to each other without end")]
