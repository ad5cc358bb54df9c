"""The whole tool loop on real model servers: Gemma 3 270M behind llama-cpp-python's server (OpenAI API)
and llama.cpp's llama-server (OpenAI API, and Anthropic's Messages API at ``/v1/messages``).

The model is tiny, so the tests assert the protocol, not wisdom: calls reach the tools, results
and errors reach the model, it answers them with a well-formed reply, usage is counted. No verdict
rests on what the model chooses. Where a test needs a tool call it makes one certain: a conversation
that already holds a call and its result, or a scripted first turn (``OpensWithACall``). A real
model's own calls are forced only where the server can force them: llama-cpp-python constrains the
answer to a named ``tool_choice``'s arguments; llama-server cannot (a named choice is read as
"auto" on its OpenAI API and as "required" on its Anthropic API, and "required" is a grammar that
lets the model write text before the call, so within ``max_tokens`` it may never get to it). There
the tests check the protocol for whichever the model does, call or answer. Each server is also
handed a conversation that holds parallel calls and their results (one an error). The servers
start once per session (see ``servers``); under ``CI`` the tests fail if a server cannot start.
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from agentfsm import (
    Agent,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    ChatRole,
    StreamingChunk,
    ToolCall,
)
from agentfsm.generators import AnthropicChatGenerator, FallbackChatGenerator, OpenAIChatGenerator
from agentfsm.generators._http import HTTPChatGenerator
from agentfsm.secrets import Secret
from agentfsm.serialization import CHAT_GENERATOR, object_from_dict, object_path
from tests.helpers import SIDE_EFFECTS, add, call, calls, fail


@dataclass(frozen=True)
class Target:
    """One server and one API."""

    name: str
    url: str
    api: str
    #: ``tool_choice`` that asks the model to call the named tool, in a form this server accepts.
    forced: Any
    #: Whether that ``tool_choice`` makes every answer a call (llama-cpp-python's named choice does;
    #: llama-server's "required" does not: see the module's docstring).
    forces_calls: bool
    #: Whether the server reports token usage in streams too (llama-cpp-python does not).
    streams_usage: bool = True

    def generator(self, tool: str | None = None, **generation: Any) -> HTTPChatGenerator:
        options = {"max_tokens": 48, "temperature": 0, **generation}
        if tool is not None:
            options["tool_choice"] = self.forced if self.forced != "named" else _named(tool)
        kind = AnthropicChatGenerator if self.api == "anthropic" else OpenAIChatGenerator
        key = Secret.from_env_var("NO_KEY_NEEDED", strict=False)
        # Retries as users have them: llama-server closes a keep-alive connection idle for 5 s, and a
        # request sent on it as it closes fails with no response (a connection error, retried).
        return kind("gemma", key, self.url, options, timeout=300.0, max_retries=2, deadline=900.0)


def _named(tool: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool}}


@pytest.fixture(
    scope="module",
    params=["llama-cpp-python, OpenAI API", "llama-server, OpenAI API", "llama-server, Anthropic API"],
)
def target(request: pytest.FixtureRequest) -> Target:
    if request.param.startswith("llama-cpp-python"):
        # Gemma's chat format shows the model no tools; a named tool_choice makes the server constrain
        # the answer to a call of that tool ("auto" and "required" leave the model unaware of them).
        url = request.getfixturevalue("llama_cpp_python_url")
        return Target(request.param, url, "openai", "named", forces_calls=True, streams_usage=False)
    url = request.getfixturevalue("llama_server_url")
    if "Anthropic" in request.param:
        return Target(request.param, url, "anthropic", {"type": "any"}, forces_calls=False)
    return Target(request.param, url, "openai", "required", forces_calls=False)


@pytest.fixture
def sent() -> list[dict[str, Any]]:
    """The request bodies a sync generator sent (through an httpx event hook)."""
    return []


def recording(model: HTTPChatGenerator, bodies: list[dict[str, Any]]) -> HTTPChatGenerator:
    def record(request: httpx.Request) -> None:
        bodies.append(json.loads(request.content))

    model.http_client_kwargs["event_hooks"] = {"request": [record]}
    return model


def tool_results_in(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, content) of each tool result a request sent, in either API's form."""
    found = []
    for message in body["messages"]:
        if message.get("role") == "tool":
            found.append((message["tool_call_id"], str(message["content"])))
        for block in message["content"] if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_result":
                found.append((block["tool_use_id"], json.dumps(block["content"])))
    return found


def primed(question: str, earlier: ToolCall, result: str, error: bool = False) -> list[ChatMessage]:
    """A conversation that already holds one call and its result: the tiny model then calls tools reliably."""
    return [ChatMessage.from_user(question), calls(earlier), ChatMessage.from_tool(result, earlier, error=error)]


def well_formed(reply: ChatMessage) -> None:
    """An assistant reply with a finish reason and text, or well-formed calls (what it says is the model's)."""
    assert reply.role is ChatRole.ASSISTANT
    assert reply.meta["finish_reason"], reply.meta
    assert reply.tool_calls or isinstance(reply.text, str), reply
    for tool_call in reply.tool_calls:
        assert tool_call.tool_name and isinstance(tool_call.arguments, dict) and tool_call.id


def used_tokens(result: dict[str, Any]) -> int:
    return sum(v for v in result.get("token_usage", {}).values() if isinstance(v, int))


def test_a_tool_loop_sends_every_result_back_and_ends_as_its_last_reply_says(
    target: Target, sent: list[dict[str, Any]]
) -> None:
    """Up to three model calls, each after the results of the calls before it.

    Where the server forces the call, the model calls each time and the run ends at its step limit;
    elsewhere it may answer instead, and the run ends there, with the answer.
    """
    SIDE_EFFECTS.clear()
    model = recording(target.generator("add"), sent)
    conversation = primed("What is 2 plus 3? Use the add tool.", call("add", "call_0", a=2, b=3), "5")
    with Agent(chat_generator=model, tools=[add], max_agent_steps=3) as agent:
        result = agent.run(conversation)
    replies = [m for m in result["messages"][3:] if m.role is ChatRole.ASSISTANT]
    assert 1 <= len(replies) == len(sent) <= 3, "one reply for each model call"
    for reply in replies:
        well_formed(reply)
        assert {c.tool_name for c in reply.tool_calls} <= {"add"}
    assert all(r.tool_calls for r in replies[:-1]), "only a reply that calls a tool is followed by another call"
    if target.forces_calls:
        assert len(replies) == 3 and replies[-1].tool_calls
    if replies[-1].tool_calls:
        assert (len(replies), result["exit_reason"]) == (3, "max_agent_steps")
    else:
        assert result["exit_reason"] == "text"
    results = {m.tool_call_result.origin.id for m in result["messages"] if m.tool_call_result is not None}
    assert results == {"call_0"} | {c.id for r in replies for c in r.tool_calls}, "every call was answered"
    for number, request in enumerate(sent):
        answered = ["call_0", *(c.id for r in replies[:number] for c in r.tool_calls)]
        assert [i for i, _ in tool_results_in(request)] == answered, "the results went back to the model"
    assert bool(SIDE_EFFECTS) is any(r.tool_calls for r in replies), "the model's calls reached the tool"
    assert used_tokens(result) > 0


def test_a_streamed_async_round_trip(target: Target) -> None:
    """Streamed: the callback sees the reply's text or calls; a call goes to the tool and its result back."""
    SIDE_EFFECTS.clear()
    chunks: list[StreamingChunk] = []

    async def collect(chunk: StreamingChunk) -> None:
        chunks.append(chunk)

    async def main() -> dict[str, Any]:
        async with Agent(chat_generator=target.generator("add"), tools=[add], max_agent_steps=2) as agent:
            conversation = primed("What is 2 plus 3? Use the add tool.", call("add", "call_0", a=2, b=3), "5")
            return await agent.run_async(conversation, streaming_callback=collect)

    result = asyncio.run(main())
    replies = [m for m in result["messages"][3:] if m.role is ChatRole.ASSISTANT]
    for reply in replies:
        well_formed(reply)
    first = replies[0]
    assert len([c for c in chunks if c.finish_reason]) == len(replies), "each reply's stream ends once"
    if target.forces_calls:
        assert first.tool_calls
    if first.tool_calls:
        assert len(replies) == 2, "the call's result went back to the model, which answered"
        assert [c.tool_name for c in first.tool_calls][:1] == ["add"], "the streamed name is not repeated"
        announced = [c.tool_calls for c in chunks if c.tool_calls]
        assert announced[0] == first.tool_calls, "the callback receives the reply's tool calls"
        assert SIDE_EFFECTS, "the streamed call reached the tool"
    else:
        assert len(replies) == 1 and result["exit_reason"] == "text"
        assert "".join(c.content for c in chunks).strip() == (first.text or "").strip(), "the text was streamed"
    assert (used_tokens(result) > 0) is target.streams_usage


def handed_conversation() -> list[ChatMessage]:
    """A conversation that already holds two parallel calls and their results, one of them an error."""
    first, second = call("add", "call_1", a=2, b=3), call("fail", "call_2", reason="the disk is full")
    return [
        ChatMessage.from_system("You are a calculator. Answer briefly."),
        ChatMessage.from_user("Add 2 and 3, and try the failing tool."),
        calls(first, second),
        ChatMessage.from_tool("5", first),
        ChatMessage.from_tool("RuntimeError: the disk is full", second, error=True),
    ]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_parallel_calls_and_a_tool_error_handed_to_the_server_get_a_reply(target: Target, streamed: bool) -> None:
    """Automatic tool choice (the client's default with tools): the model may answer or call again."""
    model = target.generator()
    chunks: list[StreamingChunk] = []

    async def ask() -> dict[str, Any]:
        try:
            return await model.run_async(handed_conversation(), [add, fail], streaming_callback=chunks.append)
        finally:
            await model.close_async()

    if streamed:
        output = asyncio.run(ask())
    else:
        try:
            output = model.run(handed_conversation(), [add, fail])
        finally:
            model.close()
    [reply] = output["replies"]
    well_formed(reply)
    assert bool(reply.meta.get("usage")) is (target.streams_usage or not streamed)
    if streamed:
        assert chunks[-1].finish_reason == reply.meta["finish_reason"]


def nowhere() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


class OpensWithACall:
    """A chat generator whose first turn is a scripted call; every later turn goes to ``model``, a real one.

    The run then holds a call whatever the real model would choose (on llama-server it cannot be
    forced: see the module's docstring). The turn is scripted while the conversation holds no tool
    result yet: decided by the conversation, not a counter, so a run resumed anywhere agrees.
    """

    def __init__(self, opening: ToolCall, model: Any) -> None:
        self.opening = opening
        self.model = model

    def warm_up(self) -> None:
        self.model.warm_up()

    def close(self) -> None:
        self.model.close()

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        if any(m.tool_call_result is not None for m in messages):
            return dict(self.model.run(messages, tools, **kwargs))
        return {"replies": [calls(self.opening)]}

    def to_dict(self) -> dict[str, Any]:
        opening = {"name": self.opening.tool_name, "arguments": self.opening.arguments, "id": self.opening.id}
        return {"type": object_path(type(self)), "data": {"opening": opening, "model": self.model.to_dict()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: list[str] | None = None) -> OpensWithACall:
        opening, model = data["data"]["opening"], data["data"]["model"]
        return cls(
            ToolCall(opening["name"], opening["arguments"], id=opening["id"]),
            object_from_dict(model, allowed_modules, CHAT_GENERATOR, whole=True),
        )


def test_a_run_resumed_between_two_model_calls_reads_the_tool_error(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run pauses after its tool failed, before its second model call, and resumes in an agent rebuilt
    from its dict; the real server, behind a fallback whose first server is down, reads the error."""
    monkeypatch.setenv("AGENTFSM_ALLOWED_ENV_VARS", "NO_KEY_NEEDED")
    unreachable = OpenAIChatGenerator("m", Secret.from_env_var("NO_KEY_NEEDED", strict=False), nowhere(), max_retries=0)
    opening = call("fail", "call_1", reason="the disk is full")
    model = OpensWithACall(opening, FallbackChatGenerator([unreachable, target.generator()]))
    agent = Agent(chat_generator=model, tools=[fail], max_agent_steps=2)
    with agent, pytest.raises(BreakpointException) as paused:
        agent.run(
            [ChatMessage.from_user("Call the fail tool.")], break_point=Breakpoint("chat_generator", visit_count=1)
        )
    snapshot = AgentSnapshot.from_bytes(paused.value.snapshot.to_bytes())
    last = ChatMessage.from_dict(snapshot.messages[-1]).tool_call_result
    assert last is not None and last.error and last.origin.id == "call_1", "paused after the failed call"
    rebuilt = Agent.from_dict(json.loads(json.dumps(agent.to_dict())), allowed_modules=["tests"])
    sent: list[dict[str, Any]] = []
    recording(rebuilt.chat_generator.model.chat_generators[1], sent)
    with rebuilt:
        result = rebuilt.run(snapshot=snapshot)
    [(call_id, error)] = tool_results_in(sent[0])
    assert len(sent) == 1 and call_id == "call_1" and "the disk is full" in error, "the server read the error"
    replies = [m for m in result["messages"][1:] if m.role is ChatRole.ASSISTANT]
    assert len(replies) == 2 and replies[0].tool_calls == [opening]
    well_formed(replies[1])
    assert replies[1].meta["successful_chat_generator_index"] == 1, "the server that is down was passed over"
    assert result["step_count"] == 2
    assert used_tokens(result) > 0
