"""Tools reporting progress: ``report_progress`` calls become ``tool_progress`` events of the run, live."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, ChatRole, RunHandle, Tool, ToolCall, ToolInvoker, tool
from agentfsm.errors import ToolProgressError
from agentfsm.events import Event, RunEnded, ToolEnded, ToolProgress, ToolStarted
from agentfsm.hitl import ToolExecutionDecision
from agentfsm.pauses import Cancelled
from agentfsm.tools import ProgressReporter
from agentfsm.tools.progress import unheard

USER = [ChatMessage.from_user("index the three files")]


class Echo:
    """A model that asks for the given calls, then answers with what the tools returned (as a real model reads them)."""

    def __init__(self, *tool_calls: ToolCall) -> None:
        self.tool_calls = list(tool_calls)

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        if messages[-1].role is ChatRole.USER:
            return {"replies": [ChatMessage.from_assistant(tool_calls=self.tool_calls)]}
        results = [str(m.tool_call_result.result) for m in messages if m.tool_call_result is not None]
        return {"replies": [ChatMessage.from_assistant("answer: " + "; ".join(results))]}

    async def run_async(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self.run(messages, tools, **kwargs)


@tool
def index(files: int, report_progress: ProgressReporter) -> str:
    """Index ``files`` files, reporting each."""
    for done in range(1, files + 1):
        report_progress(done, files, f"indexed file {done}")
    return f"indexed {files} files"


def index_agent(*keys: str, files: int = 3, **options: Any) -> Agent:
    calls = [ToolCall("index", {"files": files}, id=key) for key in keys or ("c1",)]
    return Agent(chat_generator=Echo(*calls), tools=[index], **options)


def progress_of(events: list[Event], call: str) -> list[tuple[float, float | None, str | None]]:
    return [(e.progress, e.total, e.message) for e in events if isinstance(e, ToolProgress) and e.call == call]


def lifecycle(events: list[Event], call: str) -> list[str]:
    """The kinds of a call's tool events, in order."""
    return [e.kind for e in events if isinstance(e, ToolStarted | ToolProgress | ToolEnded) and e.call == call]


INDEXED = [(1.0, 3.0, "indexed file 1"), (2.0, 3.0, "indexed file 2"), (3.0, 3.0, "indexed file 3")]


# -- the tool's side ----------------------------------------------------------------------------------


def test_the_parameter_is_not_shown_to_the_model_and_other_tools_are_called_as_before() -> None:
    assert "report_progress" not in index.parameters["properties"]
    assert index.parameters["required"] == ["files"]
    received: list[dict[str, Any]] = []

    def spy(files: int, **kwargs: Any) -> str:
        received.append(kwargs)
        return "ok"

    plain = Tool("spy", "Takes any keyword.", {"type": "object", "properties": {"files": {"type": "integer"}}}, spy)
    assert index.takes_progress and not plain.takes_progress
    agent = Agent(chat_generator=Echo(ToolCall("spy", {"files": 1}, id="c1")), tools=[plain])
    seen: list[Event] = []
    agent.run(USER, on_event=seen.append)
    assert received == [{}], "a tool without the parameter gets no reporter, even through **kwargs"
    assert not [e for e in seen if isinstance(e, ToolProgress)]


def test_the_reporter_type_may_be_imported_for_type_checkers_only() -> None:
    # As under ``if TYPE_CHECKING:``: the annotation names a type the tool's module does not define at run time.
    def download(url: str, report_progress: ReporterForTypeCheckersOnly) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Download a URL."""
        report_progress(1, 1)
        return url

    assert tool(download).parameters == {
        "properties": {"url": {"type": "string"}},
        "required": ["url"],
        "type": "object",
    }


def test_outside_a_run_or_with_nobody_listening_the_reports_are_checked_and_dropped() -> None:
    messages = [ChatMessage.from_assistant(tool_calls=[ToolCall("index", {"files": 2}, id="c1")])]
    [message] = ToolInvoker([index]).run(messages)["tool_messages"]
    assert message.tool_call_result is not None and message.tool_call_result.result == "indexed 2 files"
    assert index_agent().run(USER)["last_message"].text == "answer: indexed 3 files"
    with pytest.raises(ToolProgressError):
        unheard("half")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (("half",), "progress must be a finite number, got 'half'"),
        ((True,), "progress must be a finite number, got True"),
        ((math.nan,), "progress must be a finite number, got nan"),
        ((10**400,), "progress must be a finite number, got 1000"),
        ((1, math.inf), "total must be a finite number or None, got inf"),
        ((1, "10"), "total must be a finite number or None, got '10'"),
        ((1, 10, 7), "message must be a string or None, got int"),
    ],
)
@pytest.mark.parametrize("listening", [True, False])
def test_a_bad_report_is_a_typed_error_in_the_tool_that_the_model_reads(
    arguments: tuple[Any, ...], problem: str, listening: bool
) -> None:
    @tool
    def careless(report_progress: ProgressReporter) -> str:
        """Reports what it should not."""
        report_progress(*arguments)
        return "unreachable"

    agent = Agent(chat_generator=Echo(ToolCall("careless", {}, id="c1")), tools=[careless])
    seen: list[Event] = []
    result = agent.run(USER, on_event=seen.append) if listening else agent.run(USER)
    assert f"ToolProgressError: report_progress: {problem}" in result["last_message"].text
    assert not [e for e in seen if isinstance(e, ToolProgress)]
    with pytest.raises(TypeError):  # a ToolProgressError is a TypeError, as a call with a wrong argument is
        unheard(*arguments)


def test_numbers_of_any_real_type_are_reported_as_floats() -> None:
    from fractions import Fraction

    @tool
    def exact(report_progress: ProgressReporter) -> str:
        """Reports a fraction and an int."""
        report_progress(Fraction(1, 4), 1)
        return "ok"

    seen: list[Event] = []
    Agent(chat_generator=Echo(ToolCall("exact", {}, id="c1")), tools=[exact]).run(USER, on_event=seen.append)
    [report] = [e for e in seen if isinstance(e, ToolProgress)]
    assert (report.progress, report.total, report.message) == (0.25, 1.0, None)
    assert type(report.progress) is float and type(report.total) is float


# -- the three ways to watch a run --------------------------------------------------------------------


def test_a_sync_tool_reports_progress_to_on_event_between_its_start_and_end() -> None:
    seen: list[Event] = []
    result = index_agent().run(USER, on_event=seen.append)
    assert lifecycle(seen, "c1") == ["tool_started", "tool_progress", "tool_progress", "tool_progress", "tool_ended"]
    assert progress_of(seen, "c1") == INDEXED
    report = next(e for e in seen if isinstance(e, ToolProgress))
    assert (report.call_id, report.tool, report.step, report.run_id) == ("c1", "index", 1, seen[0].run_id)
    assert result["last_message"].text == "answer: indexed 3 files"


def test_run_async_with_an_async_handler_gets_the_same_events() -> None:
    handled: list[Event] = []
    index_agent().run(USER, on_event=handled.append)
    awaited: list[Event] = []

    async def on_event(event: Event) -> None:
        await asyncio.sleep(0)
        awaited.append(event)

    result = asyncio.run(index_agent().run_async(USER, on_event=on_event))
    assert result["last_message"].text == "answer: indexed 3 files"
    assert [e.kind for e in awaited] == [e.kind for e in handled]
    assert progress_of(awaited, "c1") == INDEXED


def waits_to_be_seen(seen_live: threading.Event) -> Tool:
    """A tool that reports once, then waits until the loop over the run's events has seen the report."""

    @tool
    def fetch(url: str, report_progress: ProgressReporter) -> str:
        """Fetch a URL."""
        report_progress(0.5, 1.0, f"half of {url}")
        return "seen live" if seen_live.wait(10) else "not seen while running"

    return fetch


def test_iter_yields_the_progress_while_the_tool_is_still_running() -> None:
    seen_live = threading.Event()
    agent = Agent(chat_generator=Echo(ToolCall("fetch", {"url": "a"}, id="c1")), tools=[waits_to_be_seen(seen_live)])
    kinds = []
    for event in agent.iter(USER):
        kinds.append(event.kind)
        if isinstance(event, ToolProgress):
            assert event.message == "half of a"
            seen_live.set()
    assert kinds[kinds.index("tool_started") :][:3] == ["tool_started", "tool_progress", "tool_ended"]
    assert isinstance(event, RunEnded) and event.result is not None
    assert event.result["last_message"].text == "answer: seen live"


def test_iter_async_yields_the_progress_of_a_sync_tool_while_it_runs_in_its_worker_thread() -> None:
    seen_live = threading.Event()
    agent = Agent(chat_generator=Echo(ToolCall("fetch", {"url": "b"}, id="c1")), tools=[waits_to_be_seen(seen_live)])

    async def watch() -> list[Event]:
        events = []
        async for event in agent.iter_async(USER):
            events.append(event)
            if isinstance(event, ToolProgress):
                seen_live.set()
        return events

    events = asyncio.run(watch())
    assert lifecycle(events, "c1") == ["tool_started", "tool_progress", "tool_ended"]
    last = events[-1]
    assert isinstance(last, RunEnded) and last.result is not None
    assert last.result["last_message"].text == "answer: seen live"


def test_a_sync_tool_run_inline_on_the_event_loop_reports_before_its_end() -> None:
    seen: list[Event] = []
    agent = index_agent("c1", "c2", tool_invoker_kwargs={"sync_tools_in_threads": False})
    result = asyncio.run(agent.run_async(USER, on_event=seen.append))
    assert result["last_message"].text == "answer: indexed 3 files; indexed 3 files"
    for key in ("c1", "c2"):
        assert lifecycle(seen, key)[-4:] == ["tool_progress"] * 3 + ["tool_ended"]
        assert progress_of(seen, key) == INDEXED


class Countdown(Tool):
    """An awaitable tool (as an MCP tool is): under ``run_async`` its ``invoke_async`` reports from the event loop."""

    def __init__(self) -> None:
        super().__init__(
            "countdown",
            "Count down from start.",
            {"type": "object", "properties": {"start": {"type": "integer"}}, "required": ["start"]},
            self._count,
        )
        self.resume: asyncio.Event | None = None

    def _count(self, start: int, report_progress: ProgressReporter | None = None) -> str:
        raise AssertionError("the async run awaits invoke_async")

    async def invoke_async(self, **kwargs: Any) -> Any:
        report: ProgressReporter = kwargs["report_progress"]
        start = kwargs["start"]
        for left in range(start, 0, -1):
            report(start - left + 1, start, f"{left} left")
            assert self.resume is not None
            await asyncio.wait_for(self.resume.wait(), 10)  # until the loop over the events saw the report
            self.resume.clear()
        return "lift-off"


def test_an_awaitable_tool_reports_from_the_event_loop_and_iter_async_sees_each_report_as_it_comes() -> None:
    countdown = Countdown()
    agent = Agent(chat_generator=Echo(ToolCall("countdown", {"start": 3}, id="c1")), tools=[countdown])

    async def watch() -> list[Event]:
        countdown.resume = asyncio.Event()
        events = []
        async for event in agent.iter_async(USER):
            events.append(event)
            if isinstance(event, ToolProgress):
                countdown.resume.set()
        return events

    events = asyncio.run(watch())
    assert progress_of(events, "c1") == [(1.0, 3.0, "3 left"), (2.0, 3.0, "2 left"), (3.0, 3.0, "1 left")]
    assert lifecycle(events, "c1") == ["tool_started", *["tool_progress"] * 3, "tool_ended"]
    last = events[-1]
    assert isinstance(last, RunEnded) and last.result is not None
    assert last.result["last_message"].text == "answer: lift-off"


# -- parallel tools -----------------------------------------------------------------------------------


def parallel_agent(together: threading.Barrier, threads: set[str]) -> Agent:
    @tool
    def crawl(site: str, report_progress: ProgressReporter) -> str:
        """Crawl a site."""
        together.wait(10)  # every call runs at once, each in a thread of its own
        threads.add(threading.current_thread().name)
        for page in range(1, 6):
            report_progress(page, 5, f"{site} page {page}")
        return f"{site} crawled"

    calls = [ToolCall("crawl", {"site": site}, id=site) for site in ("s1", "s2", "s3")]
    return Agent(chat_generator=Echo(*calls), tools=[crawl], tool_concurrency=3)


def one_at_a_time(seen: list[Event], overlaps: list[Event]) -> Callable[[Event], None]:
    """A handler that notes any event handed to it while it was still handling another."""
    busy = threading.Lock()

    def handle(event: Event) -> None:
        if not busy.acquire(blocking=False):
            overlaps.append(event)
            return
        try:
            time.sleep(0.0005)
            seen.append(event)
        finally:
            busy.release()

    return handle


def check_parallel(seen: list[Event], threads: set[str]) -> None:
    assert len(threads) == 3, "the calls ran in three threads"
    for site in ("s1", "s2", "s3"):
        assert lifecycle(seen, site) == ["tool_started", *["tool_progress"] * 5, "tool_ended"]
        assert progress_of(seen, site) == [(float(p), 5.0, f"{site} page {p}") for p in range(1, 6)]
    last = seen[-1]
    assert isinstance(last, RunEnded) and last.result is not None
    assert last.result["last_message"].text == "answer: s1 crawled; s2 crawled; s3 crawled"


def test_parallel_tools_report_from_their_threads_one_event_at_a_time() -> None:
    seen: list[Event] = []
    overlaps: list[Event] = []
    threads: set[str] = set()
    parallel_agent(threading.Barrier(3), threads).run(USER, on_event=one_at_a_time(seen, overlaps))
    assert overlaps == []
    check_parallel(seen, threads)


def test_parallel_tools_under_run_async_report_from_worker_threads_in_order() -> None:
    seen: list[Event] = []
    threads: set[str] = set()

    async def on_event(event: Event) -> None:
        await asyncio.sleep(0)  # an async handler is awaited: no other event goes out meanwhile
        seen.append(event)

    asyncio.run(parallel_agent(threading.Barrier(3), threads).run_async(USER, on_event=on_event))
    check_parallel(seen, threads)


# -- after the call, and a handler that fails -----------------------------------------------------------


def test_reports_made_after_the_call_ended_are_dropped() -> None:
    release, reported = threading.Event(), threading.Event()

    @tool(timeout=0.2)
    def stuck(report_progress: ProgressReporter) -> str:
        """Outlives its timeout, then reports."""
        release.wait(10)
        report_progress(1, 1, "too late")
        reported.set()
        return "dropped"

    seen: list[Event] = []
    agent = Agent(chat_generator=Echo(ToolCall("stuck", {}, id="c1")), tools=[stuck])
    result = agent.run(USER, on_event=seen.append)
    assert "ToolTimeoutError" in result["last_message"].text
    release.set()
    assert reported.wait(10)
    assert not [e for e in seen if isinstance(e, ToolProgress)]
    assert isinstance(seen[-1], RunEnded)


class Refused(Exception):
    """The handler's own error."""


def refuse_progress(event: Event) -> None:
    if isinstance(event, ToolProgress):
        raise Refused("the handler refused a progress event")


def test_a_handler_that_raises_on_a_progress_event_fails_the_run_not_the_tool() -> None:
    finished: list[str] = []

    @tool
    def job(report_progress: ProgressReporter) -> str:
        """Reports twice and finishes."""
        report_progress(1, 2)
        report_progress(2, 2)
        finished.append("job")
        return "done"

    agent = Agent(chat_generator=Echo(ToolCall("job", {}, id="c1")), tools=[job])
    with pytest.raises(Refused):
        agent.run(USER, on_event=refuse_progress)
    assert finished == ["job"], "the tool never saw the handler's error"

    async def refuse_async(event: Event) -> None:
        refuse_progress(event)

    finished.clear()
    with pytest.raises(Refused):
        asyncio.run(agent.run_async(USER, on_event=refuse_async))
    assert finished == ["job"]


def test_breaking_out_of_iter_at_a_progress_event_cancels_the_run() -> None:
    handle = RunHandle()
    agent = index_agent()
    for event in agent.iter(USER, cancel=handle):
        if isinstance(event, ToolProgress):
            break
    assert not [t for t in threading.enumerate() if t.name == "agentfsm-iter"]
    snapshot = handle.snapshot
    assert snapshot is not None and isinstance(snapshot.pause, Cancelled)
    # The loop stopped while the call ran: its outcome was never recorded, so it is in doubt.
    assert snapshot.outcome_unknown_calls() == {"c1": "index"}
    run_again = ToolExecutionDecision("index", True, "c1")
    resumed: list[Event] = []
    result = agent.run(snapshot=snapshot, decisions=[run_again], on_event=resumed.append)
    assert result["last_message"].text == "answer: indexed 3 files"
    assert progress_of(resumed, "c1") == INDEXED


def test_closing_iter_async_at_a_progress_event_cancels_the_run() -> None:
    handle = RunHandle()

    async def stop_early() -> None:
        async with contextlib.aclosing(index_agent().iter_async(USER, cancel=handle)) as events:
            async for event in events:
                if isinstance(event, ToolProgress):
                    break

    asyncio.run(stop_early())
    snapshot = handle.snapshot
    assert snapshot is not None and isinstance(snapshot.pause, Cancelled)
    assert snapshot.outcome_unknown_calls() == {"c1": "index"}
