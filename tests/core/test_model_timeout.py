"""Agent(model_timeout=...): the run stops waiting for a generator that has no time bound of its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, State, StreamingChunk
from agentfsm.errors import ConfigurationError, ModelDeadlineError
from agentfsm.generators import ScriptedChatGenerator

USER = [ChatMessage.from_user("go")]


class Stuck:
    """A user's generator, written to the seed's signature, that answers only once released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.returned = threading.Event()

    def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        self.release.wait(10)
        self.returned.set()
        return {"replies": [ChatMessage.from_assistant("late")]}


class StuckAsync(Stuck):
    """Has ``run_async``: cancelled at the timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False

    async def run_async(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return {"replies": [ChatMessage.from_assistant("never")]}


def test_a_sync_run_stops_waiting_and_fails_through_its_on_error_hooks() -> None:
    seen: list[BaseException] = []

    def record(state: State, error: BaseException) -> None:
        seen.append(error)

    model = Stuck()
    agent = Agent(chat_generator=model, model_timeout=0.2, hooks={"on_error": [record]})
    try:
        with pytest.raises(ModelDeadlineError, match=r"model_timeout of 0\.2 s") as failed:
            agent.run(USER)
    finally:
        model.release.set()
    assert seen == [failed.value]
    assert model.returned.wait(10), "the abandoned call ran to its end; its reply went nowhere"


class StuckStreaming(Stuck):
    """Streams one chunk once released, after the run stopped waiting for it."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        self.release.wait(10)
        streaming_callback(StreamingChunk("late"))
        self.returned.set()
        return {"replies": [ChatMessage.from_assistant("late")]}


async def test_an_abandoned_call_streams_nothing_more_to_the_callback() -> None:
    chunks: list[StreamingChunk] = []
    for run_async in (False, True):
        model = StuckStreaming()
        agent = Agent(chat_generator=model, model_timeout=0.1, streaming_callback=chunks.append)
        try:
            with pytest.raises(ModelDeadlineError):
                await agent.run_async(USER) if run_async else agent.run(USER)
        finally:
            model.release.set()
        assert model.returned.wait(10), "the abandoned call streamed its chunk and returned"
    assert chunks == []


async def test_run_async_cancels_a_generator_with_run_async() -> None:
    model = StuckAsync()
    with pytest.raises(ModelDeadlineError):
        await Agent(chat_generator=model, model_timeout=0.1).run_async(USER)
    assert model.cancelled


async def test_run_async_abandons_a_sync_generator_without_blocking_the_loop() -> None:
    model = Stuck()
    try:
        with pytest.raises(ModelDeadlineError):
            await Agent(chat_generator=model, model_timeout=0.1).run_async(USER)
    finally:
        model.release.set()


async def test_a_timeout_error_of_the_generator_itself_is_its_own() -> None:
    class Raises:
        async def run_async(self, messages: Any, tools: Any = None) -> Any:
            raise TimeoutError("the generator's own")

        def run(self, messages: Any, tools: Any = None) -> Any:
            raise TimeoutError("the generator's own")

    with pytest.raises(TimeoutError, match="own") as raised:
        await Agent(chat_generator=Raises(), model_timeout=5).run_async(USER)
    assert not isinstance(raised.value, ModelDeadlineError)
    with pytest.raises(TimeoutError, match="own"):
        Agent(chat_generator=Raises(), model_timeout=5).run(USER)


def test_a_model_answering_in_time_is_not_affected_and_the_timeout_is_kept_and_drawn() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["hi"]), model_timeout=5)
    assert agent.run(USER)["last_message"].text == "hi"
    assert Agent.from_dict(agent.to_dict()).model_timeout == 5
    assert "timeout 5 s" in agent.draw() and "timeout" not in Agent(chat_generator=ScriptedChatGenerator([])).draw()
    with pytest.raises(ConfigurationError, match="model_timeout"):
        Agent(chat_generator=ScriptedChatGenerator([]), model_timeout=float("inf"))
