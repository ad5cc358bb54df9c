from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from agentfsm import ChatMessage, State, Tool, ToolCall, ToolInvoker, tool
from agentfsm.errors import ConfigurationError, MachineError
from agentfsm.tools.invoker import CallStatus, PreparedCall

SLEEP = 0.2


def executed(invoker: ToolInvoker, prepared: list[PreparedCall], state: State) -> list[ChatMessage]:
    """Run the prepared calls and turn them into messages, as the drivers do."""
    invoker.execute_sync(prepared)
    return invoker.finish(prepared, state)


class Overlap:
    """Counts how many calls run at the same time; with ``together(n)``, each call waits for n of them.

    The barrier makes overlap a fact, not a matter of timing: a call passes it only once n calls
    run at the same time (or fails after a minute, were they run one by one).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.barrier: threading.Barrier | None = None

    def together(self, parties: int | None) -> None:
        self.peak = 0
        self.barrier = threading.Barrier(parties, timeout=60) if parties else None

    def __enter__(self) -> None:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        if self.barrier is not None:
            self.barrier.wait()

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.active -= 1


overlap = Overlap()


@pytest.fixture(autouse=True)
def apart() -> None:
    """Calls of ``slow`` wait for no other unless a test says so."""
    overlap.together(None)


@tool(outputs_to_state={"order": {"source": "index"}})
def slow(index: int) -> dict[str, Any]:
    """Sleep, then report which call this was."""
    with overlap:
        time.sleep(SLEEP if index % 2 == 0 else SLEEP / 4)  # odd calls (most likely) finish first
    return {"index": index}


def fresh_state() -> State:
    return State({"order": {"type": list[int]}, "tool_call_counts": {"type": dict[str, int]}})


def calls(n: int) -> list[ToolCall]:
    return [ToolCall("slow", {"index": i}, id=str(i)) for i in range(n)]


def run_sync(invoker: ToolInvoker, n: int) -> tuple[list[ChatMessage], State]:
    state = fresh_state()
    prepared = invoker.prepare(calls(n), state)
    invoker.execute_sync(prepared)
    return invoker.finish(prepared, state), state


def test_parallel_sync_calls_overlap_and_results_stay_in_call_order() -> None:
    overlap.together(4)  # the four calls run side by side, or fail
    invoker = ToolInvoker([slow], tool_concurrency=4)
    messages, state = run_sync(invoker, 4)
    invoker.close()
    assert overlap.peak == 4
    assert [m.tool_call_result.origin.id for m in messages] == ["0", "1", "2", "3"]  # type: ignore[union-attr]
    assert state.get("order") == [0, 1, 2, 3], "state writes follow call order, not completion order"
    assert state.get("tool_call_counts") == {"slow": 4}


def test_concurrency_one_is_sequential() -> None:
    overlap.together(None)
    _, state = run_sync(ToolInvoker([slow], tool_concurrency=1), 3)
    assert overlap.peak == 1
    assert state.get("order") == [0, 1, 2]


async def test_parallel_async_calls_respect_the_limit() -> None:
    overlap.together(2)  # two at a time: each pair meets, and a third would raise the peak
    invoker = ToolInvoker([slow], tool_concurrency=2)
    state = fresh_state()
    prepared = invoker.prepare(calls(4), state)
    await invoker.execute_async(prepared)
    messages = invoker.finish(prepared, state)
    assert overlap.peak == 2
    assert [m.tool_call_result.origin.id for m in messages] == ["0", "1", "2", "3"]  # type: ignore[union-attr]
    assert state.get("order") == [0, 1, 2, 3]


#: Set by the test's ticker once the event loop has run it a few times.
TICKED = threading.Event()


@tool
def waits_for_the_loop() -> str:
    """Return once the event loop ran other work meanwhile (a minute at most)."""
    return "ticked" if TICKED.wait(60) else "the loop never ran"


async def test_async_run_does_not_block_the_event_loop() -> None:
    invoker = ToolInvoker([waits_for_the_loop], tool_concurrency=1)
    state = fresh_state()
    TICKED.clear()

    async def ticker() -> None:
        for _ in range(3):
            await asyncio.sleep(0.01)
        TICKED.set()

    task = asyncio.create_task(ticker())
    prepared = invoker.prepare([ToolCall("waits_for_the_loop", {}, id="w")], state)
    await invoker.execute_async(prepared)
    [message] = invoker.finish(prepared, state)
    await task
    assert message.tool_call_result.result == "ticked"  # type: ignore[union-attr]


@tool
def which_thread() -> str:
    """Name the thread the call runs in."""
    return threading.current_thread().name


@pytest.mark.parametrize("in_threads", [True, False])
async def test_async_runs_sync_tools_in_threads_unless_told_otherwise(in_threads: bool) -> None:
    invoker = ToolInvoker([which_thread], tool_concurrency=4, sync_tools_in_threads=in_threads)
    state = fresh_state()
    prepared = invoker.prepare([ToolCall("which_thread", {}, id=str(i)) for i in range(3)], state)
    reported: list[str] = []
    await invoker.execute_async(prepared, on_complete=lambda c: reported.append(c.key))
    threads = {c.outcome.value for c in prepared if c.outcome is not None}
    loop_thread = threading.current_thread().name
    assert (loop_thread not in threads) if in_threads else (threads == {loop_thread})
    if not in_threads:
        assert reported == ["0", "1", "2"], "inline calls run one after another, in call order"
    assert sorted(reported) == ["0", "1", "2"]


async def test_an_agent_passes_sync_tools_in_threads_to_its_invoker() -> None:
    from agentfsm import Agent
    from agentfsm.generators import ScriptedChatGenerator

    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("which_thread", {}, id="t")])
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply, "done"]),
        tools=[which_thread],
        tool_invoker_kwargs={"sync_tools_in_threads": False},
    )
    result = await agent.run_async([ChatMessage.from_user("where?")])
    assert result["messages"][2].tool_call_result.result == threading.current_thread().name
    assert agent.to_dict()["init_parameters"]["tool_invoker_kwargs"] == {"sync_tools_in_threads": False}


def test_sync_tools_in_threads_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="sync_tools_in_threads must be a bool"):
        ToolInvoker([which_thread], sync_tools_in_threads="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -2, "4"])
def test_tool_concurrency_must_be_positive(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="tool_concurrency"):
        ToolInvoker([slow], tool_concurrency=bad)


def upper(text: str) -> str:
    return text.upper()


@tool(outputs_to_string={"source": "text", "handler": upper})
def single(text: str) -> dict[str, str]:
    """Echo."""
    return {"text": text, "ignored": "x"}


@tool(outputs_to_string={"loud": {"source": "text", "handler": upper}, "raw": {"source": "text"}})
def multi(text: str) -> dict[str, str]:
    """Echo."""
    return {"text": text}


def test_outputs_to_string_formats() -> None:
    invoker = ToolInvoker([single, multi])
    state = State({})
    prepared = invoker.prepare([ToolCall("single", {"text": "hi"}), ToolCall("multi", {"text": "hi"})], state)
    messages = executed(invoker, prepared, state)
    assert [m.tool_call_result.result for m in messages] == ["HI", '{"loud":"HI","raw":"hi"}']  # type: ignore[union-attr]


def test_streaming_callback_passthrough() -> None:
    seen: list[Any] = []

    @tool
    def streamer(text: str, streaming_callback: Any = None) -> str:
        """Streams its input."""
        if streaming_callback is not None:
            streaming_callback(text)
        return text

    for passthrough, expected in ((False, []), (True, ["x"])):
        seen.clear()
        invoker = ToolInvoker([streamer], tool_streaming_callback_passthrough=passthrough)
        prepared = invoker.prepare([ToolCall("streamer", {"text": "x"})], State({}))
        invoker.execute_sync(prepared, seen.append)
        assert seen == expected


async def test_streaming_callback_passthrough_reaches_the_tool_on_the_async_path_too() -> None:
    seen: list[Any] = []

    @tool
    def streamer(text: str, streaming_callback: Any = None) -> str:
        """Streams its input."""
        if streaming_callback is not None:
            streaming_callback(text)
        return text

    for inline in (False, True):
        seen.clear()
        invoker = ToolInvoker([streamer], tool_streaming_callback_passthrough=True, sync_tools_in_threads=not inline)
        prepared = invoker.prepare([ToolCall("streamer", {"text": "x"})], State({}))
        await invoker.execute_async(prepared, seen.append)
        assert seen == ["x"]


class Recorded(Tool):
    """A tool subclass that overrides ``invoke`` (and not ``invoke_async``): it records each call."""

    calls: list[dict[str, Any]]

    def invoke(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return super().invoke(**kwargs)


@pytest.mark.parametrize("in_threads", [True, False])
async def test_an_overridden_invoke_runs_on_the_async_path(in_threads: bool) -> None:
    recorded = Recorded("echo", "Echo.", {"type": "object"}, lambda **kw: kw)
    recorded.calls = []
    invoker = ToolInvoker([recorded], sync_tools_in_threads=in_threads)
    prepared = invoker.prepare([ToolCall("echo", {"a": 1})], State({}))
    await invoker.execute_async(prepared)
    assert recorded.calls == [{"a": 1}]
    assert prepared[0].outcome is not None and prepared[0].outcome.value == {"a": 1}


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


def render_chart(title: str) -> list[Any]:
    """A tool that returns an image with a caption."""
    from agentfsm import ImageContent, TextContent

    return [TextContent(f"chart: {title}"), ImageContent(PIXEL, mime_type="image/png")]


def test_raw_result_tools_return_content_parts() -> None:
    from agentfsm import Agent, BreakpointException, ImageContent, Phase, TextContent, create_tool_from_function
    from agentfsm.breakpoints import Breakpoint
    from agentfsm.generators import ScriptedChatGenerator
    from agentfsm.snapshot import AgentSnapshot
    from tests.helpers import call, calls

    chart = create_tool_from_function(render_chart, outputs_to_string={"raw_result": True})
    script = [calls(call("render_chart", "c1", title="sales")), "Here is the chart."]
    result = Agent(chat_generator=ScriptedChatGenerator(script), tools=[chart]).run([ChatMessage.from_user("chart")])
    message = result["messages"][2]
    assert message.tool_call_result.result == [TextContent("chart: sales"), ImageContent(PIXEL, mime_type="image/png")]  # type: ignore[union-attr]
    assert ChatMessage.from_dict(message.to_dict()) == message
    wire = message.to_openai_dict_format()
    assert wire["content"][1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}

    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[chart])
    with pytest.raises(BreakpointException) as info:
        agent.run([ChatMessage.from_user("chart")], break_point=Breakpoint(phase=Phase.EXIT_CHECK, step=1))
    resumed = agent.run(snapshot=AgentSnapshot.from_bytes(info.value.snapshot.to_bytes()))
    assert resumed["messages"] == result["messages"]


def test_raw_result_must_be_content_parts() -> None:
    text_tool = tool(outputs_to_string={"raw_result": True})(upper)
    invoker = ToolInvoker([text_tool], raise_on_failure=False)
    state = State({})
    prepared = invoker.prepare([ToolCall("upper", {"text": "hi"})], state)
    [message] = executed(invoker, prepared, state)
    assert message.tool_call_result.error  # type: ignore[union-attr]
    assert "must return a list of TextContent/ImageContent" in message.tool_call_result.result  # type: ignore[union-attr,operator]
    with pytest.raises(ConfigurationError, match="raw_result is not supported in the multiple-output format"):
        tool(outputs_to_string={"a": {"source": "x", "raw_result": True}})(upper)


def test_finish_needs_every_ready_call_to_have_run() -> None:
    invoker = ToolInvoker([single])
    state = State({})
    prepared = invoker.prepare([ToolCall("single", {"text": "a"}), ToolCall("single", {"text": "b"})], state)
    invoker.execute_sync(prepared[:1])
    assert [c.status for c in prepared] == [CallStatus.DONE, CallStatus.READY]
    with pytest.raises(MachineError, match="Tool call #1 to 'single' has no result yet: it is ready"):
        invoker.finish(prepared, state)


class Audited(Tool):
    """A tool whose ``invoke`` does more than call its function."""

    def invoke(self, **kwargs: Any) -> Any:
        return f"audited {self.function(**kwargs)}"


def test_a_tool_that_overrides_invoke_is_called_through_it() -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    audited = Audited("audited", "Echo, audited.", schema, lambda text: text)
    invoker = ToolInvoker([audited, single])
    state = State({})
    prepared = invoker.prepare([ToolCall("audited", {"text": "hi"}), ToolCall("single", {"text": "hi"})], state)
    messages = executed(invoker, prepared, state)
    assert [m.tool_call_result.result for m in messages] == ["audited hi", "HI"]  # type: ignore[union-attr]


def test_an_invoke_set_on_the_instance_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(single, "invoke", lambda **kwargs: {"text": f"patched {kwargs['text']}"})
    invoker = ToolInvoker([single])
    state = State({})
    prepared = invoker.prepare([ToolCall("single", {"text": "hi"})], state)
    [message] = executed(invoker, prepared, state)
    assert message.tool_call_result is not None and message.tool_call_result.result == "PATCHED HI"
