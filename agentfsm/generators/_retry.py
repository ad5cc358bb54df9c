"""The retry plan of one model call: after each try that failed, whether and when to try again.

``RetryPlan`` owns the call's deadline (retries and the waits between them included) and its
backoff, and does no I/O: it reads only the clocks it is given. A try reports its failure as a
typed error (``broken`` maps an error httpx raised); the plan answers with the seconds to wait,
or ``None`` when that error ends the call. ``retry`` and ``retry_async`` only make the tries and
sleep, so a sync and an async call decide alike.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx

from agentfsm.errors import (
    ModelClientError,
    ModelConnectionError,
    ModelDeadlineError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
)

_T = TypeVar("_T")

#: Statuses worth another try: the server is busy or failed for a moment.
_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def retryable(error: ModelClientError) -> bool:
    """Whether another try may succeed: a timeout, a connection problem, 429 or a passing server failure."""
    if isinstance(error, ModelDeadlineError):
        return False
    if isinstance(error, ModelHTTPError):
        return error.status_code in _RETRY_STATUSES
    return isinstance(error, (ModelTimeoutError, ModelConnectionError))


def retry_after_seconds(value: str | None, wall_clock: Callable[[], float] = time.time) -> float | None:
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
        seconds = when.timestamp() - wall_clock()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def backoff_delay(
    attempt: int, backoff_base: float, max_backoff: float, jitter: Callable[[float, float], float] = random.uniform
) -> float:
    """Exponential backoff with jitter: about ``backoff_base * 2**attempt`` seconds, at most ``max_backoff``."""
    return min(max_backoff, backoff_base * 2.0 ** min(attempt, 62)) * jitter(0.5, 1.0)


@dataclass(kw_only=True, slots=True)
class RetryPlan:
    """What follows each failed try of one model call, from its deadline, the tries left and the backoff.

    The settings are the generator's. ``clock`` gives the monotonic seconds the deadline is kept
    in, ``wall_clock`` the epoch seconds an HTTP-date ``Retry-After`` is read against, and
    ``jitter(low, high)`` the backoff's random factor.
    """

    deadline: float
    timeout: float
    connect_timeout: float
    max_retries: int
    backoff_base: float
    max_backoff: float
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    jitter: Callable[[float, float], float] = random.uniform
    _end: float = field(init=False)
    _retries: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._end = self.clock() + self.deadline

    def remaining(self) -> float:
        """Seconds left before the deadline (negative once passed)."""
        return self._end - self.clock()

    def expired(self) -> ModelDeadlineError:
        """The error for a call that ran out of time."""
        return ModelDeadlineError(
            f"The model call did not finish within its deadline of {self.deadline:g} s (retries included). "
            "Give the generator a larger deadline= for long answers."
        )

    def check(self) -> None:
        """Raise ``ModelDeadlineError`` once the deadline has passed."""
        if self.remaining() <= 0:
            raise self.expired()

    def timeouts(self) -> httpx.Timeout:
        """The timeouts of the next try: the configured ones, none longer than the time left."""
        left = max(self.remaining(), 0.001)
        return httpx.Timeout(min(self.timeout, left), connect=min(self.connect_timeout, left))

    def broken(self, exc: httpx.HTTPError, delivered: int = 0) -> ModelClientError:
        """The typed error of a try httpx failed, after ``delivered`` chunks reached the streaming callback.

        The deadline's once it passed (a read it cut short); not retried once chunks were delivered,
        since they would be delivered again; else a timeout or a connection problem.
        """
        name = type(exc).__name__
        if self.remaining() <= 0:
            return self.expired()
        if delivered:
            return ModelResponseError(
                f"The model server's stream broke after {delivered} chunks reached the callback "
                f"({name}); it is not retried, since the chunks would be sent again."
            )
        if isinstance(exc, httpx.ConnectTimeout):
            return ModelTimeoutError(f"Could not connect to the model server in time ({name}).")
        if isinstance(exc, httpx.TimeoutException):
            return ModelTimeoutError(f"The model server did not answer in time ({name}).")
        return ModelConnectionError(f"Could not talk to the model server: {name}: {exc}")

    def after(self, error: ModelClientError) -> float | None:
        """Seconds to wait before the next try after ``error``; ``None`` when ``error`` ends the call.

        A ``Retry-After`` the server sent replaces the backoff; a wait that would outlast the
        deadline ends the call at once.
        """
        if self._retries >= self.max_retries or not retryable(error):
            return None
        asked = retry_after_seconds(getattr(error, "retry_after", None), self.wall_clock)
        if asked is None:
            asked = backoff_delay(self._retries, self.backoff_base, self.max_backoff, self.jitter)
        if asked >= self.remaining():
            return None
        self._retries += 1
        return asked


def retry(plan: RetryPlan, attempt: Callable[[], _T], sleep: Callable[[float], object] = time.sleep) -> _T:
    """Call ``attempt`` until it returns, sleeping between tries, or raises an error that ``plan`` says ends the call."""
    while True:
        try:
            return attempt()
        except ModelClientError as error:
            wait = plan.after(error)
            if wait is None:
                raise
            sleep(wait)


async def retry_async(
    plan: RetryPlan,
    attempt: Callable[[], Awaitable[_T]],
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> _T:
    """Async twin of ``retry``: a try still running at the deadline is cancelled (``ModelDeadlineError``).

    A ``TimeoutError`` that a try raises before the deadline is its own (a callback's), and left alone.
    """
    while True:
        try:
            async with asyncio.timeout(max(plan.remaining(), 0)):
                return await attempt()
        except TimeoutError as exc:
            if plan.remaining() > 0:
                raise
            raise plan.expired() from exc
        except ModelClientError as error:
            wait = plan.after(error)
            if wait is None:
                raise
            await sleep(wait)
