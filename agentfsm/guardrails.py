"""Guardrails: checks of what goes into the model, what comes out of the run, and what the tools are given and give.

A guardrail stands at one of four points and answers each value it is shown with a
``GuardrailResult``: ``passed()``, ``rewrite(value, note)`` (redaction: the run goes on with the
new value, and the ``guardrail`` event says what changed) or ``tripwire(reason)``.

- ``"input"``: the messages a model call is about to read, before **every** model call (a
  rewrite replaces the conversation);
- ``"output"``: the final answer before it leaves the run (a text reply's text, the final-answer
  tool's arguments, or the result of the exit-condition tool that ended the run);
- ``"tool_call"``: a call (``ToolCall``) once its arguments are checked, before it is confirmed or
  run (a rewrite gives new arguments, checked again);
- ``"tool_result"``: a call's result (``ToolCallResult``) before the model reads it (a rewrite
  gives the new result text).

A tripwire ends the run through the ``guardrail_tripped`` edge, with the exit reason
``guardrail:<name>``; with ``on_trip="model"`` the reason goes back to the model instead: a refused
answer is sent back as an output retry is, a call gets an error result and never runs, a result is
replaced by the reason. An input guardrail always ends the run.

```python
from agentfsm import GuardrailResult, guardrail


@guardrail("tool_result")
def redact_cards(result):
    text = str(result.result)
    if "4111" in text:
        return GuardrailResult.rewrite(text.replace("4111", "****"), "card number redacted")
    return GuardrailResult.passed()
```

A guardrail is a function given to ``@guardrail`` (sync or ``async def``) or a ``Guardrail``
subclass with ``check`` and/or ``check_async``. Guardrails are the run's work (the slice
``agentfsm.slices.guardrails``): they fire on every path, a resumed or recovered run's included,
and should be pure functions of what they are shown: a run resumed after a crash may show them the
same value again.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from agentfsm.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    DeserializationError,
    GuardrailError,
    SerializationError,
)
from agentfsm.messages import ChatMessage, ToolCall, ToolCallResult
from agentfsm.serialization import (
    Slot,
    deserialize_value,
    import_path,
    object_path,
    rebuild,
    resolve_class,
    serialize_value,
)

if TYPE_CHECKING:
    from agentfsm._core.actions import CheckGuardrails

__all__ = [
    "GUARDRAIL_POINTS",
    "FunctionGuardrail",
    "Guardrail",
    "GuardrailPoint",
    "GuardrailResult",
    "GuardrailVerdict",
    "check_guardrails",
    "guardrail",
    "guardrail_from_dict",
    "guardrail_to_dict",
]

#: Where a guardrail stands.
GuardrailPoint = Literal["input", "output", "tool_call", "tool_result"]
GUARDRAIL_POINTS: Final[tuple[GuardrailPoint, ...]] = get_args(GuardrailPoint)
#: What a tripwire does: end the run, or tell the model.
OnTrip = Literal["end", "model"]
_ON_TRIP: Final = get_args(OnTrip)


@dataclass(frozen=True, slots=True)
class GuardrailResult:
    """A guardrail's answer for one value: made with ``passed()``, ``rewrite(value, note)`` or ``tripwire(reason)``."""

    kind: Literal["pass", "rewrite", "tripwire"]
    #: The rewritten value (``rewrite``).
    value: Any = None
    #: What a rewrite changed, in words (recorded in the run's ``guardrail`` event).
    note: str = ""
    #: Why a tripwire fired (the model is told it with ``on_trip="model"``).
    reason: str = ""

    @classmethod
    def passed(cls) -> GuardrailResult:
        """The value may go on as it is."""
        return _PASSED

    @classmethod
    def rewrite(cls, value: Any, note: str = "") -> GuardrailResult:
        """The value goes on as ``value`` (a redaction, a normalisation); ``note`` says what changed."""
        return cls("rewrite", value, str(note))

    @classmethod
    def tripwire(cls, reason: str) -> GuardrailResult:
        """The value may not go on: the run ends (or, with ``on_trip="model"``, the model is told ``reason``)."""
        return cls("tripwire", reason=str(reason))


_PASSED: Final = GuardrailResult("pass")


class Guardrail:
    """A check at one point of a run (``GUARDRAIL_POINTS``): subclass it and define ``check`` or ``check_async``.

    ``name`` (default: the class's name) is the exit reason's ``guardrail:<name>``; ``on_trip``:
    ``"end"`` (the run ends) or ``"model"`` (the reason goes back to the model; not for
    ``"input"``); ``tools``: for ``tool_call`` and ``tool_result`` guardrails, the tools whose
    calls it checks (``None``: every tool). A guardrail that defines only ``check_async`` runs only
    under ``Agent.run_async``.
    """

    def __init__(
        self,
        point: GuardrailPoint,
        *,
        name: str | None = None,
        on_trip: OnTrip = "end",
        tools: Collection[str] | None = None,
    ) -> None:
        if point not in GUARDRAIL_POINTS:
            raise ConfigurationError(
                f"A guardrail stands at one of the points {list(GUARDRAIL_POINTS)}, got {point!r}: "
                f"write e.g. @guardrail('input')."
            )
        if on_trip not in _ON_TRIP:
            raise ConfigurationError(f"on_trip is 'end' or 'model', got {on_trip!r}.")
        if on_trip == "model" and point == "input":
            raise ConfigurationError(
                "An input guardrail's tripwire ends the run: the model is not called with what it may not read. "
                "on_trip='model' is for output, tool_call and tool_result guardrails."
            )
        if tools is not None:
            if isinstance(tools, str) or not all(isinstance(t, str) for t in tools):
                raise ConfigurationTypeError(f"tools= is a list of tool names, got {tools!r}.")
            if point not in ("tool_call", "tool_result"):
                raise ConfigurationError(f"tools= is for tool_call and tool_result guardrails, not {point!r} ones.")
        self.point: GuardrailPoint = point
        self.name: str = name if name is not None else type(self).__name__
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationTypeError(f"A guardrail's name is a non-empty string, got {name!r}.")
        self.on_trip: OnTrip = on_trip
        self.tools: frozenset[str] | None = None if tools is None else frozenset(tools)

    def check(self, value: Any, /) -> GuardrailResult:
        """Check ``value`` (what depends on the point: see ``agentfsm.guardrails``)."""
        raise GuardrailError(
            f"Guardrail {self.name!r} defines only check_async(): run the agent with run_async(), or define check()."
        )

    async def check_async(self, value: Any, /) -> GuardrailResult:
        """Check ``value`` on the event loop; by default ``check`` in a worker thread."""
        from agentfsm.workers import run_in_worker

        return await run_in_worker(self.check, value)

    @property
    def is_async(self) -> bool:
        """Whether only ``Agent.run_async`` can run it (it defines ``check_async`` but not ``check``)."""
        return type(self).check is Guardrail.check

    def covers(self, subject: Any) -> bool:
        """Whether it checks ``subject`` (a call or a result of one of its ``tools``, or any value at its point)."""
        if self.tools is None:
            return True
        call = subject.origin if isinstance(subject, ToolCallResult) else subject
        return isinstance(call, ToolCall) and call.tool_name in self.tools

    def settings(self) -> dict[str, Any]:
        """Its point, name, ``on_trip`` and ``tools``, as data."""
        return {
            "point": self.point,
            "name": self.name,
            "on_trip": self.on_trip,
            "tools": None if self.tools is None else sorted(self.tools),
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.point!r}, name={self.name!r})"


class FunctionGuardrail(Guardrail):
    """A guardrail made from a function of the value by ``@guardrail``; an ``async def`` one runs only under ``run_async``."""

    def __init__(
        self,
        function: Callable[[Any], Any],
        point: GuardrailPoint,
        *,
        name: str | None = None,
        on_trip: OnTrip = "end",
        tools: Collection[str] | None = None,
    ) -> None:
        if not callable(function):
            raise ConfigurationTypeError(f"@guardrail takes a function of the value, got {function!r}.")
        super().__init__(point, name=name or getattr(function, "__name__", None), on_trip=on_trip, tools=tools)
        self.function = function
        self._async = inspect.iscoroutinefunction(function)
        self.__doc__ = function.__doc__

    @property
    def is_async(self) -> bool:
        """Whether it was made from an ``async def`` function."""
        return self._async

    def check(self, value: Any, /) -> GuardrailResult:
        """Call the function with ``value``."""
        if self._async:
            raise GuardrailError(
                f"Guardrail {self.name!r} is an async function: run the agent with run_async(), or make it sync."
            )
        return self.function(value)  # type: ignore[no-any-return]

    async def check_async(self, value: Any, /) -> GuardrailResult:
        """Await the function (an ``async def`` one), or call it in a worker thread."""
        if self._async:
            return await self.function(value)  # type: ignore[no-any-return]
        return await super().check_async(value)

    def __call__(self, value: Any, /) -> Any:
        """Call the function itself (so that it can be tested as it was written)."""
        return self.function(value)

    def __repr__(self) -> str:
        return f"guardrail({self.point!r}, {self.name})"


def guardrail(
    point: GuardrailPoint,
    *,
    name: str | None = None,
    on_trip: OnTrip = "end",
    tools: Collection[str] | None = None,
) -> Callable[[Callable[[Any], Any]], FunctionGuardrail]:
    """Make a function of the value (sync or ``async def``) a guardrail at ``point``.

    ```python
    @guardrail("tool_call", on_trip="model", tools=["pay"])
    def small_payments(call):
        if call.arguments["amount"] > 100:
            return GuardrailResult.tripwire("payments above 100 need a person")
        return GuardrailResult.passed()
    ```
    """
    if callable(point):
        raise ConfigurationTypeError(
            "@guardrail needs its point: write @guardrail('input'), @guardrail('output'), @guardrail('tool_call') "
            "or @guardrail('tool_result')."
        )

    def wrap(function: Callable[[Any], Any]) -> FunctionGuardrail:
        return FunctionGuardrail(function, point, name=name, on_trip=on_trip, tools=tools)

    return wrap


def check_guardrails(given: Iterable[Any] | None) -> dict[GuardrailPoint, tuple[Guardrail, ...]]:
    """The guardrails of each point, in the order given, once each is checked to be one; names unique per point."""
    if given is None:
        return {}
    if isinstance(given, Guardrail | str | Mapping) or not isinstance(given, Iterable):
        raise ConfigurationTypeError(f"guardrails= is a list of guardrails, got {given!r}.")
    by_point: dict[GuardrailPoint, list[Guardrail]] = {}
    for g in given:
        if not isinstance(g, Guardrail):
            hint = " (a function: decorate it with @guardrail('<point>'))" if callable(g) else ""
            raise ConfigurationTypeError(
                f"guardrails= takes Guardrail objects (made with @guardrail or a Guardrail subclass), got {g!r}{hint}."
            )
        listed = by_point.setdefault(g.point, [])
        if any(other.name == g.name for other in listed):
            raise ConfigurationError(
                f"Two {g.point} guardrails are named {g.name!r}: give each its own name (its exit reason names it)."
            )
        listed.append(g)
    return {point: tuple(by_point[point]) for point in GUARDRAIL_POINTS if point in by_point}


# -- checking the values of one point (the drivers perform it: ``agentfsm._core.drivers``) ---------------


@dataclass(frozen=True, slots=True)
class GuardrailVerdict:
    """What a point's guardrails made of one value: its final value, the rewrites, and the tripwire that fired, if one did."""

    #: What was checked: ``"input"``, ``"output"``, a call's key (``tool_call``, ``tool_result``).
    subject: str
    #: The value once rewritten (the value itself when nothing rewrote it).
    value: Any
    #: Each rewrite: the guardrail's name and its note.
    rewrites: tuple[tuple[str, str], ...] = ()
    #: The guardrail whose tripwire fired, its reason, and what it does (``end``, ``model``).
    tripped: str | None = None
    reason: str = ""
    on_trip: OnTrip = "end"
    #: The guardrails that passed the value (rewrites included), in order.
    passed: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """As data (a durable run's step records it)."""
        return {
            "subject": self.subject,
            "value": serialize_value(self.value),
            "rewrites": [list(r) for r in self.rewrites],
            "tripped": self.tripped,
            "reason": self.reason,
            "on_trip": self.on_trip,
            "passed": list(self.passed),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GuardrailVerdict:
        """Invert ``to_dict``."""
        return cls(
            data["subject"],
            deserialize_value(data["value"]),
            tuple((str(n), str(t)) for n, t in data["rewrites"]),
            data["tripped"],
            data["reason"],
            data["on_trip"],
            tuple(data["passed"]),
        )


#: The type a rewrite must give at each point (an output answer's is that of the answer it replaces).
_REWRITE_TYPES: Final[dict[str, tuple[type, ...]]] = {"input": (list,), "tool_call": (dict,), "tool_result": (str,)}


def _checked_result(g: Guardrail, result: Any, point: str, value: Any) -> GuardrailResult:
    """``result``, once it is a ``GuardrailResult`` and a rewrite gives a value of the right type."""
    if not isinstance(result, GuardrailResult):
        raise GuardrailError(
            f"Guardrail {g.name!r} ({point}) returned {result!r}: return GuardrailResult.passed(), "
            "GuardrailResult.rewrite(new_value, note) or GuardrailResult.tripwire(reason)."
        )
    if result.kind != "rewrite":
        return result
    expected = _REWRITE_TYPES.get(point) or (type(value),)
    new: Any = result.value
    if not isinstance(new, expected) or (
        point == "input" and not all(isinstance(m, ChatMessage) for m in result.value)
    ):
        what = {
            "input": "a list of ChatMessage (the conversation the model reads)",
            "tool_call": "a dict (the call's new arguments)",
            "tool_result": "a str (the result's new text)",
        }.get(point, f"a {type(value).__name__} (the answer it replaces)")
        raise GuardrailError(f"Guardrail {g.name!r} ({point}) rewrote the value as {new!r}; a rewrite here is {what}.")
    return result


def checking(
    action: CheckGuardrails,
) -> Generator[tuple[Guardrail, Any], Any, list[GuardrailVerdict]]:
    """The checks of one point, as a generator: it yields (guardrail, value) and is sent each guardrail's result.

    The drivers only perform the checks (``check`` or ``check_async``), so sync and async runs make
    the same decisions. Each subject's guardrails run in order, each shown the value the ones before
    it left; the first tripwire stops that subject, and one that ends the run stops the point.
    """
    verdicts: list[GuardrailVerdict] = []
    for subject, value in action.subjects:
        rewrites: list[tuple[str, str]] = []
        passed: list[str] = []
        tripped: tuple[Guardrail, str] | None = None
        current = value
        for g in action.guardrails:
            if not g.covers(current):
                continue
            result = _checked_result(g, (yield g, current), action.point, current)
            if result.kind == "tripwire":
                tripped = (g, result.reason or f"guardrail {g.name} tripped")
                break
            if result.kind == "rewrite":
                current = _rewritten(action.point, current, result.value)
                rewrites.append((g.name, result.note))
            passed.append(g.name)
        if tripped is None:
            verdicts.append(GuardrailVerdict(subject, current, tuple(rewrites), passed=tuple(passed)))
            continue
        g, reason = tripped
        verdicts.append(GuardrailVerdict(subject, current, tuple(rewrites), g.name, reason, g.on_trip, tuple(passed)))
        if g.on_trip == "end":
            break
    return verdicts


def _rewritten(point: str, value: Any, new: Any) -> Any:
    """The value a rewrite leaves, in the form the point's next guardrail is shown."""
    if point == "tool_call":
        return ToolCall(value.tool_name, dict(new), value.id, value.extra)
    if point == "tool_result":
        return ToolCallResult(new, value.origin, value.error)
    return list(new) if point == "input" else new


def check_sync(action: CheckGuardrails) -> list[GuardrailVerdict]:
    """Perform a ``CheckGuardrails`` action in this thread."""
    flow = checking(action)
    try:
        g, value = next(flow)
        while True:
            g, value = flow.send(g.check(value))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def check_async(action: CheckGuardrails) -> list[GuardrailVerdict]:
    """Perform a ``CheckGuardrails`` action on the event loop (``check_async``)."""
    flow = checking(action)
    try:
        g, value = next(flow)
        while True:
            g, value = flow.send(await g.check_async(value))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


# -- serialization ----------------------------------------------------------------------------------------

#: Where a document names a guardrail class.
GUARDRAIL = Slot("a guardrail class: a Guardrail subclass with check() or check_async()", base=Guardrail)


def guardrail_to_dict(g: Guardrail) -> dict[str, Any]:
    """A guardrail as data: a function by its import path and its settings, a class by its path and ``to_dict``."""
    try:
        if isinstance(g, FunctionGuardrail):
            return {"function": object_path(g.function), **g.settings()}
        to_dict = getattr(g, "to_dict", None)
        return {"type": object_path(type(g)), "data": to_dict() if callable(to_dict) else None}
    except SerializationError as exc:
        raise SerializationError(f"Guardrail {g.name!r} ({g.point}) cannot be serialized: {exc}") from None


def is_guardrail_data(value: Any) -> bool:
    """Whether ``value`` is a guardrail as ``guardrail_to_dict`` writes it."""
    return isinstance(value, dict) and isinstance(value.get("function", value.get("type")), str)


def guardrail_from_dict(data: Mapping[str, Any], allowed_modules: Iterable[str] | None = None) -> Guardrail:
    """Invert ``guardrail_to_dict``; paths are resolved through the serialization allow-list."""
    if not is_guardrail_data(data):
        raise DeserializationError(
            "A guardrail is given as {'function': <function path>, 'point': ...} or {'type': <class path>, "
            f"'data': ...}}, got {data!r}."
        )
    if "function" in data:
        found = import_path(data["function"], allowed_modules, expect="callable")
        function = found.function if isinstance(found, FunctionGuardrail) else found
        return FunctionGuardrail(
            function, data["point"], name=data.get("name"), on_trip=data.get("on_trip", "end"), tools=data.get("tools")
        )
    cls = resolve_class(data["type"], allowed_modules, GUARDRAIL)
    made = cls() if data.get("data") is None else rebuild(cls, data["data"], allowed_modules)
    if not isinstance(made, Guardrail):
        raise DeserializationError(f"{data['type']!r} does not make a Guardrail.")
    return made


def guardrails_to_data(by_point: Mapping[GuardrailPoint, Sequence[Guardrail]]) -> list[dict[str, Any]]:
    """Every guardrail of an agent as data, point after point."""
    return [guardrail_to_dict(g) for gs in by_point.values() for g in gs]
