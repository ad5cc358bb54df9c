"""Tool retries: ``Retry``, a tool's policy for running a failed call again, after a backoff.

>>> from agentfsm import tool
>>> @tool(retry=Retry(attempts=3, backoff=0.5, on=(TimeoutError, ConnectionError)), idempotent=True)
... def fetch(url: str) -> str:
...     '''Fetch a page.'''
...     return "..."
>>> fetch.retry.delays()
(0.5, 1.0)

Each attempt is an edge of the call machine: a call whose attempt raised an error its policy
covers, with attempts left, takes ``retry`` (``ready → retrying``), waits for its backoff, then
``reattempt`` (``retrying → ready``) and runs again; the run takes TOOL_RUN's ``retry`` edge
between the two, so the wait is a boundary where a cancellation or a deadline is read
(``agentfsm.slices.retries``). The count of failed attempts is in the run's snapshots
(``tool_call_attempts``): a run resumed after a crash goes on counting.

A call whose effect may have happened is not retried: a call of a tool that is not ``idempotent``
and that timed out (the run stopped waiting; the tool may have done its work) is answered with
its timeout, unless ``Retry(may_repeat_effects=True)`` says running it again is safe. A tool that
raised said itself that it failed, and is retried whatever its idempotency.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentfsm.errors import ConfigurationError, ConfigurationTypeError, DeserializationError
from agentfsm.serialization import import_path, object_path

__all__ = ["Retry"]


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"Retry({name}=...) must be a finite number of seconds >= 0, got {value!r}.")
    return float(value)


@dataclass(frozen=True, slots=True)
class Retry:
    """How a tool's failed calls are run again: how often, after how long, on which errors.

    Args:
        attempts: Attempts in all, the first included (``1``: never retried).
        backoff: Seconds to wait before the second attempt.
        multiplier: Each further wait is the one before times this (``1``: always ``backoff``).
        max_backoff: The longest wait, in seconds (``None``: no cap).
        on: The exception types that are retried (a call that raised another is answered at once).
        may_repeat_effects: Retry a timed-out call of a tool that is not idempotent too, although
            its effect may have happened (the tool was running when the run stopped waiting).
    """

    attempts: int = 3
    backoff: float = 0.0
    multiplier: float = 2.0
    max_backoff: float | None = None
    on: tuple[type[BaseException], ...] = (Exception,)
    may_repeat_effects: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ConfigurationError(
                f"Retry(attempts=...) counts the attempts in all, the first included: an int >= 1, got "
                f"{self.attempts!r}."
            )
        object.__setattr__(self, "backoff", _seconds("backoff", self.backoff))
        multiplier = self.multiplier
        if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or not 1 <= multiplier < math.inf:
            raise ConfigurationError(
                f"Retry(multiplier=...) must be a finite number >= 1 (1: every wait is backoff), got {multiplier!r}."
            )
        object.__setattr__(self, "multiplier", float(multiplier))
        if self.max_backoff is not None:
            object.__setattr__(self, "max_backoff", _seconds("max_backoff", self.max_backoff))
        on = (self.on,) if isinstance(self.on, type) else self.on
        if not isinstance(on, tuple | list) or not on:
            raise ConfigurationTypeError(
                f"Retry(on=...) takes an exception type or a non-empty tuple of them, such as "
                f"(TimeoutError, ConnectionError); got {self.on!r}."
            )
        wrong = [t for t in on if not (isinstance(t, type) and issubclass(t, BaseException))]
        if wrong:
            raise ConfigurationTypeError(
                f"Retry(on=...) takes exception types (classes such as TimeoutError), got {wrong[0]!r}."
            )
        object.__setattr__(self, "on", tuple(on))
        if not isinstance(self.may_repeat_effects, bool):
            raise ConfigurationTypeError(
                f"Retry(may_repeat_effects=...) must be a bool, got {self.may_repeat_effects!r}."
            )

    def delay(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th failed attempt (1 for the first), before the next one."""
        wait = self.backoff * self.multiplier ** (failed - 1)
        return wait if self.max_backoff is None else min(wait, self.max_backoff)

    def delays(self) -> tuple[float, ...]:
        """The wait before each retry, in order: one fewer than ``attempts``."""
        return tuple(self.delay(n) for n in range(1, self.attempts))

    def covers(self, error: BaseException) -> bool:
        """Whether ``error`` is one of the exception types this policy retries."""
        return isinstance(error, self.on)

    def to_dict(self) -> dict[str, Any]:
        """Serialize (with its tool's ``to_dict``); the exception types by import path."""
        return {
            "attempts": self.attempts,
            "backoff": self.backoff,
            "multiplier": self.multiplier,
            "max_backoff": self.max_backoff,
            "on": [object_path(t) for t in self.on],
            "may_repeat_effects": self.may_repeat_effects,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], allowed_modules: Iterable[str] | None = None) -> Retry:
        """Invert ``to_dict``; exception types outside ``builtins`` resolve through the allow-list."""
        fields = dict(data)
        fields["on"] = tuple(_exception_type(path, allowed_modules) for path in fields.get("on", ()))
        return cls(**fields)


def _exception_type(path: str, allowed_modules: Iterable[str] | None) -> type[BaseException]:
    """The exception type ``path`` names: a built-in one by its name, any other through the allow-list."""
    module, _, name = path.rpartition(".") if isinstance(path, str) else ("", "", "")
    if module == "builtins":
        found = getattr(builtins, name, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
        raise DeserializationError(f"Retry(on=...) names {path!r}, which is no built-in exception type.")
    found = import_path(path, allowed_modules, expect="class")
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise DeserializationError(f"Retry(on=...) names {path!r}, which is no exception type.")
    return found


def retry_of(value: Any, where: str) -> Retry | None:
    """``value`` as a tool's retry policy: a ``Retry``, or ``None``; ``ConfigurationTypeError`` otherwise."""
    if value is None or isinstance(value, Retry):
        return value
    raise ConfigurationTypeError(
        f"{where}: retry takes a Retry (agentfsm.retries.Retry(attempts=3, backoff=0.5, on=(TimeoutError,))) "
        f"or None, got {type(value).__name__}."
    )
