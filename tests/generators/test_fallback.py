"""FallbackChatGenerator over real HTTP servers on 127.0.0.1: failover, meta, serialization, resume."""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
from typing import Any

import pytest

from agentfsm import Agent, AgentSnapshot, Breakpoint, BreakpointException, ChatMessage
from agentfsm.errors import AllChatGeneratorsFailedError, ConfigurationError, DeserializationError, ModelConnectionError
from agentfsm.generators import FallbackChatGenerator, OpenAIChatGenerator, ScriptedChatGenerator
from agentfsm.secrets import Secret
from tests.generators.conftest import ScriptedServer
from tests.generators.test_openai import completion, tool_call
from tests.helpers import SIDE_EFFECTS, add


def nowhere() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


def client(url: str, **kwargs: Any) -> OpenAIChatGenerator:
    options: dict[str, Any] = {"max_retries": 0, "timeout": 5.0, **kwargs}
    return OpenAIChatGenerator("m", Secret.from_env_var("NO_KEY_NEEDED", strict=False), url, **options)


def test_the_next_generator_answers_and_meta_says_which(server: ScriptedServer) -> None:
    server.reply(body=completion({"content": "from the second"}))
    fallback = FallbackChatGenerator(chat_generators=[client(nowhere()), client(server.url)])
    output = fallback.run([ChatMessage.from_user("x")])
    expected = {
        "successful_chat_generator_index": 1,
        "successful_chat_generator_class": "OpenAIChatGenerator",
        "total_attempts": 2,
        "failed_chat_generators": ["OpenAIChatGenerator"],
    }
    assert output["meta"] == expected
    [reply] = output["replies"]
    assert reply.text == "from the second" and reply.meta.items() >= expected.items()
    assert reply.meta["model"] == "test-model"


def test_the_first_that_answers_is_the_only_one_asked(server: ScriptedServer) -> None:
    server.reply(body=completion({"content": "first"}))
    fallback = FallbackChatGenerator([client(server.url), client(nowhere())])
    assert fallback.run([ChatMessage.from_user("x")])["meta"]["total_attempts"] == 1
    assert len(server.requests) == 1


def test_when_all_fail_every_error_is_kept(server: ScriptedServer) -> None:
    server.reply(status=401, body=b'{"error": {"message": "bad key"}}')
    fallback = FallbackChatGenerator([client(server.url), client(nowhere())])
    with pytest.raises(AllChatGeneratorsFailedError, match="All 2 chat generators failed") as raised:
        fallback.run([ChatMessage.from_user("x")])
    first, second = raised.value.errors
    assert "bad key" in str(first) and isinstance(second, ModelConnectionError)
    assert isinstance(raised.value, RuntimeError)


def test_async_fallback_with_a_generator_that_has_only_run(server: ScriptedServer) -> None:
    fallback = FallbackChatGenerator([client(nowhere()), ScriptedChatGenerator(["scripted"])])

    async def main() -> dict[str, Any]:
        try:
            return await fallback.run_async([ChatMessage.from_user("x")])
        finally:
            await fallback.close_async()

    output = asyncio.run(main())
    assert output["replies"][0].text == "scripted" and output["meta"]["successful_chat_generator_index"] == 1


CONSTRUCTED: list[str] = []


class NotAChatGenerator:
    """Has from_dict but no run: building it where a chat generator is expected would be the attack."""

    def __init__(self) -> None:
        CONSTRUCTED.append("NotAChatGenerator")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NotAChatGenerator:
        return cls()


class RefusesTheMessages:
    """A chat generator of the user's own that finds the messages wrong (as the seeds' protocol runs it)."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        raise ConfigurationError("a message has no text")


def test_from_dict_builds_only_chat_generators() -> None:
    CONSTRUCTED.clear()
    data = {"type": "x", "data": {"chat_generators": [{"type": f"{__name__}.NotAChatGenerator", "data": {}}]}}
    with pytest.raises(DeserializationError, match="chat generator"):
        FallbackChatGenerator.from_dict(data, allowed_modules=["tests"])
    assert CONSTRUCTED == []


def test_an_error_of_the_callers_is_raised_not_passed_to_the_next(server: ScriptedServer) -> None:
    fallback = FallbackChatGenerator([RefusesTheMessages(), client(server.url)])
    with pytest.raises(ConfigurationError, match="no text"):
        fallback.run([ChatMessage.from_user("hi")])
    with pytest.raises(ConfigurationError, match="no text"):
        asyncio.run(fallback.run_async([ChatMessage.from_user("hi")]))
    assert server.requests == [], "the next generator was not asked"


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        FallbackChatGenerator([])
    with pytest.raises(TypeError):
        FallbackChatGenerator(["not a generator"])
    with pytest.raises(DeserializationError):
        FallbackChatGenerator.from_dict({"type": "x", "data": {"chat_generators": "nope"}})


def test_a_snapshot_taken_mid_run_resumes_with_the_fallback_after_a_round_trip(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFSM_ALLOWED_ENV_VARS", "NO_KEY_NEEDED")
    SIDE_EFFECTS.clear()
    server.reply(
        body=completion({"content": None, "tool_calls": [tool_call("c1", "add", '{"a": 2, "b": 3}')]}, "tool_calls")
    )
    server.reply(body=completion({"content": "5"}))
    agent = Agent(chat_generator=FallbackChatGenerator([client(nowhere()), client(server.url)]), tools=[add])
    with pytest.raises(BreakpointException) as paused:
        agent.run([ChatMessage.from_user("2 + 3?")], break_point=Breakpoint("chat_generator", visit_count=1))
    data = json.loads(json.dumps(agent.to_dict()))
    assert [
        g["data"]["api_base_url"] for g in data["init_parameters"]["chat_generator"]["data"]["chat_generators"]
    ] == [
        agent.chat_generator.chat_generators[0].api_base_url,
        server.url,
    ]
    fresh = Agent.from_dict(data, allowed_modules=["tests"])
    assert isinstance(fresh.chat_generator, FallbackChatGenerator)
    snapshot = AgentSnapshot.from_bytes(paused.value.snapshot.to_bytes())
    with fresh:
        result = fresh.run(snapshot=snapshot)
    assert result["last_message"].text == "5" and SIDE_EFFECTS == ["add(2,3)"]
    assert result["last_message"].meta["successful_chat_generator_index"] == 1
    resent = server.requests[1]["json"]["messages"]
    assert resent[-1] == {"role": "tool", "content": "5", "tool_call_id": "c1"}


def test_the_all_failed_error_pickles_with_its_errors() -> None:
    error = AllChatGeneratorsFailedError("All 2 failed", [ModelConnectionError("down"), ValueError("no key")])
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == "All 2 failed" and [str(e) for e in again.errors] == ["down", "no key"]
