"""CassetteChatGenerator: record once, replay deterministically, refuse requests that changed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentfsm import Agent, ChatMessage, StreamingChunk
from agentfsm.generators import CassetteChatGenerator, CassetteMismatchError, ScriptedChatGenerator
from tests.helpers import SIDE_EFFECTS, add, call, calls

QUESTION = [ChatMessage.from_user("2 + 3?")]


def record(path: Path) -> dict[str, object]:
    model = ScriptedChatGenerator([calls(call("add", "c1", a=2, b=3)), "5."])
    return Agent(chat_generator=CassetteChatGenerator(path, model, "record"), tools=[add]).run(QUESTION)


def test_a_recorded_run_replays_the_same_conversation(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    recorded = record(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and len(data["exchanges"]) == 2
    assert data["exchanges"][0]["request"]["tools"] == ["add"]
    SIDE_EFFECTS.clear()
    replayed = Agent(chat_generator=CassetteChatGenerator(path), tools=[add]).run(QUESTION)
    assert replayed["messages"] == recorded["messages"] and SIDE_EFFECTS == ["add(2,3)"], "the tools still run"


def test_a_changed_request_or_one_too_many_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    record(path)
    with pytest.raises(CassetteMismatchError, match=r"Request 1 differs .* message 0 was"):
        Agent(chat_generator=CassetteChatGenerator(path), tools=[add], system_prompt="Be terse.").run(QUESTION)
    with pytest.raises(CassetteMismatchError, match=r"the tools were \['add'\], now \[\]"):
        Agent(chat_generator=CassetteChatGenerator(path)).run(QUESTION)
    cassette = CassetteChatGenerator(path)
    Agent(chat_generator=cassette, tools=[add]).run(QUESTION)
    with pytest.raises(CassetteMismatchError, match="holds 2 exchanges; call 3 asked for another"):
        cassette.run(QUESTION)


def test_replay_streams_and_runs_async(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    record(path)
    chunks: list[StreamingChunk] = []

    async def callback(chunk: StreamingChunk) -> None:
        chunks.append(chunk)

    async def main() -> dict[str, object]:
        return await Agent(chat_generator=CassetteChatGenerator(path), tools=[add]).run_async(
            QUESTION, streaming_callback=callback
        )

    result = asyncio.run(main())
    assert result["last_message"].text == "5." and "".join(c.content for c in chunks).endswith("5.")  # type: ignore[attr-defined]


def test_a_cassette_agent_serializes(tmp_path: Path, allow_tests_modules: None) -> None:
    path = tmp_path / "run.json"
    record(path)
    agent = Agent(chat_generator=CassetteChatGenerator(path), tools=[add])
    assert Agent.from_dict(agent.to_dict()).run(QUESTION)["last_message"].text == "5."
