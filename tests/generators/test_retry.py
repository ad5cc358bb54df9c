"""The retry plan without I/O: a fake clock, tries that come to what hypothesis draws, and both drivers alike."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.errors import ModelClientError, ModelDeadlineError, ModelHTTPError, ModelResponseError
from agentfsm.generators._http import http_error
from agentfsm.generators._retry import (
    RetryPlan,
    backoff_delay,
    retry,
    retry_after_seconds,
    retry_async,
    retryable,
)

#: The fake wall clock's time at the fake monotonic clock's zero.
EPOCH = 1_700_000_000.0


class FakeClock:
    """Monotonic and wall seconds that move only when a try or a wait says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return EPOCH + self.now


@dataclass(frozen=True)
class Outcome:
    """What one try comes to after ``seconds``: the reply, an error status, a broken transport or a bad answer."""

    seconds: float
    kind: str
    status: int = 200
    retry_after: str | None = None
    exc: type[httpx.HTTPError] = httpx.ConnectError
    delivered: int = 0

    def come_to(self, plan: RetryPlan, clock: FakeClock) -> str:
        clock.now += self.seconds
        if self.kind == "status":
            raise http_error(self.status, '{"error": {"message": "no"}}', self.retry_after)
        if self.kind == "transport":
            raise plan.broken(self.exc("down"), self.delivered)
        if self.kind == "unreadable":
            raise ModelResponseError("The model server sent an answer that is not JSON.")
        return "reply"


REPLY = Outcome(0.0, "reply")

seconds = st.floats(0, 30, allow_nan=False)
retry_after = st.one_of(
    st.none(),
    st.integers(0, 60).map(str),
    st.sampled_from(["0.25", "soon", "nan", "-1", "1e999", ""]),
    st.integers(0, 120).map(lambda s: formatdate(EPOCH + s, usegmt=True)),
)
outcomes = st.one_of(
    st.builds(Outcome, seconds, st.just("reply")),
    st.builds(
        Outcome,
        seconds,
        st.just("status"),
        st.sampled_from([400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 504, 529]),
        retry_after,
    ),
    st.builds(
        Outcome,
        seconds,
        st.just("transport"),
        exc=st.sampled_from([httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout, httpx.RemoteProtocolError]),
        delivered=st.sampled_from([0, 0, 3]),
    ),
    st.builds(Outcome, seconds, st.just("unreadable")),
)
plans = st.fixed_dictionaries(
    {
        "deadline": st.floats(0.5, 120),
        "timeout": st.floats(0.1, 60),
        "connect_timeout": st.floats(0.1, 10),
        "max_retries": st.integers(0, 5),
        "backoff_base": st.floats(0, 5),
        "max_backoff": st.floats(0, 30),
    }
)


class Trial:
    """One call driven over ``outcomes``: its trace (tries, waits, the end) as both drivers must make it."""

    def __init__(self, setting: dict[str, Any], fraction: float, outcomes: list[Outcome]) -> None:
        self.clock = FakeClock()
        self.plan = RetryPlan(
            **setting,
            clock=self.clock.monotonic,
            wall_clock=self.clock.wall,
            jitter=jitter_of(fraction),
        )
        self.trace: list[tuple[Any, ...]] = []
        self.errors: list[ModelClientError] = []
        self._outcomes = iter(outcomes)

    def attempt(self) -> str:
        self.trace.append(("try", self.clock.now, self.plan.timeouts()))
        outcome = next(self._outcomes, REPLY)
        try:
            return outcome.come_to(self.plan, self.clock)
        except ModelClientError as error:
            self.errors.append(error)
            self.trace.append(("failed", self.clock.now, outcome.kind, type(error), str(error)))
            raise

    def sleep(self, seconds: float) -> None:
        self.trace.append(("sleep", self.clock.now, seconds))
        self.clock.now += seconds

    def ended(self, driven: Callable[[], str]) -> list[tuple[Any, ...]]:
        try:
            self.trace.append(("returned", driven()))
        except ModelClientError as error:
            self.trace.append(("raised", type(error), str(error)))
        return self.trace


def driven_sync(setting: dict[str, Any], fraction: float, outcomes: list[Outcome]) -> Trial:
    trial = Trial(setting, fraction, outcomes)
    trial.ended(lambda: retry(trial.plan, trial.attempt, trial.sleep))
    return trial


def driven_async(setting: dict[str, Any], fraction: float, outcomes: list[Outcome]) -> Trial:
    trial = Trial(setting, fraction, outcomes)

    async def attempt() -> str:
        return trial.attempt()

    async def sleep(seconds: float) -> None:
        trial.sleep(seconds)

    async def main() -> str:
        return await retry_async(trial.plan, attempt, sleep)

    trial.ended(lambda: asyncio.run(main()))
    return trial


def jitter_of(fraction: float) -> Callable[[float, float], float]:
    return lambda low, high: low + (high - low) * fraction


@settings(max_examples=300, deadline=None)
@given(setting=plans, fraction=st.floats(0.5, 1.0), outcomes=st.lists(outcomes, max_size=8))
def test_both_drivers_decide_as_the_plan_says_whatever_the_tries_come_to(
    setting: dict[str, Any], fraction: float, outcomes: list[Outcome]
) -> None:
    sync, async_ = driven_sync(setting, fraction, outcomes), driven_async(setting, fraction, outcomes)
    assert sync.trace == async_.trace

    trace, end = sync.trace, setting["deadline"]
    tries = [step for step in trace if step[0] == "try"]
    sleeps = [step for step in trace if step[0] == "sleep"]
    assert len(tries) == len(sleeps) + 1 <= setting["max_retries"] + 1
    for _, at, timeouts in tries:
        assert timeouts.read <= min(setting["timeout"], max(end - at, 0.001))
        assert timeouts.connect <= min(setting["connect_timeout"], max(end - at, 0.001))
    for _, at, kind, error, _ in (step for step in trace if step[0] == "failed"):
        past = kind == "transport" and at >= end
        assert (error is ModelDeadlineError) == past, "a transport error past the deadline is the deadline's"
    *retried, last = [*sync.errors, None][: len(tries)]
    for number, (error, (_, at, wait)) in enumerate(zip(retried, sleeps, strict=True)):
        assert error is not None and retryable(error)
        asked = retry_after_seconds(getattr(error, "retry_after", None), lambda at=at: EPOCH + at)
        backoff = backoff_delay(number, setting["backoff_base"], setting["max_backoff"], jitter_of(fraction))
        assert wait == (backoff if asked is None else asked), "a readable Retry-After replaces the backoff"
        assert at + wait < end, "no wait outlasts the deadline"

    if last is None:
        assert trace[-1] == ("returned", "reply")
        return
    assert trace[-1] == ("raised", type(last), str(last)), "the call ends with its last try's error"
    at = sync.clock.now
    if isinstance(last, ModelDeadlineError):
        assert at >= end
    if retryable(last) and len(tries) <= setting["max_retries"]:
        asked = retry_after_seconds(getattr(last, "retry_after", None), lambda: EPOCH + at)
        if asked is None:
            asked = backoff_delay(len(sleeps), setting["backoff_base"], setting["max_backoff"], jitter_of(fraction))
        assert asked >= end - at, "with tries left, a retryable error ends the call only at the deadline"


def test_a_transport_error_past_the_deadline_is_the_deadlines_and_chunks_delivered_are_not_sent_again() -> None:
    clock = FakeClock()
    plan = RetryPlan(
        deadline=2.0,
        timeout=5,
        connect_timeout=1,
        max_retries=3,
        backoff_base=0.1,
        max_backoff=1,
        clock=clock.monotonic,
    )
    assert isinstance(plan.broken(httpx.ReadTimeout("slow")), ModelClientError)
    broke = plan.broken(httpx.ReadError("reset"), delivered=2)
    assert isinstance(broke, ModelResponseError) and plan.after(broke) is None
    clock.now = 2.0
    late = plan.broken(httpx.ReadTimeout("slow"))
    assert isinstance(late, ModelDeadlineError) and plan.after(late) is None
    with pytest.raises(ModelDeadlineError, match=r"deadline of 2 s"):
        plan.check()


def test_a_timeout_error_of_the_try_s_own_before_the_deadline_is_left_alone() -> None:
    plan = RetryPlan(deadline=60, timeout=5, connect_timeout=1, max_retries=3, backoff_base=0, max_backoff=0)

    async def attempt() -> str:
        raise TimeoutError("the callback's own")

    with pytest.raises(TimeoutError, match="the callback's own") as raised:
        asyncio.run(retry_async(plan, attempt))
    assert not isinstance(raised.value, ModelClientError)


def test_an_async_try_still_running_at_the_deadline_is_cancelled() -> None:
    clock = FakeClock()
    plan = RetryPlan(
        deadline=0.05, timeout=5, connect_timeout=1, max_retries=3, backoff_base=0, max_backoff=0, clock=clock.monotonic
    )

    async def attempt() -> str:
        clock.now = 1.0
        await asyncio.Event().wait()
        return "never"

    with pytest.raises(ModelDeadlineError, match=r"deadline of 0\.05 s"):
        asyncio.run(retry_async(plan, attempt))


def test_an_error_status_is_retried_only_when_another_try_may_succeed() -> None:
    plan = RetryPlan(deadline=60, timeout=5, connect_timeout=1, max_retries=3, backoff_base=0, max_backoff=0)
    assert plan.after(http_error(503, "busy", "1")) == 1.0
    assert plan.after(http_error(400, "no")) is None
    assert isinstance(http_error(429, "slow"), ModelHTTPError)


def test_retry_after_as_seconds_and_as_an_http_date() -> None:
    assert retry_after_seconds("2") == 2.0 and retry_after_seconds(" 0.5 ") == 0.5
    assert retry_after_seconds("-3") == 0.0 and retry_after_seconds(None) is None
    later = retry_after_seconds(formatdate(time.time() + 20, usegmt=True))
    assert later is not None and 15 < later <= 20
    assert retry_after_seconds(formatdate(time.time() - 20, usegmt=True)) == 0.0


def test_backoff_grows_with_jitter_up_to_its_cap() -> None:
    delays = [backoff_delay(attempt, 0.5, 4.0) for attempt in range(8) for _ in range(20)]
    assert all(0 < d <= 4.0 for d in delays)
    assert (
        max(backoff_delay(0, 0.5, 4.0) for _ in range(20)) <= 0.5 < min(backoff_delay(2, 0.5, 4.0) for _ in range(20))
    )
    assert backoff_delay(10_000, 0.5, 4.0) <= 4.0
