"""Turning configuration and data into JSON-compatible values and back, safely.

Nothing here unpickles, evaluates or imports anything just because serialized data names it. A
dotted path in data (``"myapp.tools.search"``) resolves only when all of this holds:

- its module is inside an allowed module: agentfsm's own modules always are; users allow their
  own in one of three ways:

  - process-wide: ``agentfsm.serialization.allow_modules("myapp.tools")``
  - per call: ``Agent.from_dict(data, allowed_modules=["myapp.tools"])``
  - by environment: ``AGENTFSM_ALLOWED_MODULES=myapp.tools,myapp.hooks``

- each step after the module goes down through classes only (``myapp.tools.Search.run``), never
  through another module (``agentfsm.serialization.os.system`` is refused);
- the object found was defined in an allowed module (its own ``__module__``), so a name an allowed
  module imported from elsewhere is refused;
- it is the kind of object the slot expects: a class where a class is expected (tools, hooks,
  generators, strategies, State values...), a function or class where a callable is expected (a
  tool's function, a State handler, a callback).

``builtins`` offers only the plain data types (``str``, ``int``, ``float``, ``bool``, ``bytes``,
``list``, ``dict``, ``tuple``, ``set``, ``frozenset``, ``NoneType``, ``object``) and, where a
callable is expected, the few of their methods listed in ``BUILTIN_METHODS`` (``str.upper``,
``str.split``...); never ``eval``, ``open``, ``str.format`` or the like. Type
annotations may use ``typing.Any``, ``Union``, ``Optional``, ``Literal``, ``List``, ``Dict``,
``Tuple`` and ``Set``; no other function or class of either is ever resolved. Where a callable is
expected, agentfsm itself offers only the functions its packages export (``agentfsm.merge_lists``)
and the tools it declares, never its machinery; as tagged values (in State, in tool results), only
its messages and decisions. Whoever loads a document checks its structure (and a snapshot's
version, agent fingerprint and State keys) before anything it names is resolved and called.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import math
import os
import reprlib
import sys
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal

import orjson
import pydantic_core

from agentfsm.errors import ConfigurationTypeError, DeserializationError, SerializationError

ENV_ALLOWED_MODULES = "AGENTFSM_ALLOWED_MODULES"
_ALWAYS_ALLOWED = ("agentfsm",)
_user_allowed: set[str] = set()

#: Key that marks a tagged (non-plain-JSON) value in serialized data.
TAG = "__agentfsm__"

#: What a slot that names code expects: a class, or a callable (a function, a method reached
#: through its class, or a class).
Expected = Literal["class", "callable"]

#: All that ``builtins`` offers to data: the plain data types, by name.
BUILTIN_TYPES: dict[str, type] = {
    t.__name__: t for t in (str, int, float, bool, bytes, list, dict, tuple, set, frozenset, type(None), object)
}


#: The methods of those types that data may name where a callable is expected: each takes plain
#: data and gives back data no larger than its arguments. ``str.format`` and ``format_map`` are
#: never among them (their fields walk attributes: ``{0.__class__.__init__.__globals__}``), nor
#: is any method that pads or repeats (``str.center``, ``int.to_bytes``) to a size data chooses.
_SET_METHODS = frozenset(
    ["union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint", "copy"]
)
BUILTIN_METHODS: dict[type, frozenset[str]] = {
    str: frozenset(
        [
            "upper",
            "lower",
            "casefold",
            "title",
            "capitalize",
            "swapcase",
            "strip",
            "lstrip",
            "rstrip",
            "split",
            "rsplit",
            "splitlines",
            "startswith",
            "endswith",
            "removeprefix",
            "removesuffix",
            "count",
            "find",
            "rfind",
            "partition",
            "rpartition",
            "isdigit",
            "isalpha",
            "isalnum",
            "isspace",
            "islower",
            "isupper",
        ]
    ),
    bytes: frozenset(
        ["fromhex", "hex", "upper", "lower", "strip", "lstrip", "rstrip", "split", "startswith", "endswith"]
    ),
    int: frozenset(["bit_length"]),
    float: frozenset(["fromhex", "hex", "is_integer"]),
    dict: frozenset(["get", "keys", "values", "items", "copy", "fromkeys"]),
    list: frozenset(["copy", "count", "index"]),
    tuple: frozenset(["count", "index"]),
    set: _SET_METHODS,
    frozenset: _SET_METHODS,
}


def allow_modules(*prefixes: str) -> None:
    """Allow deserialization to resolve classes and functions defined in modules under ``prefixes``."""
    for prefix in prefixes:
        if not prefix or not all(part.isidentifier() for part in prefix.split(".")):
            raise ValueError(f"{prefix!r} is not a module path; pass dotted names such as 'myapp.tools'.")
        _user_allowed.add(prefix)


def allowed_prefixes(extra: Iterable[str] | None = None) -> tuple[str, ...]:
    """All module prefixes currently allowed (built-in, process-wide, environment and ``extra``)."""
    env = [p.strip() for p in os.environ.get(ENV_ALLOWED_MODULES, "").split(",") if p.strip()]
    return (*_ALWAYS_ALLOWED, *sorted(_user_allowed), *env, *(extra or ()))


def _inside(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _refused_module(module: str, why: str) -> DeserializationError:
    return DeserializationError(
        f"Refusing to resolve {why} from module {module!r}: it is not in the allow-list. Allow it with "
        f"agentfsm.serialization.allow_modules({module!r}), or allowed_modules=[{module!r}] on the "
        f"from_dict/load call, or the environment variable {ENV_ALLOWED_MODULES}={module}."
    )


def import_path(path: str, allowed_modules: Iterable[str] | None = None, *, expect: Expected = "class") -> Any:
    """Resolve ``"package.module.Qual.name"`` to the class or function it names, through the allow-list.

    Only allowed modules are imported; from the module, each step goes down through classes; the
    object found must be defined in an allowed module and be what ``expect`` says. Anything else
    raises ``DeserializationError`` and nothing is called.
    """
    if not isinstance(path, str) or "." not in path:
        raise DeserializationError(f"{path!r} is not a dotted import path such as 'myapp.tools.search'.")
    parts = path.split(".")
    # A script's own module is ``__main__``; no other dunder name (``__globals__``, a package's
    # ``__main__``...) is ever a step of a path.
    dunders = [p for p in parts[parts[0] == "__main__" :] if p.startswith("__") and p.endswith("__")]
    if dunders or not all(p.isidentifier() for p in parts):
        raise DeserializationError(
            f"{path!r} is not a dotted import path such as 'myapp.tools.search': each part must be a "
            "name, and dunder names are never resolved."
        )
    if parts[0] == "builtins":
        return _builtin(path, parts, expect)
    prefixes = allowed_prefixes(allowed_modules)
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        if not _inside(module_name, prefixes):
            raise _refused_module(module_name, repr(path))
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                continue  # no such module: the name is an attribute of a shorter one
            raise DeserializationError(f"Could not import {module_name!r} for {path!r}: {exc}") from None
        except ImportError as exc:
            raise DeserializationError(f"Could not import {module_name!r} for {path!r}: {exc}") from None
        return _checked(_walk(module, parts[split:], path), path, prefixes, expect)
    raise DeserializationError(f"Could not import {path!r}: no importable module in that path.")


def _builtin(path: str, parts: list[str], expect: Expected) -> Any:
    """A plain data type of ``builtins``, or (where a callable is expected) one of its methods."""
    found: Any = BUILTIN_TYPES.get(parts[1]) if len(parts) in (2, 3) else None
    if found is not None and len(parts) == 3:
        listed = expect == "callable" and parts[2] in BUILTIN_METHODS.get(found, ())
        found = getattr(found, parts[2]) if listed else None
    if found is None:
        raise DeserializationError(
            f"Refusing to resolve {path!r}: builtins offers only the plain data types "
            f"({', '.join(sorted(BUILTIN_TYPES))}) and, where a callable is expected, a few of their "
            "methods that only transform data (str.upper, str.split...; never str.format)."
        )
    return found


def _walk(module: types.ModuleType, names: list[str], path: str) -> Any:
    """Follow ``names`` from ``module``: the first step to a class or function of it, then through classes only."""
    obj: Any = module
    for index, name in enumerate(names):
        if index and not inspect.isclass(obj):
            step = ".".join([module.__name__, *names[:index]])
            raise DeserializationError(
                f"Refusing to resolve {path!r}: {step!r} is not a class; a path goes from its module "
                "down through classes only."
            )
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise DeserializationError(f"Module {module.__name__!r} has no attribute path {path!r}.") from None
        if inspect.ismodule(obj):
            step = ".".join([module.__name__, *names[: index + 1]])
            raise DeserializationError(
                f"Refusing to resolve {path!r}: {step!r} is a module; a path names a class or function "
                "by the module that defines it."
            )
    return obj


def _checked(obj: Any, path: str, prefixes: tuple[str, ...], expect: Expected) -> Any:
    """``obj``, when it was defined in an allowed module and is what the slot expects."""
    # A module-level ``@tool`` or ``@hook`` leaves agentfsm's wrapper at the function's name: the
    # wrapped function is what must be a function of an allowed module.
    defined = _wrapped_function(obj) or obj
    if expect == "class" and not inspect.isclass(obj):
        raise DeserializationError(f"{path!r} does not name a class, and a class is expected here.")
    if expect == "callable" and not (inspect.isclass(defined) or _is_function(defined)):
        raise DeserializationError(f"{path!r} does not name a function or a class, and a callable is expected here.")
    module = getattr(defined, "__module__", None)
    if not isinstance(module, str) or not _inside(module, prefixes):
        raise _refused_module(str(module), f"{path!r}, which names {defined!r} defined there,")
    # agentfsm's own callables: a tool or hook it declares (``agentfsm.demo.get_weather``), or a
    # function its packages export; never a class or function of its machinery, which would act
    # on whatever arguments a model or a State value gives (write files, import modules...).
    ours = expect == "callable" and obj is defined and _inside(module, _ALWAYS_ALLOWED)
    if ours and (inspect.isclass(obj) or not _exported_by_agentfsm(obj)):
        raise DeserializationError(
            f"Refusing to resolve {path!r}: where a callable is expected, agentfsm offers only the "
            "functions its packages export (agentfsm.merge_lists, agentfsm.replace_values...) and its tools."
        )
    return obj


#: The packages whose exported functions data may name (``merge_lists`` as a State handler, a
#: testing hook...): never agentfsm's machinery (loading modules, files, the CLI, DBOS).
_EXPORTING_PACKAGES = ("agentfsm", "agentfsm.tools", "agentfsm.hitl", "agentfsm.builtin_hooks", "agentfsm.testing")


def _exported_by_agentfsm(function: Any) -> bool:
    # A package not imported yet exports nothing named here: resolving a path imports its module first.
    exported = (
        getattr(package, name, None)
        for package in map(sys.modules.get, _EXPORTING_PACKAGES)
        if package is not None
        for name in getattr(package, "__all__", ())
    )
    return any(found is function for found in exported)


def _wrapped_function(obj: Any) -> Any:
    function = getattr(obj, "function", None)
    if not inspect.isclass(obj) and type(obj).__module__.startswith("agentfsm.") and _is_function(function):
        return function
    return None


def _is_function(obj: Any) -> bool:
    # A method reached through its class is a function (or, for a classmethod, a method bound to the class).
    return (
        inspect.isfunction(obj) or inspect.isbuiltin(obj) or (inspect.ismethod(obj) and inspect.isclass(obj.__self__))
    )


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
    if not inspect.isclass(cls):
        raise DeserializationError(f"{cls!r} is not a class: only a class's from_dict() rebuilds data.")
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


@dataclasses.dataclass(frozen=True)
class Slot:
    """The kind of class a place in a document takes: subclasses of ``base`` that have ``methods``.

    ``what`` names that kind in the error for a class that is not of it.
    """

    what: str
    base: type | tuple[type, ...] = object
    methods: tuple[str, ...] = ()

    def check(self, cls: type, path: str) -> type:
        """``cls`` (resolved from ``path``) when it is of this kind; ``DeserializationError`` otherwise."""
        if not issubclass(cls, self.base) or not all(_defines(cls, m) for m in self.methods):
            raise DeserializationError(f"{path!r} is not {self.what}.")
        return cls


def _defines(cls: type, method: str) -> bool:
    # Defined by the class or a base of its own: every class has ``__call__`` through ``type``.
    return any(method in vars(k) for k in cls.__mro__ if k is not object)


#: Any class with ``from_dict``: a part no other code calls (a value, a configuration).
ANY_CLASS = Slot("a class with from_dict()", methods=("from_dict",))
#: A model client: the agent, a summarizing compactor and a cassette call its ``run``.
CHAT_GENERATOR = Slot("a chat generator class (with run() and from_dict())", methods=("run", "from_dict"))


def resolve_class(path: Any, allowed_modules: Iterable[str] | None = None, slot: Slot = ANY_CLASS) -> type:
    """The class ``path`` names, through the allow-list, when it is of the kind ``slot`` takes."""
    if not isinstance(path, str):
        raise DeserializationError(f"A class is named by its import path, a string such as 'myapp.Tool'; got {path!r}.")
    return slot.check(import_path(path, allowed_modules), path)


def object_from_dict(
    data: dict[str, Any],
    allowed_modules: Iterable[str] | None = None,
    slot: Slot = ANY_CLASS,
    *,
    whole: bool = False,
) -> Any:
    """Invert ``object_to_dict``: the class ``data`` names (of the kind ``slot`` takes), rebuilt from its data.

    The class is resolved through the allow-list and checked before its ``from_dict`` is called.
    ``whole``: ``from_dict`` takes all of ``data`` (``{'type': ..., 'init_parameters': ...}``, as
    tools and model clients write themselves), not only ``data['data']``. Bad data raises
    ``DeserializationError``.
    """
    if not isinstance(data, dict) or not isinstance(data.get("type"), str) or not (whole or "data" in data):
        shape = "{'type': <class path>, ...}" if whole else "{'type': <class path>, 'data': ...}"
        raise DeserializationError(f"{slot.what[0].upper()}{slot.what[1:]} is given as {shape}, got {brief(data)}.")
    cls = resolve_class(data["type"], allowed_modules, slot)
    return rebuild(cls, data if whole else data["data"], allowed_modules)


# -- callables ------------------------------------------------------------------------------------


def serialize_callable(fn: Callable[..., Any]) -> str:
    """Serialize a module-level function (or class) as its import path."""
    return object_path(fn)


def deserialize_callable(path: str, allowed_modules: Iterable[str] | None = None) -> Callable[..., Any]:
    """Resolve a path made by ``serialize_callable`` to a function defined in an allowed module."""
    return typing.cast(Callable[..., Any], import_path(path, allowed_modules, expect="callable"))


# -- types ----------------------------------------------------------------------------------------

_TYPE_NAMES: dict[str, Any] = {**BUILTIN_TYPES, "None": type(None)}
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
    if not isinstance(text, str):
        raise DeserializationError(f"A type annotation is given as a string such as 'list[str]', got {text!r}.")
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
            try:
                values = tuple(ast.literal_eval(e) for e in elts)
            except (ValueError, TypeError, SyntaxError):
                raise DeserializationError(f"Invalid type annotation {text!r}: Literal takes literal values.") from None
            return typing.Literal.__getitem__(values)
        args = tuple(_type_from_ast(e, text, allowed) for e in elts)
        try:
            return head[args if len(args) > 1 else args[0]]
        except TypeError as exc:
            raise DeserializationError(f"Invalid type annotation {text!r}: {exc}") from None
    name = _dotted(node)
    if name is None:
        raise DeserializationError(f"Unsupported construct in type annotation {text!r}.")
    if name in _TYPE_NAMES:
        return _TYPE_NAMES[name]
    if name.startswith("typing.") and name.removeprefix("typing.") in _TYPING_NAMES:
        return getattr(typing, name.removeprefix("typing."))
    return import_path(name, allowed)


# -- values ---------------------------------------------------------------------------------------


#: agentfsm's modules whose classes are values (a State value, a tool's result), not configuration
#: or machinery (a store, a hook) whose ``from_dict`` could open files.
_AGENTFSM_VALUE_MODULES = ("agentfsm.messages", "agentfsm.decisions", "agentfsm.hitl.types")

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
        # Values written as they are need no call (a durable run serializes its State at every transition).
        plain = {}
        for k, v in value.items():
            if type(k) is not str:
                break
            of = type(v)
            plain[k] = v if of in _PLAIN_SCALARS or (of is int and _INT_MIN <= v <= _INT_MAX) else _serialize(v, depth)
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
            f"Unknown value tag {kind!r} in {brief(data)}; expected one of {sorted(_VALUE_TAGS)}."
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
                for k, v in _items(data, pairs=True)
            }
        if kind in ("tuple", "set", "frozenset"):
            items = [_deserialize(v, allowed_modules, depth) for v in _items(data, pairs=False)]
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        cls = _value_class(kind, data["type"], allowed_modules)
        if kind == "dataclass" and not isinstance(data["data"], dict):
            raise ValueError(f"a dataclass's fields are an object, got {type(data['data']).__name__}")
        if kind == "object":
            return cls.from_dict(_deserialize(data["data"], allowed_modules, depth))
        if kind == "pydantic":
            return cls.model_validate(data["data"])
        fields = {k: _deserialize(v, allowed_modules, depth) for k, v in data["data"].items()}  # a dataclass
        return cls(**fields)
    except DeserializationError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DeserializationError(f"Malformed tagged value {brief(data)}: {exc!r}") from exc


def _items(data: dict[str, Any], *, pairs: bool) -> list[Any]:
    """A tagged container's ``items``: a list (of ``[key, value]`` pairs for a dict), never a string or an object read as one."""
    items = data["items"]
    if type(items) is not list:
        raise ValueError(f"its items are a list, got {type(items).__name__}")
    if pairs and not all(type(pair) is list and len(pair) == 2 for pair in items):
        raise ValueError("a dict's items are [key, value] pairs")
    return items


def _value_class(kind: str, path: Any, allowed_modules: Iterable[str] | None) -> Any:
    """The class a tagged value names, when it is the kind of class its tag says."""
    cls = import_path(path, allowed_modules)
    if _inside(cls.__module__, _ALWAYS_ALLOWED) and not _inside(cls.__module__, _AGENTFSM_VALUE_MODULES):
        raise DeserializationError(
            f"Refusing to resolve {path!r} as a value: of agentfsm's own classes, only its messages and "
            "decisions are State values."
        )
    if kind == "object" and not callable(getattr(cls, "from_dict", None)):
        what = "a class with from_dict()"
    elif kind == "pydantic" and not callable(getattr(cls, "model_validate", None)):
        what = "a pydantic model"
    elif kind == "dataclass" and not dataclasses.is_dataclass(cls):
        what = "a dataclass"
    else:
        return cls
    raise DeserializationError(f"A value tagged {kind!r} names {path!r}, which is not {what}.")


def is_of_type(value: Any, tp: Any) -> bool:
    """Whether a value read back from data is of type ``tp``, as it is: nothing converted.

    An ``int`` is no ``bool`` and a ``float`` may be an ``int``; containers are checked item by
    item (``list[str]``, ``dict[str, int]``, ``tuple[int, ...]``), unions and literals by their
    members. What the check cannot read (a ``TypeVar``, a protocol...) accepts any value.
    """
    return _fits(value, tp, 0)


def type_name(tp: Any) -> str:
    """A type as error messages show it: ``int``, ``dict[str, int]``, ``str | None``."""
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__name__
    return str(tp).replace("typing.", "")


def _fits(value: Any, tp: Any, depth: int) -> bool:
    if tp is typing.Any or tp is object or depth > MAX_VALUE_DEPTH:
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None:
        if tp is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if tp is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return _instance(value, tp) if isinstance(tp, type) else True
    if origin is typing.Union or origin is types.UnionType:
        return any(value is None if a is type(None) else _fits(value, a, depth) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if not isinstance(origin, type):
        return True
    if not _instance(value, origin):
        return False
    if not args:
        return True
    if isinstance(value, dict):
        return all(_fits(k, args[0], depth + 1) and _fits(v, args[-1], depth + 1) for k, v in value.items())
    if isinstance(value, tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0], depth + 1) for v in value)
        return len(value) == len(args) and all(_fits(v, a, depth + 1) for v, a in zip(value, args, strict=True))
    if isinstance(value, (list, set, frozenset)):
        return all(_fits(v, args[0], depth + 1) for v in value)
    return True


def _instance(value: Any, cls: type) -> bool:
    try:
        return isinstance(value, cls)
    except TypeError:  # a class that refuses isinstance (a protocol that is not runtime-checkable)
        return True


def nests_deeper(data: Any, limit: int) -> bool:
    """Whether JSON-like ``data`` holds dicts and lists more than ``limit`` levels below itself (no recursion).

    The one depth rule for untrusted JSON: snapshots, stored values, decisions, tool arguments and
    what model servers send.
    """
    if not isinstance(data, (dict, list)):
        return False
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


_BRIEF = reprlib.Repr()  # a few items of a few levels (attributes: Repr takes no arguments before 3.12)
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother = 3, 200, 200


def brief(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut short, for error messages: a few items of a few levels, never more than ``limit``.

    Safe on any value, however large or deeply nested (a ``repr`` of it could exhaust the stack),
    and on one whose ``__repr__`` fails.
    """
    try:
        text = _BRIEF.repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply to show>"
    except Exception:  # a __repr__ of the user's own that fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


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
