"""Build a Tool from a typed Python function: the JSON schema comes from its signature."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, NamedTuple, overload

from pydantic import ConfigDict, Field, TypeAdapter, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from agentfsm.errors import ConfigurationError, SchemaGenerationError
from agentfsm.interrupts import ASK_USER
from agentfsm.reconcile import ReconcileFunction
from agentfsm.retries import Retry
from agentfsm.tools.tool import IDEMPOTENCY_KEY, REPORT_PROGRESS, Tool, state_inputs


def _strip_titles(node: Any) -> Any:
    """Remove pydantic's auto-generated titles: noise for the model."""
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _strip_property_titles(schema: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    schema.pop("title", None)
    if "properties" in schema:
        schema["properties"] = {name: _strip_titles(prop) for name, prop in schema["properties"].items()}
    if "$defs" in schema:
        schema["$defs"] = {name: _strip_titles(d) for name, d in schema["$defs"].items()}
    return schema


def _type_hints(function: Callable[..., Any], skip: set[str] | frozenset[str]) -> dict[str, Any]:
    """``function``'s type hints, resolved, except those of the parameters in ``skip``.

    Those are not in the schema, and their types may be imported for type checkers only (a
    ``report_progress: ProgressReporter`` whose import sits under ``if TYPE_CHECKING:``).
    """
    annotations = getattr(function, "__annotations__", None) or {}
    if not skip & annotations.keys():
        return typing.get_type_hints(function, include_extras=True)
    kept = types.SimpleNamespace(__annotations__={k: v for k, v in annotations.items() if k not in skip})
    module_globals = getattr(inspect.unwrap(function), "__globals__", {})
    return typing.get_type_hints(kept, globalns=module_globals, include_extras=True)


def function_parameters_schema(
    function: Callable[..., Any], skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The JSON schema of ``function``'s parameters, except those in ``skip``.

    ``Annotated[T, "text"]`` gives a description; parameters with defaults are not required.
    """
    return fields_schema(getattr(function, "__name__", repr(function)), parameter_fields(function, skip))


class Parameter(NamedTuple):
    """A parameter of a tool's function, as its schema describes it."""

    hint: Any
    #: ``...`` for a required parameter.
    default: Any
    description: str | None


def parameter_fields(
    function: Callable[..., Any], skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, Parameter]:
    """``function``'s parameters but those in ``skip``, by name.

    ``Annotated[T, "text"]`` is ``T`` described by ``"text"``; a parameter with a default keeps it.
    """
    name = getattr(function, "__name__", repr(function))
    signature = inspect.signature(function)
    try:
        hints = _type_hints(function, skip)
    except NameError as exc:
        raise SchemaGenerationError(f"Cannot resolve the type hints of {name!r}: {exc}") from exc
    fields: dict[str, Parameter] = {}
    for param_name, param in signature.parameters.items():
        if param_name in skip or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param_name not in hints:
            raise ConfigurationError(  # Haystack's sentence first: its users' tests match it
                f"Function {name!r}: parameter {param_name!r} does not have a type hint. Every parameter of a "
                f"tool function needs one, and parameter {param_name!r} has no type hint: add one (e.g. `city: str`)."
            )
        hint = hints[param_name]
        description = None
        if typing.get_origin(hint) is typing.Annotated:
            base, *metadata = typing.get_args(hint)
            description = next((m for m in metadata if isinstance(m, str)), None)
            hint = base
        default = ... if param.default is inspect.Parameter.empty else param.default
        if default is None and hint is not Any and type(None) not in typing.get_args(hint):
            # `x: int = None` accepts None: say so in the schema (PEP 484's implicit Optional).
            hint = hint | None
        fields[param_name] = Parameter(hint, default, description)
    return fields


def fields_schema(name: str, fields: dict[str, Parameter], description: str = "") -> dict[str, Any]:
    """The JSON schema of an object with these fields (``description``: the schema's own, if any)."""
    pydantic_fields: dict[str, Any] = {
        key: (p.hint, Field(default=p.default, description=p.description)) for key, p in fields.items()
    }
    try:
        model = create_model(
            f"{name}_parameters",
            __config__=ConfigDict(arbitrary_types_allowed=False),
            __doc__=description,
            **pydantic_fields,
        )
        schema = model.model_json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
        raise SchemaGenerationError(
            f"Cannot generate a JSON schema for function {name!r}: {exc}. Use JSON-friendly parameter types "
            "(str, int, float, bool, list, dict, Literal, Optional, dataclasses, pydantic models)."
        ) from exc
    return _strip_property_titles(schema)


def json_schema_for(tp: Any, name: str) -> dict[str, Any]:
    """The JSON schema of one type (``SchemaGenerationError`` if JSON schema cannot describe it)."""
    try:
        schema = TypeAdapter(tp).json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
        raise SchemaGenerationError(f"Cannot describe {name!r} of type {tp!r} as JSON schema: {exc}") from exc
    return _strip_property_titles(schema)


def add_property(schema: dict[str, Any], name: str, property_schema: dict[str, Any]) -> None:
    """Add a property to an object schema, moving its ``$defs`` up so that references still resolve."""
    property_schema = dict(property_schema)
    defs = property_schema.pop("$defs", None)
    if defs:
        schema.setdefault("$defs", {}).update(defs)
    schema.setdefault("properties", {})[name] = property_schema


def create_tool_from_function(
    function: Callable[..., Any],
    name: str | None = None,
    description: str | None = None,
    inputs_from_state: dict[str, str] | None = None,
    outputs_to_state: dict[str, dict[str, Any]] | None = None,
    outputs_to_string: dict[str, Any] | None = None,
    idempotent: bool = False,
    timeout: float | None = None,
    retry: Retry | None = None,
    reconcile: ReconcileFunction | None = None,
) -> Tool:
    """Create a Tool from a typed function; name and description default to its name and docstring.

    Parameters fed from State (``inputs_from_state``) are left out of the schema the model sees, and so
    are an ``idempotency_key`` parameter (the run gives it: see ``Tool.takes_idempotency_key``) and a
    ``report_progress`` one (``agentfsm.tools.progress``) and an ``ask_user`` one (``agentfsm.interrupts``).
    """
    skip = state_inputs(inputs_from_state) | {IDEMPOTENCY_KEY, REPORT_PROGRESS, ASK_USER}
    return Tool(
        name=name or function.__name__,
        description=description if description is not None else inspect.getdoc(function) or "",
        parameters=function_parameters_schema(function, skip),
        function=function,
        inputs_from_state=inputs_from_state,
        outputs_to_state=outputs_to_state,
        outputs_to_string=outputs_to_string,
        idempotent=idempotent,
        timeout=timeout,
        retry=retry,
        reconcile=reconcile,
    )


@overload
def tool(function: Callable[..., Any]) -> Tool: ...


@overload
def tool(
    function: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    inputs_from_state: dict[str, str] | None = None,
    outputs_to_state: dict[str, dict[str, Any]] | None = None,
    outputs_to_string: dict[str, Any] | None = None,
    idempotent: bool = False,
    timeout: float | None = None,
    retry: Retry | None = None,
    reconcile: ReconcileFunction | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    inputs_from_state: dict[str, str] | None = None,
    outputs_to_state: dict[str, dict[str, Any]] | None = None,
    outputs_to_string: dict[str, Any] | None = None,
    idempotent: bool = False,
    timeout: float | None = None,
    retry: Retry | None = None,
    reconcile: ReconcileFunction | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator that turns a typed function into a Tool; use bare (``@tool``) or with options."""

    def decorate(fn: Callable[..., Any]) -> Tool:
        return create_tool_from_function(
            fn,
            name=name,
            description=description,
            inputs_from_state=inputs_from_state,
            outputs_to_state=outputs_to_state,
            outputs_to_string=outputs_to_string,
            idempotent=idempotent,
            timeout=timeout,
            retry=retry,
            reconcile=reconcile,
        )

    return decorate(function) if function is not None else decorate
