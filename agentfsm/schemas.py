"""JSON schemas that come with data (a tool's parameters, an output type): checked once, then applied without I/O.

A schema is data and may come from elsewhere (an MCP server lists its tools' schemas), so applying
it never fetches a URL or reads a file: a ``$ref`` must point inside the schema (or to a JSON Schema
meta-schema), else the schema is refused with ``SchemaError`` when it is given.

``CompiledSchema`` checks values against a schema (draft 2020-12) many times: first with a compiled
check (``jsonschema_rs``, about five times faster than compiled Python), and, where that one refuses a
value, with the reference validator (``jsonschema``), whose messages say what is wrong. A schema
whose keywords the two read differently is checked by the reference alone: ``pattern`` and
``patternProperties`` (ECMA-262 regular expressions against Python's) and ``multipleOf`` (exact
decimals against floats), and a schema holding a value JSON cannot (a NaN). ``format`` is an
annotation for both, as draft 2020-12 says. Both read a value checked as JSON encodes it (a tuple
is an array).
"""

from __future__ import annotations

import math
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError as JSONSchemaError
from referencing import Registry
from referencing.exceptions import NoSuchResource

from agentfsm.errors import SchemaError
from agentfsm.serialization import MAX_VALUE_DEPTH, nests_deeper

#: Keywords the compiled check and the reference validator may read differently.
_REFERENCE_ONLY = frozenset({"pattern", "patternProperties", "multipleOf"})


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs class


def _refuse_compiled_retrieval(uri: str) -> Any:
    raise ValueError(f"{uri} is outside the schema")


#: The reference validator, reading a tuple as an array, as JSON encodes it and as the compiled check reads it.
_Reference: type[Draft202012Validator] = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("array", lambda _, value: isinstance(value, list | tuple)),
)
#: What the reference validator resolves a ``$ref`` from: the schema itself and the meta-schemas, never a retrieval.
_NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]  # an attrs class


def _read_alike(node: Any) -> bool:
    """Whether the compiled check reads a schema (or a part of it) as the reference validator does.

    It does unless a keyword of ``_REFERENCE_ONLY`` is used, or a value is not JSON (a tuple, a
    key that is not a string, a float that is not finite), which the compiled check reads as
    JSON would write it.
    """
    kind = type(node)
    if kind is dict:
        return all(type(k) is str and k not in _REFERENCE_ONLY and _read_alike(v) for k, v in node.items())
    if kind is list:
        return all(_read_alike(v) for v in node)
    if kind is float:
        return math.isfinite(node)
    return kind in (str, int, bool, type(None))


class CompiledSchema:
    """A JSON schema (draft 2020-12) checked once, to check values against many times.

    ``what`` names the schema in the ``SchemaError`` raised when it cannot be used: not a valid
    schema, or a ``$ref`` that does not resolve inside it.

    >>> CompiledSchema({"type": "object", "required": ["a"]}, "example").is_valid({"a": 1})
    True
    """

    __slots__ = ("_compiled", "reference", "schema")

    def __init__(self, schema: dict[str, Any], what: str) -> None:
        try:
            Draft202012Validator.check_schema(schema)
        except JSONSchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "<root>"
            raise SchemaError(f"{what} is not a valid JSON schema at {where}: {exc.message}") from None
        try:
            compiled = jsonschema_rs.Draft202012Validator(
                schema, validate_formats=False, retriever=_refuse_compiled_retrieval
            )
        except jsonschema_rs.ValidationError as exc:
            reason = str(exc).splitlines()[0]
            raise SchemaError(
                f"{what} cannot be used: {reason}. Every $ref must point inside the schema (a URL or a file is "
                "never fetched): put what it names under $defs."
            ) from None
        self.schema = schema
        #: The reference validator: exact for every keyword, and its errors say what is wrong.
        self.reference = _Reference(schema, registry=_NO_RETRIEVAL)
        self._compiled = compiled if _read_alike(schema) else None

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` fits the schema, as the reference validator says.

        A value nested deeper than ``MAX_VALUE_DEPTH`` fits only where the compiled check says so:
        the reference validator would exhaust Python's recursion limit on it.
        """
        compiled = self._compiled
        if compiled is not None:
            try:
                if compiled.is_valid(value):
                    return True
            except ValueError:  # a Python value JSON has no type for (bytes, a key that is not a string...)
                pass
        return not nests_deeper(value, MAX_VALUE_DEPTH) and bool(self.reference.is_valid(value))

    def errors(self, value: Any) -> list[ValidationError]:
        """What is wrong with ``value``, in the order of where it is (``[]`` when it fits)."""
        if nests_deeper(value, MAX_VALUE_DEPTH):
            return [ValidationError(f"the value nests deeper than {MAX_VALUE_DEPTH} levels")]
        return sorted(self.reference.iter_errors(value), key=lambda e: list(e.path))
