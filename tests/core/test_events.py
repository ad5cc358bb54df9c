"""The event stream of a run: what comes out, in which order, the three ways users get it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import Agent, BreakpointException, ChatMessage, Phase, RunHandle, State, StreamingChunk, hook, tool
from agentfsm.errors import ConfigurationTypeError, DeserializationError, ScriptExhaustedError, SerializationError
from agentfsm.events import (
    CallChanged,
    DecisionTaken,
    Event,
    ModelChunk,
    PhaseChanged,
    RunEnded,
    RunPaused,
    RunResumed,
    RunStarted,
    ToolEnded,
    ToolProgress,
    ToolStarted,
    event_from_dict,
    event_from_stored,
    stored_dict,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from agentfsm.machine import CALL_TRANSITIONS, CallStatus
from agentfsm.pauses import Cancelled
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import SIDE_EFFECTS, add, call, calls, fail

USER = [ChatMessage.from_user("go")]


def one_add(**agent_options: Any) -> Agent:
    """A model that asks for one ``add``, then answers."""
    script: list[ChatMessage | str] = [calls(call("add", "c1", a=1, b=2)), "3"]
    return Agent(chat_generator=ScriptedChatGenerator(script), tools=[add], **agent_options)


def shape(event: Event) -> tuple[Any, ...]:
    """What an event says, without its timestamps, durations and run id (they differ between runs)."""
    data = event.to_dict()
    return tuple((k, v) for k, v in data.items() if k not in ("at", "duration_us", "run_id", "result", "snapshot"))


def kinds(events: list[Event]) -> list[str]:
    """Each event's kind, and the edge or call it is about."""
    out = []
    for e in events:
        if isinstance(e, PhaseChanged):
            out.append(f"transition {e.source}->{e.dest}")
        elif isinstance(e, CallChanged):
            out.append(f"call {e.call} {e.source}->{e.dest}")
        else:
            out.append(e.kind)
    return out


def test_a_tool_using_run_gives_its_events_in_order() -> None:
    seen: list[Event] = []
    result = one_add().run(USER, on_event=seen.append)
    assert kinds(seen) == [
        "run_started",
        "transition IDLE->LLM_CALL",
        "model_started",
        "model_ended",
        "transition LLM_CALL->TOOL_PENDING",
        "call c1 proposed->ready",
        "transition TOOL_PENDING->TOOL_RUN",
        "tool_started",
        "tool_ended",
        "call c1 ready->done",
        "transition TOOL_RUN->EXIT_CHECK",
        "transition EXIT_CHECK->LLM_CALL",
        "model_started",
        "model_ended",
        "transition LLM_CALL->EXIT_CHECK",
        "transition EXIT_CHECK->DONE",
        "run_ended",
    ]
    assert {e.run_id for e in seen} == {seen[0].run_id}
    started, ended = (e for e in seen if isinstance(e, ToolStarted | ToolEnded))
    assert isinstance(started, ToolStarted) and (started.tool, started.call_id, started.arguments) == (
        "add",
        "c1",
        {"a": 1, "b": 2},
    )
    assert isinstance(ended, ToolEnded) and (ended.result, ended.error) == (3, None)
    last = seen[-1]
    assert isinstance(last, RunEnded) and last.result == result and last.exit_reason == "text"
    done = seen[-2]
    assert isinstance(done, PhaseChanged) and done.exit_reason == "text"
    assert [e.step for e in seen if e.kind == "model_started"] == [0, 1]


def test_iter_and_iter_async_give_the_same_events_as_on_event() -> None:
    handled: list[Event] = []
    one_add().run(USER, on_event=handled.append)
    iterated = list(one_add().iter(USER))

    async def collect() -> list[Event]:
        return [e async for e in one_add().iter_async(USER)]

    awaited: list[Event] = []

    async def handled_async() -> None:
        async def on_event(event: Event) -> None:
            awaited.append(event)

        await one_add().run_async(USER, on_event=on_event)

    asynced = asyncio.run(collect())
    asyncio.run(handled_async())
    expected = [shape(e) for e in handled]
    assert [shape(e) for e in iterated] == expected
    assert [shape(e) for e in asynced] == expected
    assert [shape(e) for e in awaited] == expected


def test_parallel_tool_calls_each_start_and_end() -> None:
    script: list[ChatMessage | str] = [calls(call("add", "c1", a=1, b=2), call("add", "c2", a=3, b=4)), "done"]
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[add], tool_concurrency=2)
    seen = list(agent.iter(USER))
    for key in ("c1", "c2"):
        mine = [
            kinds([e])[0]
            for e in seen
            if isinstance(e, ToolStarted | ToolEnded | CallChanged) and getattr(e, "call", None) == key
        ]
        assert mine == [f"call {key} proposed->ready", "tool_started", "tool_ended", f"call {key} ready->done"]
    results = {e.call: e.result for e in seen if isinstance(e, ToolEnded)}
    assert results == {"c1": 3, "c2": 7}


def test_a_failing_tool_and_a_failing_model_are_events() -> None:
    script: list[ChatMessage | str] = [calls(call("fail", "c1", reason="boom"))]  # then the script runs out
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[fail])
    seen: list[Event] = []
    with pytest.raises(ScriptExhaustedError):
        for event in agent.iter(USER):
            seen.append(event)
    [ended] = [e for e in seen if isinstance(e, ToolEnded)]
    assert ended.result is None and ended.error is not None and "boom" in ended.error
    assert kinds(seen)[-4:] == ["model_started", "model_failed", "transition LLM_CALL->FAILED", "run_ended"]
    last = seen[-1]
    assert isinstance(last, RunEnded) and last.result is None and last.error.startswith("ScriptExhaustedError")  # type: ignore[union-attr]


def test_a_pause_for_a_decision_ends_the_iteration_and_the_resumed_run_carries_on(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    strategies = {"add": BreakpointConfirmationStrategy(str(tmp_path))}
    first = list(one_add(confirmation_strategies=strategies).iter(USER))
    paused = first[-1]
    assert isinstance(paused, RunPaused), "a pause ends the iteration without raising"
    assert paused.reason == "confirmation" and paused.pause["tool_call_id"] == "c1" and paused.path is not None
    assert kinds(first)[-4:] == [
        "call c1 ready->undecided",
        "transition TOOL_PENDING->CONFIRM",
        "transition CONFIRM->PAUSED",
        "paused",
    ]
    assert SIDE_EFFECTS == []

    approve = ToolExecutionDecision("add", True, "c1")
    later = Agent(chat_generator=ScriptedChatGenerator(["3"]), tools=[add], confirmation_strategies=strategies)
    second = list(later.iter(snapshot=paused.snapshot, decisions=[approve]))
    assert {e.run_id for e in second} == {paused.run_id}
    assert kinds(second)[:8] == [
        "run_started",
        "call c1 proposed->ready",  # the pending call rebuilt from the snapshot
        "call c1 ready->undecided",
        "call c1 undecided->ready",  # the decision given with it
        "decision",
        "transition PAUSED->CONFIRM",
        "resumed",
        "transition CONFIRM->TOOL_RUN",
    ]
    started, resumed = second[0], second[6]
    assert isinstance(started, RunStarted) and started.resumed
    assert isinstance(resumed, RunResumed) and (resumed.phase, resumed.step) == ("CONFIRM", 1)
    [decision] = [e for e in second if isinstance(e, DecisionTaken)]
    assert decision.call == "c1" and decision.decision["execute"] is True
    assert isinstance(second[-1], RunEnded) and SIDE_EFFECTS == ["add(1,2)"]


def test_streamed_chunks_are_events_and_still_reach_the_streaming_callback() -> None:
    def without_events() -> list[StreamingChunk]:
        chunks: list[StreamingChunk] = []

        def callback(chunk: StreamingChunk) -> None:
            chunks.append(chunk)

        one_add().run(USER, streaming_callback=callback)
        return chunks

    chunks: list[StreamingChunk] = []

    def callback(chunk: StreamingChunk) -> None:
        chunks.append(chunk)

    events = list(one_add().iter(USER, streaming_callback=callback))
    assert chunks == without_events(), "the streaming callback sees what it sees without events"
    streamed = [e.chunk for e in events if isinstance(e, ModelChunk)]
    assert streamed and streamed == [c for c in chunks if c.tool_call_result is None]
    assert [e.chunk.content for e in events if isinstance(e, ModelChunk)][-2] == "3"


def test_an_async_streaming_callback_and_handler_under_run_async() -> None:
    chunks: list[StreamingChunk] = []
    seen: list[Event] = []

    async def callback(chunk: StreamingChunk) -> None:
        chunks.append(chunk)

    async def on_event(event: Event) -> None:
        seen.append(event)

    asyncio.run(one_add().run_async(USER, streaming_callback=callback, on_event=on_event))
    assert [e.chunk for e in seen if isinstance(e, ModelChunk)] == [c for c in chunks if c.tool_call_result is None]


def test_an_async_handler_needs_run_async() -> None:
    async def on_event(event: Event) -> None:
        pass

    with pytest.raises(ConfigurationTypeError, match="run_async"):
        one_add().run(USER, on_event=on_event)
    with pytest.raises(ConfigurationTypeError, match="callable"):
        one_add().run(USER, on_event="print")  # type: ignore[arg-type]


ERRORS: list[BaseException] = []


@hook
def keep_error(state: State, error: BaseException) -> None:
    """Remember the error that failed the run."""
    ERRORS.append(error)


def test_breaking_out_of_iter_cancels_the_run_where_it_stands_and_leaves_nothing_running(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    ERRORS.clear()
    store = SQLiteSnapshotStore(tmp_path / "runs.db")
    agent = one_add(hooks={"on_error": [keep_error]}, snapshot_store=store)
    handle = RunHandle()
    for event in agent.iter(USER, cancel=handle):
        if event.kind == "model_ended":
            break
    assert SIDE_EFFECTS == [] and ERRORS == [], "the tool never ran, and the run did not fail"
    assert not [t for t in threading.enumerate() if t.name == "agentfsm-iter"]
    snapshot = handle.snapshot
    assert snapshot is not None and isinstance(snapshot.pause, Cancelled)
    assert store.latest(snapshot.run_id).seq == snapshot.seq, "kept in the store, as its head"
    assert snapshot.phase is Phase.LLM_CALL, "the reply the loop never saw is asked for again on resume"
    assert agent.run(snapshot=snapshot)["exit_reason"] == "text"
    store.close()


def test_breaking_out_of_iter_async_cancels_the_run_where_it_stands() -> None:
    SIDE_EFFECTS.clear()
    ERRORS.clear()
    agent = one_add(hooks={"on_error": [keep_error]})
    handle = RunHandle()

    async def stop_early() -> None:
        async with contextlib.aclosing(agent.iter_async(USER, cancel=handle)) as events:
            async for event in events:
                if event.kind == "tool_started":
                    break

    asyncio.run(stop_early())
    assert SIDE_EFFECTS == [] and ERRORS == []
    snapshot = handle.snapshot
    assert snapshot is not None and snapshot.phase is Phase.TOOL_RUN
    # Its call was handed to the tools: the run cannot tell whether it started, so it is in doubt.
    assert snapshot.outcome_unknown_calls() == {"c1": "add"}
    with pytest.raises(BreakpointException) as in_doubt:
        agent.run(snapshot=snapshot)
    run_it = ToolExecutionDecision("add", True, "c1")
    assert agent.run(snapshot=in_doubt.value.snapshot, decisions=[run_it])["exit_reason"] == "text"
    assert SIDE_EFFECTS == ["add(1,2)"]


def test_events_round_trip_through_to_dict(tmp_path: Path) -> None:
    strategies = {"add": BreakpointConfirmationStrategy(str(tmp_path))}
    events = list(one_add(confirmation_strategies=strategies).iter(USER, streaming_callback=lambda chunk: None))
    events += list(one_add().iter(USER))
    assert {e.kind for e in events} >= {"model_chunk", "paused", "run_ended", "tool_ended"}
    for event in events:
        data = event.to_dict()
        assert json.loads(json.dumps(data)) == data
        assert event_from_dict(data).to_dict() == data
        if not isinstance(event, RunEnded):  # a result comes back as data (its trace as dicts)
            assert type(event).from_dict(data) == event


def test_a_progress_event_round_trips_through_to_dict() -> None:
    from agentfsm.tools import ProgressReporter

    @tool
    def index(files: int, report_progress: ProgressReporter) -> str:
        """Index files."""
        report_progress(1, files, "indexed a.txt")
        report_progress(files)
        return "indexed"

    script: list[ChatMessage | str] = [calls(call("index", "c1", files=2)), "done"]
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[index])
    reports = [e for e in agent.iter(USER) if isinstance(e, ToolProgress)]
    assert [(e.progress, e.total, e.message) for e in reports] == [(1.0, 2.0, "indexed a.txt"), (2.0, None, None)]
    for event in reports:
        data = event.to_dict()
        assert data["kind"] == "tool_progress" and data["call"] == "c1" and data["tool"] == "index"
        assert json.loads(json.dumps(data)) == data
        assert event_from_dict(data) == ToolProgress.from_dict(data) == event


class Opaque:
    """A State value with no JSON form."""


def test_a_stored_event_leaves_out_what_a_store_holds_as_snapshots(tmp_path: Path) -> None:
    strategies = {"add": BreakpointConfirmationStrategy(str(tmp_path))}
    events = list(one_add(confirmation_strategies=strategies).iter(USER, streaming_callback=lambda chunk: None))
    opaque = one_add(state_schema={"opaque": {"type": Opaque}})
    events += list(opaque.iter(USER, opaque=Opaque()))
    ended, paused = events[-1], next(e for e in events if isinstance(e, RunPaused))
    assert isinstance(ended, RunEnded) and ended.result is not None
    with pytest.raises(SerializationError):
        ended.to_dict()  # the result holds the State, whose value has no JSON form...
    stored = stored_dict(ended)  # ...which the stored form does not convert
    assert "result" not in stored and stored["exit_reason"] == "text"
    # No store holds this pause's snapshot (no seq): its stored form keeps it; with a seq it is left out.
    assert paused.seq is None and stored_dict(paused)["snapshot"] == paused.to_dict()["snapshot"]
    kept = replace(paused, seq=4)
    assert "snapshot" not in stored_dict(kept) and stored_dict(kept)["seq"] == 4
    for event in events:
        data = stored_dict(event)
        assert json.loads(json.dumps(data)) == data
        back = event_from_stored(data, paused.snapshot if isinstance(event, RunPaused) else None)
        assert stored_dict(back) == data and type(back) is type(event)
        if isinstance(event, RunEnded):
            assert back == RunEnded(event.run_id, event.step, event.at, None, event.exit_reason, event.error)
        else:
            assert back == event
    assert event_from_stored(stored_dict(paused)) == paused
    with pytest.raises(DeserializationError, match="with the snapshot it paused with"):
        event_from_stored(stored_dict(kept))
    for damaged in ({"kind": ["transition"]}, {"kind": "nothing"}, {"kind": "hook", "run_id": "r", "step": 0, "at": 0}):
        with pytest.raises(DeserializationError):
            event_from_stored(damaged)


def test_a_run_without_listeners_records_no_events() -> None:
    from agentfsm.agent import RunRequest

    agent = one_add()
    run = agent.new_run(RunRequest(messages=USER))
    assert agent.run(USER)["exit_reason"] == "text"
    run.next_action()
    assert run.take_events() == []


# -- the stream and the run's records agree ---------------------------------------------------------

REPLIES = st.lists(
    st.one_of(
        st.just("text"),
        st.lists(st.sampled_from(["add", "fail", "missing"]), min_size=1, max_size=3),
    ),
    max_size=4,
)


def scripted(replies: list[Any]) -> list[ChatMessage | str]:
    script: list[ChatMessage | str] = []
    for step, reply in enumerate(replies):
        if reply == "text":
            script.append("an answer")
            continue
        arguments = {"add": {"a": 1, "b": 2}, "fail": {"reason": "no"}, "missing": {}}
        script.append(calls(*(call(n, f"s{step}c{i}", **arguments[n]) for i, n in enumerate(reply))))
    return [*script, "the end"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REPLIES, st.booleans())
def test_transition_events_are_the_trace_and_call_events_replay_the_call_table(
    replies: list[Any], in_async: bool
) -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(scripted(replies)), tools=[add, fail], max_agent_steps=5)
    seen: list[Event] = []
    if in_async:
        result = asyncio.run(agent.run_async(USER, on_event=seen.append))
    else:
        result = agent.run(USER, on_event=seen.append)
    phases = [(e.step, e.source, e.dest, e.trigger) for e in seen if isinstance(e, PhaseChanged)]
    assert phases == [(r.step, r.source.value, r.dest.value, r.trigger) for r in result["trace"]]
    declared = {(t.source.value, t.trigger): t.dest.value for t in CALL_TRANSITIONS}
    where: dict[str, str] = {}
    for event in seen:
        if isinstance(event, CallChanged):
            assert declared[(event.source, event.trigger)] == event.dest
            assert where.get(event.call, CallStatus.PROPOSED.value) == event.source
            where[event.call] = event.dest
    ran = {e.call for e in seen if isinstance(e, ToolStarted)}
    assert ran == {key for key, status in where.items() if status == "done"}
    answered = {e.call for e in seen if isinstance(e, ToolEnded)}
    assert answered == {key for key, status in where.items() if status in ("done", "failed")}


@hook
def count_calls(state: State) -> None:
    """Count the model calls about to be made."""
    state.set("calls", (state.get("calls") or 0) + 1)


@hook
def refuse(state: State) -> None:
    """Refuse to go on."""
    raise RuntimeError("not today")


@pytest.mark.parametrize("in_async", [False, True])
def test_each_hook_firing_is_an_event_with_its_error(in_async: bool) -> None:
    from agentfsm.events import HookRan

    agent = one_add(hooks={"before_llm": [count_calls], "before_tool": [refuse]}, state_schema={"calls": {"type": int}})
    seen: list[Event] = []
    with pytest.raises(RuntimeError, match="not today"):
        if in_async:
            asyncio.run(agent.run_async(USER, on_event=seen.append))
        else:
            agent.run(USER, on_event=seen.append)
    hooks = [(e.point, e.hook, e.error) for e in seen if isinstance(e, HookRan)]
    assert hooks == [("before_llm", "count_calls", None), ("before_tool", "refuse", "RuntimeError: not today")]
    last = seen[-1]
    assert isinstance(last, RunEnded) and last.error == "RuntimeError: not today"


@pytest.mark.parametrize("point", ["before_run", "after_run"])
@pytest.mark.parametrize("in_async", [False, True])
def test_a_run_hook_that_fails_where_the_run_cannot_fail_still_ends_the_stream(point: str, in_async: bool) -> None:
    agent = one_add(hooks={point: [refuse]})
    seen: list[Event] = []
    with pytest.raises(RuntimeError, match="not today"):
        if in_async:
            asyncio.run(agent.run_async(USER, on_event=seen.append))
        else:
            agent.run(USER, on_event=seen.append)
    last = seen[-1]
    assert isinstance(last, RunEnded) and last.error == "RuntimeError: not today" and last.result is None
    assert [e.kind for e in seen].count("run_ended") == 1


def test_the_log_and_a_handler_read_the_same_transitions() -> None:
    import io

    from agentfsm import configure_logging, use_standard_logging

    stream = io.StringIO()
    seen: list[Event] = []
    try:
        configure_logging(stream=stream)
        one_add().run(USER, on_event=seen.append)
    finally:
        use_standard_logging()
    logged = [line for line in stream.getvalue().splitlines() if "event='transition'" in line]
    phases = [e for e in seen if isinstance(e, PhaseChanged)]
    assert len(logged) == len(phases) == 7
    assert all(
        f"source='{e.source}' dest='{e.dest}' trigger='{e.trigger}'" in line
        for e, line in zip(phases, logged, strict=True)
    )
    assert sum("event='call transition'" in line for line in stream.getvalue().splitlines()) == 2


def test_iter_reports_a_misspelt_option_before_the_run_starts() -> None:
    from agentfsm import UsageLimits
    from agentfsm.errors import ConfigurationError

    model = ScriptedChatGenerator(["done"])
    agent = Agent(chat_generator=model)
    with pytest.raises(ConfigurationError, match="usage_limits") as typo:
        agent.iter(USER, usage_limit=UsageLimits(requests=1))
    assert "'usage_limit'" in str(typo.value)
    with pytest.raises(ConfigurationError, match="usage_limits"):
        agent.iter_async(USER, usage_limit=UsageLimits(requests=1))
    assert model.calls == []
    assert [e.kind for e in agent.iter(USER, usage_limits=UsageLimits(requests=1))][-1] == "run_ended"
