"""Tool retries (``agentfsm.retries``): each attempt a call edge, the count in snapshots, cancellable backoff."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import Agent, Breakpoint, BreakpointException, ChatMessage, Phase, RunCancelled, RunHandle, Tool, tool
from agentfsm.agent import RunRequest
from agentfsm.errors import ConfigurationError, ConfigurationTypeError, DeserializationError
from agentfsm.events import CallChanged, Event
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.machine import CallStatus, Facts, constant_facts
from agentfsm.retries import Retry
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.testing import comparable_result
from agentfsm.tools.tool import tool_from_dict
from tests.helpers import call, calls

USER = [ChatMessage.from_user("Fetch page a.")]

#: What the flaky tools raise on each attempt, in order (``None``: the attempt returns); shared by a run and its resume.
PLAN: list[BaseException | None] = []
ATTEMPTS: list[str] = []


def _attempt(url: str) -> str:
    ATTEMPTS.append(url)
    outcome = PLAN.pop(0) if PLAN else None
    if outcome is not None:
        raise outcome
    return f"page {url}"


@tool(retry=Retry(attempts=3, on=(ConnectionError, TimeoutError)))
def fetch(url: str) -> str:
    """Fetch a page; its server drops connections."""
    return _attempt(url)


@tool(retry=Retry(attempts=3, on=(ConnectionError,)), idempotent=True)
def lookup(url: str) -> str:
    """Look a page up; running it twice does no harm."""
    return _attempt(url)


def _plan(*outcomes: BaseException | None) -> None:
    PLAN[:] = list(outcomes)
    ATTEMPTS.clear()


def _agent(tools: list[Tool] | None = None, position: int = 0, **options: Any) -> Agent:
    name = (tools or [fetch])[0].name
    script = [calls(call(name, "c1", url="a")), "done"]
    return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=tools or [fetch], **options)


def _triggers(events: list[Event]) -> list[str]:
    return [e.trigger for e in events if isinstance(e, CallChanged)]


def _result_text(result: Any) -> str:
    [answer] = [m for m in result["messages"] if m.tool_call_result is not None]
    return str(answer.tool_call_result.result)


def test_a_call_that_fails_twice_then_succeeds_gives_the_model_its_result() -> None:
    _plan(ConnectionError("reset"), ConnectionError("reset"), None)
    events: list[Event] = []
    agent = _agent()
    result = agent.run(USER, on_event=events.append)
    assert ATTEMPTS == ["a", "a", "a"] and _result_text(result) == "page a"
    assert [t.trigger for t in result["trace"] if t.source is Phase.TOOL_RUN] == ["retry", "retry", "tools_done"]
    assert _triggers(events) == ["check", "retry", "reattempt", "retry", "reattempt", "finish"]
    # The model read the result of the last attempt only.
    last_call = agent.chat_generator.calls[-1]["messages"]  # type: ignore[attr-defined]
    assert [m.tool_call_result.result for m in last_call if m.tool_call_result] == ["page a"]
    assert result["last_message"].text == "done"


def test_async_runs_retry_as_sync_ones_do() -> None:
    _plan(ConnectionError("reset"), None)
    sync = comparable_result(_agent().run(USER))
    _plan(ConnectionError("reset"), None)
    assert comparable_result(asyncio.run(_agent().run_async(USER))) == sync
    assert ATTEMPTS == ["a", "a"]


def test_an_error_the_retry_does_not_cover_is_answered_at_once() -> None:
    _plan(ValueError("bad url"))
    result = _agent().run(USER)
    assert ATTEMPTS == ["a"] and "bad url" in _result_text(result)
    assert "retry" not in [t.trigger for t in result["trace"]]


def test_the_last_attempt_s_error_reaches_the_model() -> None:
    _plan(ConnectionError("one"), ConnectionError("two"), ConnectionError("three"), None)
    result = _agent().run(USER)
    assert ATTEMPTS == ["a"] * 3 and "three" in _result_text(result)


def _stalling(idempotent: bool, retry: Retry) -> tuple[Tool, threading.Event]:
    released = threading.Event()
    runs: list[int] = []

    def stalls(url: str) -> str:
        """Stalls on its first attempt, past its timeout; answers on the next."""
        runs.append(1)
        if len(runs) == 1:
            released.wait(30)
            return "late"
        return "on time"

    made = tool(stalls, timeout=0.05, idempotent=idempotent, retry=retry)
    return made, released


@pytest.mark.parametrize(
    ("idempotent", "may_repeat_effects", "retried"), [(False, False, False), (True, False, True), (False, True, True)]
)
def test_a_timed_out_call_is_retried_only_when_its_effect_may_be_repeated(
    idempotent: bool, may_repeat_effects: bool, retried: bool
) -> None:
    stalls, released = _stalling(
        idempotent, Retry(attempts=2, on=(TimeoutError,), may_repeat_effects=may_repeat_effects)
    )
    events: list[Event] = []
    try:
        result = _agent([stalls]).run(USER, on_event=events.append)
    finally:
        released.set()
    assert ("retry" in _triggers(events)) is retried
    assert (_result_text(result) == "on time") is retried
    if not retried:
        assert _triggers(events)[-1] == "time_out" and "did not finish" in _result_text(result)


def test_a_cancel_during_the_backoff_stops_the_run_before_the_next_attempt() -> None:
    _plan(ConnectionError("reset"), None)
    slow = tool(fetch.function, name="fetch", retry=Retry(attempts=3, backoff=3600, on=(ConnectionError,)))
    handle = RunHandle()

    def cancel_on_retry(event: Event) -> None:  # the wait starts after this: it ends at once
        if isinstance(event, CallChanged) and event.trigger == "retry":
            handle.cancel()

    with pytest.raises(RunCancelled) as cancelled:
        _agent([slow]).run(USER, cancel=handle, on_event=cancel_on_retry)
    snapshot = cancelled.value.snapshot
    assert ATTEMPTS == ["a"] and snapshot.phase is Phase.TOOL_RUN and snapshot.tool_call_attempts == {"c1": 1}
    assert snapshot.started_tool_calls == []  # the next attempt had not started: it is not in doubt
    result = _agent([slow], position=1).run(snapshot=snapshot)
    assert ATTEMPTS == ["a", "a"] and _result_text(result) == "page a"


def test_cancelling_the_task_during_the_backoff_keeps_the_count() -> None:
    _plan(ConnectionError("reset"), None)
    slow = tool(fetch.function, name="fetch", retry=Retry(attempts=3, backoff=3600, on=(ConnectionError,)))
    handle = RunHandle()

    async def main() -> None:
        waiting = asyncio.Event()

        def on_event(event: Event) -> None:
            if isinstance(event, CallChanged) and event.trigger == "retry":
                waiting.set()

        task = asyncio.ensure_future(_agent([slow]).run_async(USER, cancel=handle, on_event=on_event))
        await waiting.wait()
        await asyncio.sleep(0)  # into the backoff's wait
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    snapshot = handle.snapshot
    assert snapshot is not None and snapshot.tool_call_attempts == {"c1": 1} and ATTEMPTS == ["a"]
    # Resumed where it stood, in the backoff: it waits again (here for no time), then runs the next attempt.
    quick = tool(fetch.function, name="fetch", retry=Retry(attempts=3, on=(ConnectionError,)))
    result = _agent([quick], position=1).run(snapshot=snapshot)
    assert ATTEMPTS == ["a", "a"] and _result_text(result) == "page a"
    assert [t.trigger for t in result["trace"] if t.source is Phase.TOOL_RUN][-2:] == ["retry", "tools_done"]


def test_a_run_resumed_after_a_crash_mid_retry_goes_on_counting(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    # Attempt 1 fails, the process dies during attempt 2; resumed, attempt 2 runs again and fails: 3 attempts in all.
    _plan(ConnectionError("one"), KeyboardInterrupt("crash"), ConnectionError("two"), ConnectionError("three"))
    with pytest.raises(KeyboardInterrupt):
        _agent([lookup], snapshot_store=store).run(USER)
    crashed = store.latest(store.runs()[0].run_id)
    assert crashed.tool_call_attempts == {"c1": 1} and crashed.started_tool_calls == ["c1"]
    result = _agent([lookup], position=1, snapshot_store=store).run(snapshot=crashed)
    assert ATTEMPTS == ["a"] * 4 and "three" in _result_text(result)
    assert PLAN == []


def test_a_non_idempotent_call_in_doubt_after_a_crash_mid_retry_waits_for_a_decision(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    _plan(ConnectionError("one"), KeyboardInterrupt("crash"))
    with pytest.raises(KeyboardInterrupt):
        _agent(snapshot_store=store).run(USER)
    crashed = store.latest(store.runs()[0].run_id)
    with pytest.raises(BreakpointException) as in_doubt:
        _agent(position=1, snapshot_store=store).run(snapshot=crashed)
    assert in_doubt.value.snapshot.awaited_decisions() == ["c1"] and ATTEMPTS == ["a", "a"]


@settings(max_examples=30, deadline=None)
@given(failures=st.integers(0, 3), visit=st.integers(0, 3))
def test_a_run_paused_and_resumed_mid_retry_ends_as_the_uninterrupted_run(failures: int, visit: int) -> None:
    outcomes = [ConnectionError(f"failure {i}") for i in range(failures)]
    _plan(*outcomes)
    whole = comparable_result(_agent().run(USER))
    _plan(*outcomes)
    try:
        result = _agent().run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1, visit_count=visit))
    except BreakpointException as paused:
        result = _agent(position=1).run(snapshot=paused.snapshot)
    assert comparable_result(result) == whole


def test_the_backoff_grows_up_to_its_cap() -> None:
    assert Retry(attempts=5, backoff=0.5, multiplier=2, max_backoff=1.5).delays() == (0.5, 1.0, 1.5, 1.5)
    assert Retry(attempts=1).delays() == ()


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"attempts": 0}, ConfigurationError, "attempts"),
        ({"attempts": True}, ConfigurationError, "attempts"),
        ({"backoff": -1}, ConfigurationError, "backoff"),
        ({"backoff": float("nan")}, ConfigurationError, "backoff"),
        ({"multiplier": 0.5}, ConfigurationError, "multiplier"),
        ({"max_backoff": -0.1}, ConfigurationError, "max_backoff"),
        ({"on": ()}, ConfigurationTypeError, "on"),
        ({"on": ("TimeoutError",)}, ConfigurationTypeError, "exception types"),
        ({"on": (int,)}, ConfigurationTypeError, "exception types"),
        ({"may_repeat_effects": "yes"}, ConfigurationTypeError, "may_repeat_effects"),
    ],
)
def test_bad_retry_options_say_what_to_fix(options: dict[str, Any], error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        Retry(**options)


def test_a_tool_s_retry_must_be_a_retry() -> None:
    with pytest.raises(ConfigurationTypeError, match="retry takes a Retry"):
        tool(fetch.function, retry={"attempts": 3})  # type: ignore[arg-type]


def test_retry_serializes_with_its_tool() -> None:
    data = fetch.to_dict()
    assert data["data"]["retry"]["on"] == ["builtins.ConnectionError", "builtins.TimeoutError"]
    again = tool_from_dict(data, allowed_modules=["tests"])
    assert again.retry == fetch.retry
    assert "retry" not in tool(fetch.function, name="plain").to_dict()["data"]
    with pytest.raises(DeserializationError, match="no built-in exception type"):
        Retry.from_dict({**Retry().to_dict(), "on": ["builtins.print"]})
    with pytest.raises(DeserializationError):
        Retry.from_dict({**Retry().to_dict(), "on": ["os.system"]})


def test_an_agent_without_retries_never_reads_their_facts() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["done"]), tools=[tool(fetch.function, name="plain")])
    plain = agent.new_run(RunRequest(messages=USER))
    assert {("calls_retrying", False), ("results_outstanding", False)} <= plain.constants
    assert not plain.retries
    retrying = _agent().new_run(RunRequest(messages=USER))
    assert not {name for name, _ in constant_facts(retrying.config)} & {"calls_retrying", "results_outstanding"}
    assert Facts(calls_retrying=True).calls_retrying and CallStatus.RETRYING.value == "retrying"


def test_the_example_runs() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tool_retries_example", Path(__file__).parents[1] / "examples" / "tool_retries.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
