"""Whether and when a model call tries again: which failures are worth another try, and how long to wait."""

from __future__ import annotations

import math
import random
import time
from datetime import UTC
from email.utils import parsedate_to_datetime

import httpx

from agentfsm.errors import (
    ModelClientError,
    ModelConnectionError,
    ModelDeadlineError,
    ModelHTTPError,
    ModelTimeoutError,
)

#: Statuses worth another try: the server is busy or failed for a moment.
_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def retryable(error: ModelClientError) -> bool:
    """Whether another try may succeed: a timeout, a connection problem, 429 or a passing server failure."""
    if isinstance(error, ModelDeadlineError):
        return False
    if isinstance(error, ModelHTTPError):
        return error.status_code in _RETRY_STATUSES
    return isinstance(error, (ModelTimeoutError, ModelConnectionError))


def transport_error(exc: httpx.HTTPError) -> ModelClientError:
    """The typed error for an httpx error that is not a status (a timeout, a connection problem)."""
    if isinstance(exc, httpx.ConnectTimeout):
        return ModelTimeoutError(f"Could not connect to the model server in time ({type(exc).__name__}).")
    if isinstance(exc, httpx.TimeoutException):
        return ModelTimeoutError(f"The model server did not answer in time ({type(exc).__name__}).")
    return ModelConnectionError(f"Could not talk to the model server: {type(exc).__name__}: {exc}")


def retry_after_seconds(value: str | None) -> float | None:
    """The wait a ``Retry-After`` header asks for (seconds or an HTTP date); ``None`` when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - time.time()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def backoff_delay(attempt: int, backoff_base: float, max_backoff: float) -> float:
    """Exponential backoff with jitter: about ``backoff_base * 2**attempt`` seconds, at most ``max_backoff``."""
    return min(max_backoff, backoff_base * 2.0 ** min(attempt, 62)) * random.uniform(0.5, 1.0)
