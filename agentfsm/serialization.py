"""Turning configuration and data into JSON-compatible values and back, safely.

Nothing here ever unpickles or imports a module just because serialized data names it: class,
type and function paths are resolved only inside an allow-list of module prefixes. agentfsm's own
modules, ``builtins`` and ``typing`` are always allowed; users allow their own modules in one of
three ways:

- process-wide: ``agentfsm.serialization.allow_modules("myapp.tools")``
- per call: ``Agent.from_dict(data, allowed_modules=["myapp.tools"])``
- by environment: ``AGENTFSM_ALLOWED_MODULES=myapp.tools,myapp.hooks``
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import math
import os
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import pydantic_core

from agentfsm.errors import ConfigurationTypeError, DeserializationError, SerializationError

ENV_ALLOWED_MODULES = "AGENTFSM_ALLOWED_MODULES"
_ALWAYS_ALLOWED = ("agentfsm", "builtins", "typing")
_user_allowed: set[str] = set()

#: Key that marks a tagged (non-plain-JSON) value in serialized data.
TAG = "__agentfsm__"


def allow_modules(*prefixes: str) -> None:
    """Allow deserialization to resolve classes and functions from modules under ``prefixes``."""
    for prefix in prefixes:
        if not prefix or not all(part.isidentifier() for part in prefix.split(".")):
            raise ValueError(f"{prefix!r} is not a module path; pass dotted names such as 'myapp.tools'.")
        _user_allowed.add(prefix)


def allowed_prefixes(extra: Iterable[str] | None = None) -> tuple[str, ...]:
    """All module prefixes currently allowed (built-in, process-wide, environment and ``extra``)."""
    env = [p.strip() for p in os.environ.get(ENV_ALLOWED_MODULES, "").split(",") if p.strip()]
    return (*_ALWAYS_ALLOWED, *sorted(_user_allowed), *env, *(extra or ()))


def _check_allowed(module: str, extra: Iterable[str] | None) -> None:
    prefixes = allowed_prefixes(extra)
    if any(module == p or module.startswith(p + ".") for p in prefixes):
        return
    raise DeserializationError(
        f"Refusing to import from module {module!r}: it is not in the allow-list. Allow it with "
        f"agentfsm.serialization.allow_modules({module!r}), or allowed_modules=[{module!r}] on the "
        f"from_dict/load call, or the environment variable {ENV_ALLOWED_MODULES}={module}."
    )


def import_path(path: str, allowed_modules: Iterable[str] | None = None) -> Any:
    """Resolve ``"package.module.Qual.name"`` to an object, importing only allow-listed modules."""
    if not isinstance(path, str) or not path or "." not in path:
        raise DeserializationError(f"{path!r} is not a dotted import path such as 'myapp.tools.search'.")
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        _check_allowed(module_name, allowed_modules)
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise DeserializationError(f"Module {module_name!r} has no attribute path {path!r}.") from None
        return obj
    raise DeserializationError(f"Could not import {path!r}: no importable module in that path.")


def import_named_module(name: str) -> types.ModuleType:
    """Import a module that the user named explicitly (``agentfsm resume --agent myapp:agent``), not one named by data."""
    return importlib.import_module(name)


def object_path(obj: Any) -> str:
    """The import path of a class or module-level function."""
    # Methods of built-in types (``str.upper``) have no __module__ of their own: take their class's.
    module = getattr(obj, "__module__", None) or getattr(getattr(obj, "__objclass__", None), "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise SerializationError(
            f"{obj!r} cannot be serialized by reference: define it at module level (not a lambda or a "
            "function nested in another function) so that it can be imported by name."
        )
    return f"{module}.{qualname}"


def rebuild(cls: Any, data: Any, allowed_modules: Iterable[str] | None = None) -> Any:
    """``cls.from_dict(data)``, passing ``allowed_modules`` on when that ``from_dict`` accepts it."""
    from_dict = getattr(cls, "from_dict", None)
    if not callable(from_dict):
        raise DeserializationError(f"{object_path(cls)} has no from_dict(): it cannot be deserialized.")
    try:
        accepts = "allowed_modules" in inspect.signature(from_dict).parameters
    except (TypeError, ValueError):
        accepts = False
    return from_dict(data, allowed_modules=allowed_modules) if accepts else from_dict(data)


def object_to_dict(obj: Any) -> dict[str, Any]:
    """An object that has ``to_dict`` as data: its class's import path, and what ``to_dict`` returns."""
    to_dict = getattr(obj, "to_dict", None)
    if not callable(to_dict):
        raise ConfigurationTypeError(f"{type(obj).__name__} has no to_dict(): it cannot be serialized.")
    return {"type": object_path(type(obj)), "data": to_dict()}


def object_from_dict(data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Any:
    """Invert ``object_to_dict``; the class is resolved through the allow-list."""
    return rebuild(import_path(data["type"], allowed_modules), data["data"], allowed_modules)


# -- callables ------------------------------------------------------------------------------------


def serialize_callable(fn: Callable[..., Any]) -> str:
    """Serialize a module-level function (or class) as its import path."""
    return object_path(fn)


def deserialize_callable(path: str, allowed_modules: Iterable[str] | None = None) -> Callable[..., Any]:
    """Resolve a path made by ``serialize_callable``."""
    obj = import_path(path, allowed_modules)
    if not callable(obj):
        raise DeserializationError(f"{path!r} does not name a callable.")
    return typing.cast(Callable[..., Any], obj)


# -- types ----------------------------------------------------------------------------------------

_BUILTIN_TYPES: dict[str, Any] = {
    t.__name__: t for t in (str, int, float, bool, bytes, list, dict, tuple, set, frozenset, type(None), object)
}
_BUILTIN_TYPES["None"] = type(None)
_TYPING_NAMES = {"Any", "Union", "Optional", "Literal", "List", "Dict", "Tuple", "Set"}


def serialize_type(tp: Any) -> str:
    """Serialize a type annotation (``str``, ``list[ChatMessage]``, ``int | None``...) to a string."""
    if tp is typing.Any:
        return "typing.Any"
    if tp is type(None) or tp is None:
        return "None"
    if tp is Ellipsis:
        return "..."
    origin = typing.get_origin(tp)
    if origin is None:
        if isinstance(tp, type):
            return tp.__name__ if tp.__module__ == "builtins" else object_path(tp)
        raise SerializationError(f"Cannot serialize the type annotation {tp!r}.")
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return f"typing.Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (typing.Union, types.UnionType):
        return f"typing.Union[{', '.join(serialize_type(a) for a in args)}]"
    head = serialize_type(origin)
    return f"{head}[{', '.join(serialize_type(a) for a in args)}]" if args else head


def deserialize_type(text: str, allowed_modules: Iterable[str] | None = None) -> Any:
    """Parse a string made by ``serialize_type`` without evaluating code."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise DeserializationError(f"{text!r} is not a type annotation.") from None
    return _type_from_ast(tree, text, allowed_modules)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _type_from_ast(node: ast.expr, text: str, allowed: Iterable[str] | None) -> Any:
    if isinstance(node, ast.Constant) and node.value is None:
        return type(None)
    if isinstance(node, ast.Constant) and node.value is Ellipsis:
        return Ellipsis
    if isinstance(node, ast.Subscript):
        head = _type_from_ast(node.value, text, allowed)
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head is typing.Literal:
            values = tuple(ast.literal_eval(e) for e in elts)
            return typing.Literal.__getitem__(values)
        args = tuple(_type_from_ast(e, text, allowed) for e in elts)
        try:
            return head[args if len(args) > 1 else args[0]]
        except TypeError as exc:
            raise DeserializationError(f"Invalid type annotation {text!r}: {exc}") from None
    name = _dotted(node)
    if name is None:
        raise DeserializationError(f"Unsupported construct in type annotation {text!r}.")
    if name in _BUILTIN_TYPES:
        return _BUILTIN_TYPES[name]
    if name.startswith("typing.") and name.removeprefix("typing.") in _TYPING_NAMES:
        return getattr(typing, name.removeprefix("typing."))
    return import_path(name, allowed)


# -- values ---------------------------------------------------------------------------------------


_VALUE_TAGS = frozenset({"dict", "tuple", "set", "frozenset", "object", "pydantic", "dataclass", "int", "float"})

#: How deep State values may nest (a list in a dict is two levels): deeper data is refused when
#: written and when read, before Python's own recursion limit could be reached.
MAX_VALUE_DEPTH = 64

#: orjson writes integers in this range; others are tagged in State values (``serialize_value``).
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
#: Values written as they are (ints only within orjson's range, floats only when finite).
_PLAIN_SCALARS = frozenset({type(None), bool, str})


def serialize_value(value: Any) -> Any:
    """Convert a State value to JSON-compatible data; non-JSON values are tagged with ``TAG``.

    Integers beyond 64 bits and non-finite floats are tagged too, so that every JSON writer keeps
    them exactly. Values nested deeper than ``MAX_VALUE_DEPTH`` raise ``SerializationError``.
    """
    return _serialize(value, 0)


def _serialize(value: Any, depth: int) -> Any:
    # Fast paths for exact JSON types (snapshots are taken at every transition of a durable run).
    exact = type(value)
    if exact in _PLAIN_SCALARS:
        return value
    if exact is int:
        return value if _INT_MIN <= value <= _INT_MAX else {TAG: "int", "value": str(value)}
    if exact is float:
        return value if math.isfinite(value) else {TAG: "float", "value": repr(value)}
    if depth >= MAX_VALUE_DEPTH:
        raise SerializationError(
            f"A State value nests deeper than {MAX_VALUE_DEPTH} levels: flatten it, or keep it out of State."
        )
    depth += 1
    if exact is dict and TAG not in value:
        plain = {}
        for k, v in value.items():
            if type(k) is not str:
                break
            plain[k] = v if type(v) in _PLAIN_SCALARS else _serialize(v, depth)
        else:
            return plain
    elif exact is list:
        return [v if type(v) in _PLAIN_SCALARS else _serialize(v, depth) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):  # subclasses, as the plain type
        return _serialize(int(value) if isinstance(value, int) else float(value), depth)
    if isinstance(value, list):
        return [_serialize(v, depth) for v in value]
    if isinstance(value, dict):
        if TAG not in value and all(isinstance(k, str) for k in value):
            return {k: _serialize(v, depth) for k, v in value.items()}
        return {TAG: "dict", "items": [[_serialize(k, depth), _serialize(v, depth)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {TAG: "tuple", "items": [_serialize(v, depth) for v in value]}
    if isinstance(value, (set, frozenset)):
        kind = "set" if isinstance(value, set) else "frozenset"
        return {TAG: kind, "items": [_serialize(v, depth) for v in value]}
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and callable(getattr(type(value), "from_dict", None)):
        return {TAG: "object", "type": object_path(type(value)), "data": _serialize(to_dict(), depth)}
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return {TAG: "pydantic", "type": object_path(type(value)), "data": model_dump(mode="json")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _serialize(getattr(value, f.name), depth) for f in dataclasses.fields(value)}
        return {TAG: "dataclass", "type": object_path(type(value)), "data": fields}
    raise SerializationError(
        f"Cannot serialize a value of type {type(value).__qualname__}: use JSON types, tuples, sets, "
        "dataclasses, pydantic models, or give the class to_dict() and a from_dict() classmethod."
    )


def deserialize_value(data: Any, allowed_modules: Iterable[str] | None = None) -> Any:
    """Invert ``serialize_value``; malformed or too deeply nested data raises ``DeserializationError``."""
    return _deserialize(data, allowed_modules, 0)


def _deserialize(data: Any, allowed_modules: Iterable[str] | None, depth: int) -> Any:
    if not isinstance(data, (list, dict)):
        return data
    if depth >= MAX_VALUE_DEPTH:
        raise DeserializationError(f"A serialized value nests deeper than {MAX_VALUE_DEPTH} levels.")
    depth += 1
    if isinstance(data, list):
        return [_deserialize(v, allowed_modules, depth) for v in data]
    kind = data.get(TAG)
    if kind is None:
        return {k: _deserialize(v, allowed_modules, depth) for k, v in data.items()}
    if not isinstance(kind, str) or kind not in _VALUE_TAGS:
        raise DeserializationError(
            f"Unknown value tag {kind!r} in {_brief(data)}; expected one of {sorted(_VALUE_TAGS)}."
        )
    try:
        if kind == "int":
            return _tagged_number(data["value"], int)
        if kind == "float":
            number = _tagged_number(data["value"], float)
            if math.isfinite(number):
                raise ValueError(f"{number} is finite: it is written as a plain number")
            return number
        if kind == "dict":
            return {
                _deserialize(k, allowed_modules, depth): _deserialize(v, allowed_modules, depth)
                for k, v in data["items"]
            }
        if kind in ("tuple", "set", "frozenset"):
            items = [_deserialize(v, allowed_modules, depth) for v in data["items"]]
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        cls = import_path(data["type"], allowed_modules)
        if kind == "object":
            return cls.from_dict(_deserialize(data["data"], allowed_modules, depth))
        if kind == "pydantic":
            return cls.model_validate(data["data"])
        fields = {k: _deserialize(v, allowed_modules, depth) for k, v in data["data"].items()}  # a dataclass
        return cls(**fields)
    except DeserializationError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DeserializationError(f"Malformed tagged value {_brief(data)}: {exc!r}") from exc


def nests_deeper(data: Any, limit: int) -> bool:
    """Whether JSON-like ``data`` (dicts and lists) nests deeper than ``limit`` levels; found without recursion."""
    level: list[Any] = [data]
    for _ in range(limit + 1):
        level = [
            child
            for value in level
            for child in (value.values() if isinstance(value, dict) else value)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return False
    return True


def _tagged_number(text: Any, kind: type[int] | type[float]) -> Any:
    """The number a tagged value's text names (ValueError unless it is that kind's decimal text)."""
    if not isinstance(text, str):
        raise ValueError(f"a tagged {kind.__name__} holds its digits as a string, got {type(text).__name__}")
    return kind(text)


def _brief(data: Any) -> str:
    """``repr(data)``, cut short: an error message names the value without repeating a huge one."""
    text = repr(data)
    return text if len(text) <= 200 else text[:200] + "..."


# -- JSON text ------------------------------------------------------------------------------------


def dump_json(data: Any, *, indent: bool = False, sort_keys: bool = False) -> bytes:
    r"""JSON-compatible ``data`` as UTF-8 JSON text, exactly as ``load_json`` gives it back.

    orjson writes almost everything. What it refuses, integers beyond 64 bits and strings holding
    lone surrogates (``os.listdir`` gives those for file names that are not UTF-8), is written by
    the standard library instead: surrogates as ``\udcff`` escapes, in plain ASCII.
    """
    options = (orjson.OPT_INDENT_2 if indent else 0) | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        return orjson.dumps(data, option=options)
    except TypeError:
        pass
    try:
        # Compact, as orjson writes it (decision fingerprints hash this text).
        separators = (",", ": ") if indent else (",", ":")
        text = json.dumps(
            data, indent=2 if indent else None, separators=separators, sort_keys=sort_keys, allow_nan=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"Cannot write this data as JSON: {exc}.") from None
    return text.encode("ascii")


def load_json(data: bytes | str) -> Any:
    r"""Parse JSON text; ``DeserializationError`` saying why when it is not valid JSON.

    Integers of any size come back as ints (never as floats), and ``\udcff`` escapes as the lone
    surrogates ``dump_json`` wrote. NaN and infinities are refused, as JSON does.
    """
    try:
        return pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as exc:
        first = exc
    # pydantic-core refuses lone surrogates and nesting deeper than ~200 levels: the standard
    # library reads both, up to the interpreter's recursion limit.
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except ValueError:
        raise DeserializationError(f"The data is not valid JSON: {first}.") from None
    except RecursionError:
        raise DeserializationError("The JSON nests deeper than it can be read.") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
