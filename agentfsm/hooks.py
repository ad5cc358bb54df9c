"""Hooks: user code that runs at declared points of the machine and acts by changing the run's State.

A hook is any object with ``run(state)`` (and optionally ``async run_async(state)``, used by
``Agent.run_async``), or a function decorated with ``@hook``. Hooks are given to the agent per hook
point: ``Agent(..., hooks={"before_llm": [build_context], "on_exit": [require_search]})``. Where
each point fires is declared in ``agentfsm.machine.PHASE_WORK``; the run asks its driver to run
them (the ``RunHooks`` action), so the runtime itself never calls user code.

Flow control is through two reserved State keys, read by the machine's guards after the hooks ran:
``continue_run`` (an ``on_exit`` hook keeps the run going; reset at each exit attempt) and
``stop_run`` (any hook; the run ends before its next model call, with the value as ``exit_reason``).

Class hooks may define ``warm_up`` / ``close`` (and ``warm_up_async`` / ``close_async``); the agent
calls them from its own. ``on_error`` hooks that accept an ``error`` keyword receive the exception.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload, runtime_checkable

from agentfsm._core.phases import HOOK_POINTS, Work
from agentfsm.errors import ConfigurationError, DeserializationError, SerializationError
from agentfsm.serialization import Slot, import_path, object_path, rebuild, resolve_class
from agentfsm.signatures import accepted_keywords

if TYPE_CHECKING:
    from agentfsm.state import State

#: The hook points by name, as ``Agent(hooks=...)`` takes them.
HOOK_POINT_NAMES: tuple[str, ...] = tuple(point.value for point in HOOK_POINTS)


@runtime_checkable
class Hook(Protocol):
    """Anything with ``run(state)``: it receives the run's live State and acts by changing it."""

    def run(self, state: State, /) -> Any:
        """Run at the hook point."""
        ...


class FunctionHook:
    """A hook made from a function of ``state`` by ``@hook``; it keeps the function's name.

    Under ``Agent.run_async`` it runs in a worker thread, so that it never blocks the event loop.
    """

    is_async = False

    def __init__(self, function: Callable[..., Any]) -> None:
        if not callable(function):
            raise ConfigurationError(f"@hook takes a function, got {function!r}.")
        self.function = function
        self.name: str = getattr(function, "__name__", type(function).__name__)
        self.__doc__ = function.__doc__

    def run(self, state: State, /, **kwargs: Any) -> Any:
        """Call the function with ``state``."""
        return self.function(state, **kwargs)

    def __repr__(self) -> str:
        return f"hook({self.name})"


class AsyncFunctionHook(FunctionHook):
    """A hook made from an ``async def`` function by ``@hook``: it runs only under ``Agent.run_async``."""

    is_async = True

    def run(self, state: State, /, **kwargs: Any) -> Any:
        """Refused: an async hook needs ``Agent.run_async`` (``Agent.run`` checks before it starts)."""
        raise ConfigurationError(
            f"Hook {self.name!r} is an async function: run the agent with run_async(), or make the hook sync."
        )

    async def run_async(self, state: State, /, **kwargs: Any) -> Any:
        """Await the function with ``state``."""
        return await self.function(state, **kwargs)


@overload
def hook(function: Callable[[State], Awaitable[Any]]) -> FunctionHook: ...
@overload
def hook(function: Callable[[State], Any]) -> FunctionHook: ...
def hook(function: Callable[..., Any]) -> FunctionHook:
    """Turn a function of ``state`` (sync or ``async def``) into a hook: ``@hook def build_context(state): ...``."""
    return AsyncFunctionHook(function) if inspect.iscoroutinefunction(function) else FunctionHook(function)


def hook_name(h: Any) -> str:
    """How a hook is named on diagrams and in errors: the function's or the class's name."""
    return h.name if isinstance(h, FunctionHook) else type(h).__name__


def accepts(h: Any, keyword: str) -> bool:
    """Whether ``h.run`` takes ``keyword``: ``error`` (given to ``on_error`` hooks), ``hook_context``."""
    keywords = accepted_keywords(h.function if isinstance(h, FunctionHook) else h.run)
    return keywords is None or keyword in keywords


def check_hooks(hooks: Mapping[str, Sequence[Any]] | None) -> dict[Work, tuple[Any, ...]]:
    """The hooks by hook point, checked: ``ValueError`` naming an unknown point or a hook that cannot run."""
    if hooks is None:
        return {}
    if not isinstance(hooks, Mapping):
        raise ConfigurationError(
            f"hooks must be a dict of hook point -> list of hooks, got {type(hooks).__name__}. "
            f"Hook points: {', '.join(HOOK_POINT_NAMES)}."
        )
    checked: dict[Work, tuple[Any, ...]] = {}
    for name, given in hooks.items():
        if name not in HOOK_POINT_NAMES:
            raise ConfigurationError(  # Haystack's sentence first: its users' tests match it
                f"Invalid hook point {name!r}. Valid hook points are: {', '.join(HOOK_POINT_NAMES)}. "
                f"Unknown hook point {name!r}: register the hook under one of those."
            )
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise ConfigurationError(f"hooks[{name!r}] must be a list of hooks, got {type(given).__name__}.")
        items = []
        for h in given:
            if isinstance(h, type):
                raise ConfigurationError(
                    f"hooks[{name!r}] holds the class {h.__name__}: give an instance, {h.__name__}(...)."
                )
            points = getattr(h, "points", None)  # where a hook class says it belongs
            if isinstance(points, frozenset) and name not in points:
                raise ConfigurationError(
                    f"hooks[{name!r}] holds a {type(h).__name__}, which goes on {', '.join(sorted(points))}."
                )
            if callable(getattr(h, "run", None)):
                items.append(h)
            elif callable(h):
                items.append(hook(h))
            else:
                raise ConfigurationError(
                    f"Hook registered for hook point {name!r} must have a callable 'run(state)', got an object of "
                    f"type {type(h).__name__!r}. hooks[{name!r}] holds {h!r}, which is not a hook: give an object "
                    "with run(state), or a function decorated with @hook."
                )
        if items:
            checked[Work(name)] = tuple(items)
    return checked


def hook_state_schema(hooks: Mapping[Work, Sequence[Any]]) -> dict[str, Any]:
    """The State keys the hooks write (a hook's ``state_schema``): the agent adds them to its schema."""
    schema: dict[str, Any] = {}
    for point_hooks in hooks.values():
        for h in point_hooks:
            schema.update(getattr(h, "state_schema", None) or {})
    return schema


def hooked_strategies(hooks: Mapping[Work, Sequence[Any]]) -> list[tuple[Any, Any]]:
    """The confirmation strategies ``before_tool`` hooks carry, as (key, strategy) pairs.

    A hook carries them in a ``confirmation_strategies`` dict (``builtin_hooks.ConfirmationHook``
    does); read by attribute, so this module needs no application module.
    """
    return [
        (key, strategy)
        for h in hooks.get(Work.BEFORE_TOOL, ())
        if isinstance(carried := getattr(h, "confirmation_strategies", None), dict)
        for key, strategy in carried.items()
    ]


# -- serialization ------------------------------------------------------------------------------------


def hook_to_dict(h: Any, point: str) -> dict[str, Any]:
    """A hook as data: a function by its import path, a class by its path and ``to_dict`` (or no arguments)."""
    try:
        if isinstance(h, FunctionHook):
            return {"function": object_path(h.function)}
        to_dict = getattr(h, "to_dict", None)
        data = to_dict() if callable(to_dict) else None
        if data is None and _needs_arguments(type(h)):
            raise SerializationError(
                f"{type(h).__name__} takes arguments but has no to_dict(); give it to_dict/from_dict."
            )
        return {"type": object_path(type(h)), "data": data}
    except SerializationError as exc:
        raise SerializationError(f"Hook {hook_name(h)!r} of {point!r} cannot be serialized: {exc}") from None


def is_hook_data(value: Any) -> bool:
    """Whether ``value`` is a hook as ``hook_to_dict`` writes it: by function path, or by class path."""
    return isinstance(value, dict) and isinstance(value.get("function", value.get("type")), str)


#: Where a document names a hook class.
HOOK = Slot("a hook class: a hook has a run(state) method", methods=("run",))


def hook_from_dict(data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Any:
    """Invert ``hook_to_dict``; paths are resolved through the serialization allow-list."""
    if not is_hook_data(data):
        raise DeserializationError(
            "A hook is given as {'function': <function path>} or {'type': <class path>, 'data': ...}, "
            f"got {data!r}."
        )
    if "function" in data:
        found = import_path(data["function"], allowed_modules, expect="callable")
        return found if isinstance(found, FunctionHook) else hook(found)
    cls = resolve_class(data["type"], allowed_modules, HOOK)
    return cls() if data.get("data") is None else rebuild(cls, data["data"], allowed_modules)


def _needs_arguments(cls: type) -> bool:
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return False
    return any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters)
