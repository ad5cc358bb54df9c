"""Settling a call in doubt in code: a tool's reconcile function looks its effect up after a crash.

A call of a tool that is not idempotent, started before a crash and whose result was never
recorded, is in doubt: without more, the run pauses until a person decides it. A tool that can
find out (a payment by its idempotency key, a file by its name) declares a reconcile function,
and the resumed run asks it first:

>>> from agentfsm import tool
>>> def check_payment(call: InDoubtCall) -> Reconciled:
...     return Happened("charged 5") if call.idempotency_key in {"k"} else NotHappened()
>>> @tool(reconcile=check_payment)
... def pay(amount: int, idempotency_key: str) -> str:
...     '''Charge a card.'''
...     return f"charged {amount}"
>>> pay.reconcile is check_payment
True

Each answer takes a declared edge of the call machine, the ones a person's decision takes
(``agentfsm.slices.reconcile``): ``Happened(result)`` is ``settle`` (the result is the call's, the
model reads it, the tool does not run again), ``NotHappened()`` is ``rerun`` (the call runs, once),
``Unknown(reason)`` leaves the call in doubt, and the run takes its ``in_doubt`` edge to PAUSED for
a person. A reconcile function that raises, returns anything else, or gives a result that has no
JSON form is never guessed from: the call stays in doubt, and what went wrong is recorded as the
reason (in the pause, and in the ``reconciled`` event).

A reconcile function takes one ``InDoubtCall`` and returns a ``Reconciled``; an ``async def``
one is awaited under ``run_async`` (under ``run`` and in durable runs, which cannot await it, the
call stays in doubt, saying so). A call of an idempotent tool runs again without asking.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from agentfsm.errors import ConfigurationTypeError, SerializationError
from agentfsm.serialization import brief, deserialize_callable, deserialize_value, serialize_value
from agentfsm.workers import run_in_worker

__all__ = ["Happened", "InDoubtCall", "NotHappened", "ReconcileFunction", "Reconciled", "Unknown"]


@dataclass(frozen=True, slots=True)
class InDoubtCall:
    """What a reconcile function is asked about: one call that started before a crash, its result never recorded."""

    tool_name: str
    #: The call's arguments, as the model (or a person's decision) gave them.
    arguments: dict[str, Any]
    #: The call's key in the run (its id, or ``#<position>``): what decisions name.
    call_id: str
    run_id: str
    #: The model call the call belongs to.
    step: int
    #: The key the call's tool is given when it takes an ``idempotency_key`` (the same each time the
    #: call runs): the name of its effect outside the run.
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class Happened:
    """The call's effect happened: ``result`` is what the tool returned (the model reads it; the tool does not run again)."""

    kind: ClassVar[str] = "happened"
    result: Any = None


@dataclass(frozen=True, slots=True)
class NotHappened:
    """The call's effect did not happen: the call runs (once)."""

    kind: ClassVar[str] = "not_happened"


@dataclass(frozen=True, slots=True)
class Unknown:
    """Whether the effect happened cannot be told: the call stays in doubt, and the run waits for a person.

    ``reason`` is shown with the pause; the run writes ``error`` when the reconcile function failed.
    """

    kind: ClassVar[str] = "unknown"
    reason: str = ""
    #: What went wrong with the reconcile function (it raised, returned something else...), if it did.
    error: str | None = None


Reconciled: TypeAlias = Happened | NotHappened | Unknown
#: A tool's reconcile function: sync, or ``async def`` (awaited under ``run_async``).
ReconcileFunction: TypeAlias = Callable[[InDoubtCall], "Reconciled | Awaitable[Reconciled]"]


def reconcile_of(value: Any, where: str) -> ReconcileFunction | None:
    """``value`` as a tool's reconcile function: a callable, or ``None``; ``ConfigurationTypeError`` otherwise."""
    if value is None or (callable(value) and not isinstance(value, type)):
        return value
    raise ConfigurationTypeError(
        f"{where}: reconcile takes a function of an InDoubtCall that returns Happened(result), NotHappened() or "
        f"Unknown(reason) (agentfsm.reconcile), or None; got {brief(value, 80)}."
    )


def reconcile_at(path: str | None, allowed_modules: Iterable[str] | None = None) -> ReconcileFunction | None:
    """The reconcile function a tool's ``to_dict`` names by import path, through the allow-list; ``None`` for none."""
    return None if path is None else reconcile_of(deserialize_callable(path, allowed_modules), "reconcile")


def is_async(function: ReconcileFunction) -> bool:
    """Whether ``function`` is an ``async def`` one (it must be awaited)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(getattr(function, "__call__", None))  # noqa: B004


def _name(function: ReconcileFunction) -> str:
    return str(getattr(function, "__qualname__", None) or type(function).__name__)


#: Why an async reconcile function gives no answer under ``run`` and in durable runs.
_CANNOT_AWAIT = "is async, and this run cannot await it: run the agent with run_async(), or make it sync"


def _failed(function: ReconcileFunction, what: str) -> Unknown:
    return Unknown(error=f"the reconcile function {_name(function)} {what}; the call stays in doubt for a person")


def checked(function: ReconcileFunction, answer: Any) -> Reconciled:
    """``answer`` as the reconcile function's answer, or ``Unknown`` saying what is wrong with it (never a guess)."""
    if isinstance(answer, Happened):
        try:
            serialize_value(answer.result)
        except SerializationError as exc:
            return _failed(function, f"gave a result that has no JSON form ({exc})")
        return answer
    if isinstance(answer, NotHappened | Unknown):
        return answer
    if inspect.isawaitable(answer):
        close = getattr(answer, "close", None)
        if callable(close):
            close()  # never awaited: no "coroutine was never awaited" warning
        return _failed(function, _CANNOT_AWAIT)
    return _failed(function, f"returned {brief(answer, 80)}, not Happened(result), NotHappened() or Unknown(reason)")


def ask(function: ReconcileFunction, call: InDoubtCall) -> Reconciled:
    """The reconcile function's answer for ``call``, in this thread; what it raises is an ``Unknown``."""
    if is_async(function):
        return _failed(function, _CANNOT_AWAIT)
    try:
        answer = function(call)
    except Exception as exc:
        return _failed(function, f"raised {type(exc).__name__}: {str(exc)[:200]}")
    return checked(function, answer)


async def ask_async(function: ReconcileFunction, call: InDoubtCall) -> Reconciled:
    """Like ``ask`` on the event loop: an async function is awaited, a sync one runs in a worker thread."""
    try:
        if is_async(function):
            answer = await function(call)  # type: ignore[misc]
        else:
            answer = await run_in_worker(function, call)
            if inspect.isawaitable(answer):
                answer = await answer
    except Exception as exc:
        return _failed(function, f"raised {type(exc).__name__}: {str(exc)[:200]}")
    return checked(function, answer)


def answer_to_dict(answer: Reconciled) -> dict[str, Any]:
    """An answer as JSON-compatible data (a durable run's step output)."""
    if isinstance(answer, Happened):
        return {"answer": answer.kind, "result": serialize_value(answer.result)}
    if isinstance(answer, Unknown):
        return {"answer": answer.kind, "reason": answer.reason, "error": answer.error}
    return {"answer": answer.kind}


def answer_from_dict(data: Mapping[str, Any]) -> Reconciled:
    """Invert ``answer_to_dict``."""
    kind = data["answer"]
    if kind == Happened.kind:
        return Happened(deserialize_value(data["result"]))
    if kind == NotHappened.kind:
        return NotHappened()
    return Unknown(data.get("reason") or "", data.get("error"))


def why(answer: Unknown) -> str:
    """What the pause says of a call an ``Unknown`` left in doubt."""
    return answer.error or answer.reason or "the reconcile function could not tell"
