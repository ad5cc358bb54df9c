"""The worker threads that run the sync calls of async runs."""

from __future__ import annotations

import asyncio
import contextvars
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentfsm.errors import ConfigurationError
from agentfsm.workers import DEFAULT_MAX_WORKERS, run_in_worker, set_max_workers

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[BaseException | None]]:
    """Exceptions that escaped a worker thread (there must be none)."""
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    yield errors
    assert errors == []


def record_loop_errors(errors: list[dict[str, Any]]) -> None:
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))


def describe(a: int, *, b: int) -> tuple[int, int, str, int]:
    return a, b, request_id.get(), threading.get_ident()


async def test_a_call_runs_in_another_thread_with_the_callers_context() -> None:
    request_id.set("r-1")
    a, b, seen, thread = await run_in_worker(describe, 1, b=2)
    assert (a, b, seen) == (1, 2, "r-1")
    assert thread != threading.get_ident()


class Stop(BaseException):
    """Not an Exception: must still reach the awaiting task."""


def fail(error: BaseException) -> None:
    raise error


@pytest.mark.parametrize("error", [ValueError("bad value"), Stop("stop")])
async def test_what_the_call_raises_is_raised_in_the_awaiting_task(error: BaseException) -> None:
    with pytest.raises(type(error), match=str(error)):
        await run_in_worker(fail, error)


async def test_a_blocking_call_does_not_stall_the_loop() -> None:
    released = threading.Event()

    async def release_soon() -> None:
        await asyncio.sleep(0.01)
        released.set()

    blocked = run_in_worker(released.wait, 5)
    await release_soon()
    assert await blocked is True


async def test_many_calls_from_many_tasks_each_get_their_own_result(thread_errors: list[Any]) -> None:
    loop_errors: list[dict[str, Any]] = []
    record_loop_errors(loop_errors)

    async def task(i: int) -> list[tuple[int, int, str, int]]:
        request_id.set(f"task-{i}")
        results = []
        for step in range(5):
            results.append(await run_in_worker(describe, i, b=step))
            await asyncio.sleep(0)
        return results

    outcomes = await asyncio.gather(*(task(i) for i in range(300)))
    for i, results in enumerate(outcomes):
        assert [(a, b, seen) for a, b, seen, _ in results] == [(i, step, f"task-{i}") for step in range(5)]
    threads = {thread for results in outcomes for *_, thread in results}
    assert 1 <= len(threads) <= DEFAULT_MAX_WORKERS
    assert loop_errors == []


async def test_a_cancelled_call_finishes_in_its_thread_and_its_result_is_dropped(thread_errors: list[Any]) -> None:
    loop_errors: list[dict[str, Any]] = []
    record_loop_errors(loop_errors)
    started, released, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        released.wait(60)
        finished.set()
        return "late"

    future = run_in_worker(slow)
    assert await asyncio.to_thread(started.wait, 60), "the call never started in a worker"
    future.cancel()
    released.set()
    assert await asyncio.to_thread(finished.wait, 60)
    assert await run_in_worker(describe, 3, b=4)  # the workers still serve; the late result was dropped
    await asyncio.sleep(0.01)
    assert loop_errors == []


def test_a_call_that_outlives_its_loop_is_dropped_and_the_next_loop_is_served(thread_errors: list[Any]) -> None:
    released, finished = threading.Event(), threading.Event()

    def slow() -> str:
        released.wait(5)
        finished.set()
        return "late"

    async def start_and_leave() -> None:
        run_in_worker(slow)

    asyncio.run(start_and_leave())  # closes its loop while the call is still running
    released.set()
    assert finished.wait(5)
    time.sleep(0.01)  # the worker posts the result to the closed loop
    assert asyncio.run(_describe())[:3] == (5, 6, "unset")


async def _describe() -> tuple[int, int, str, int]:
    return await run_in_worker(describe, 5, b=6)


def test_run_in_worker_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match="no running event loop"):
        run_in_worker(describe, 1, b=2)


async def test_more_workers_let_more_calls_wait_at_once() -> None:
    count = DEFAULT_MAX_WORKERS + 3
    barrier = threading.Barrier(count, timeout=5)  # passes only when every call runs at the same time
    set_max_workers(count)
    try:
        positions = await asyncio.gather(*(run_in_worker(barrier.wait) for _ in range(count)))
    finally:
        set_max_workers(DEFAULT_MAX_WORKERS)
    assert sorted(positions) == list(range(count))


@pytest.mark.parametrize("count", [0, -1, 2.5, True, "4"])
def test_the_number_of_workers_must_be_a_positive_int(count: Any) -> None:
    with pytest.raises(ConfigurationError, match="worker threads must be an int >= 1"):
        set_max_workers(count)


def _call_in_a_new_loop(results: Any) -> None:
    results.put(asyncio.run(_describe())[:3])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_starts_workers_of_its_own() -> None:
    assert asyncio.run(_describe())[:3] == (5, 6, "unset")  # the parent's workers exist
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_call_in_a_new_loop, args=(results,))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the child waited for workers that only exist in its parent")
    assert child.exitcode == 0
    assert results.get(timeout=1) == (5, 6, "unset")


def test_loops_in_several_threads_each_get_their_own_results(thread_errors: list[Any]) -> None:
    results: dict[int, list[tuple[int, int, str, int]]] = {}
    start = threading.Barrier(2)

    async def calls(loop_number: int) -> None:
        start.wait(5)
        for i in range(200):  # the two loops' calls interleave: each call may find the other loop's inbox last
            results.setdefault(loop_number, []).append(
                await asyncio.wait_for(run_in_worker(describe, loop_number, b=i), 5)
            )

    threads = [threading.Thread(target=asyncio.run, args=(calls(n),)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for n in (0, 1):
        assert [(a, b) for a, b, _, _ in results[n]] == [(n, i) for i in range(200)]
