"""How a running tool reports its progress: the ``report_progress`` parameter.

A tool function that declares a parameter named ``report_progress`` is given, at each call, a
``ProgressReporter``: calling it with how far the call got makes a ``tool_progress`` event of the
run (``agentfsm.events.ToolProgress``) for whoever listens. The parameter is never in the schema
the model sees, and a tool that does not declare it is called exactly as before::

    @tool
    def index(paths: list[str], report_progress: ProgressReporter) -> int:
        for done, path in enumerate(paths, 1):
            ...
            report_progress(done, len(paths), f"indexed {done} files")
        return len(paths)

The reporter checks what it is given (``ToolProgressError`` when ``progress`` is not a finite
number, ``total`` neither one nor ``None``, or ``message`` neither a string nor ``None``) and
returns at once when nobody listens to the run (or the tool is called outside a run). Reports
made after the call ended (from a thread the tool left running, or a call abandoned at its
timeout) are dropped.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Protocol

from agentfsm.errors import ToolProgressError


class ProgressReporter(Protocol):
    """What a tool's ``report_progress`` parameter is given: called with how far the call got."""

    def __call__(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report ``progress`` (out of ``total`` when known) and what the tool is doing (``message``).

        Raises:
            ToolProgressError: ``progress`` is not a finite number, ``total`` is neither one nor
                ``None``, or ``message`` is neither a string nor ``None``.
        """


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite real number (a bool is not one), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def checked_report(progress: Any, total: Any, message: Any) -> tuple[float, float | None, str | None]:
    """A progress report's values, checked: ``(progress, total, message)`` with the numbers as floats.

    Raises:
        ToolProgressError: a value is not of its documented type (see ``ProgressReporter``).
    """
    checked = _finite(progress)
    if checked is None:
        raise ToolProgressError(f"report_progress: progress must be a finite number, got {progress!r}.")
    checked_total = None if total is None else _finite(total)
    if total is not None and checked_total is None:
        raise ToolProgressError(f"report_progress: total must be a finite number or None, got {total!r}.")
    if message is not None and not isinstance(message, str):
        raise ToolProgressError(f"report_progress: message must be a string or None, got {type(message).__name__}.")
    return checked, checked_total, message


def unheard(progress: float, total: float | None = None, message: str | None = None) -> None:
    """The reporter of a call nobody listens to (or made outside a run): it checks the report, and drops it."""
    checked_report(progress, total, message)
