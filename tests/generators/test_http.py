"""What both HTTP model clients share, against a real HTTP server on 127.0.0.1: deadlines, retries,
unfinished streams, streamed tool calls however a server cuts them, tool_choice, credentials."""

from __future__ import annotations

import asyncio
import json
import time
from email.utils import formatdate
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, StreamingChunk, ToolCall, secrets
from agentfsm.errors import (
    ConfigurationError,
    DeserializationError,
    ModelDeadlineError,
    ModelResponseError,
    RateLimitError,
    SerializationError,
    ServerError,
)
from agentfsm.generators import AnthropicChatGenerator, OpenAIChatGenerator, _http
from agentfsm.generators._http import EventReader
from agentfsm.generators._retry import retry_after_seconds
from agentfsm.secrets import Secret
from tests.generators.conftest import ScriptedServer
from tests.generators.test_openai import completion, delta, events, generator, tool_call
from tests.helpers import SIDE_EFFECTS, add, call, calls

# -- message encoding and tool_choice ------------------------------------------------------------------


def test_an_assistant_turn_that_only_calls_tools_is_sent_with_empty_content(server: ScriptedServer) -> None:
    server.reply(body=completion({"content": "5"}))
    conversation = [
        ChatMessage.from_user("2 + 3?"),
        calls(call("add", "c1", a=2, b=3)),
        ChatMessage.from_tool("5", call("add", "c1", a=2, b=3)),
    ]
    generator(server).run(conversation, tools=[add])
    sent = server.requests[0]["json"]["messages"][1]
    assert sent["content"] == "" and sent["tool_calls"][0]["id"] == "c1"


def test_tool_choice_is_auto_with_tools_kept_when_given_and_dropped_without_tools(server: ScriptedServer) -> None:
    for _ in range(4):
        server.reply(body=completion({"content": "ok"}))
    forced = {"type": "function", "function": {"name": "add"}}
    generator(server).run([ChatMessage.from_user("x")], tools=[add])
    generator(server, generation_kwargs={"tool_choice": forced}).run([ChatMessage.from_user("x")], tools=[add])
    generator(server, generation_kwargs={"tool_choice": "any", "parallel_tool_calls": False}).run(
        [ChatMessage.from_user("x")], tools=[add]
    )
    generator(server, generation_kwargs={"tool_choice": forced, "parallel_tool_calls": False}).run(
        [ChatMessage.from_user("x")]
    )
    sent = [r["json"] for r in server.requests]
    assert [s.get("tool_choice") for s in sent] == ["auto", forced, "required", None]
    assert "parallel_tool_calls" not in sent[3] and "tools" not in sent[3]


def test_anthropic_tool_choice_follows_the_same_rule_in_its_own_form(server: ScriptedServer) -> None:
    body = {"model": "c", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": {}}
    for _ in range(3):
        server.reply(body=json.dumps(body).encode())
    model = AnthropicChatGenerator("c", Secret.from_token("k"), server.url, max_retries=0)
    model.run([ChatMessage.from_user("x")], tools=[add])
    model.run([ChatMessage.from_user("x")], tools=[add], generation_kwargs={"tool_choice": "required"})
    model.run([ChatMessage.from_user("x")], generation_kwargs={"tool_choice": {"type": "any"}})
    sent = [r["json"] for r in server.requests]
    assert [s.get("tool_choice") for s in sent] == [{"type": "auto"}, {"type": "any"}, None]


def test_a_tool_call_without_an_id_cannot_be_sent_back() -> None:
    conversation = [ChatMessage.from_user("x"), calls(call("add", None, a=1, b=2))]
    with pytest.raises(ConfigurationError, match="give every ToolCall an id"):
        OpenAIChatGenerator("m", Secret.from_token("k")).payload(conversation, [add], stream=False)
    with pytest.raises(ConfigurationError, match="give every ToolCall an id"):
        AnthropicChatGenerator("m", Secret.from_token("k")).payload(conversation, [add], stream=False)


# -- streamed tool calls ---------------------------------------------------------------------------------


def test_a_name_and_id_repeated_in_every_chunk_are_not_joined(server: ScriptedServer) -> None:
    """llama-cpp-python repeats the function's name and the call's id in every chunk."""
    parts = ["{", '"a": 2', ', "b": 3', "}"]
    chunks = [delta(calls=[tool_call("c1", "add", p) | {"index": 0}]) for p in parts]
    server.reply(pieces=[events(*chunks, delta(finish="tool_calls"))])
    seen: list[StreamingChunk] = []
    [reply] = generator(server).run([ChatMessage.from_user("x")], [add], streaming_callback=seen.append)["replies"]
    assert reply.tool_calls == [ToolCall("add", {"a": 2, "b": 3}, "c1")]
    [announced] = [c.tool_calls for c in seen if c.tool_calls]
    assert announced == reply.tool_calls and seen[-1].finish_reason == "tool_calls"


def test_calls_without_an_index_or_sharing_one_are_told_apart_by_id(server: ScriptedServer) -> None:
    first = {"id": "c1", "function": {"name": "add", "arguments": '{"a": 1,'}}
    more_of_first = {"function": {"arguments": ' "b": 2}'}}
    second = {"index": 0, "id": "c2", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}
    server.reply(
        pieces=[
            events(
                delta(calls=[first]), delta(calls=[more_of_first]), delta(calls=[second]), delta(finish="tool_calls")
            )
        ]
    )
    [reply] = generator(server).run([ChatMessage.from_user("x")], [add], streaming_callback=lambda c: None)["replies"]
    assert reply.tool_calls == [ToolCall("add", {"a": 1, "b": 2}, "c1"), ToolCall("add", {"a": 3, "b": 4}, "c2")]


# -- streams that do not finish ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",  # the headers, then nothing (llama-cpp-python failing after the headers)
        events(delta("half an ans"))[: -len(b"data: [DONE]\n\n")],  # cut off, no finish reason
        events(delta("no finish reason")),  # [DONE] without a finish reason
        b": keep-alive\n\n: keep-alive\n\n",
    ],
)
def test_a_stream_that_ends_unfinished_is_an_error_not_an_answer(server: ScriptedServer, body: bytes) -> None:
    server.reply(pieces=[body])
    with pytest.raises(ModelResponseError, match="ended before the reply was finished"):
        generator(server, max_retries=0).run([ChatMessage.from_user("x")], streaming_callback=lambda c: None)


def test_an_unfinished_anthropic_stream_is_an_error(server: ScriptedServer) -> None:
    start = {"type": "message_start", "message": {"model": "c", "usage": {"input_tokens": 3}}}
    text = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hal"}}
    server.reply(pieces=[b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in (start, text))])
    model = AnthropicChatGenerator("c", Secret.from_token("k"), server.url, max_retries=0)
    with pytest.raises(ModelResponseError, match="ended before the reply was finished"):
        model.run([ChatMessage.from_user("x")], streaming_callback=lambda c: None)


def test_an_agent_run_fails_typed_when_the_stream_dies_after_the_headers(server: ScriptedServer) -> None:
    server.reply(pieces=[b""])
    with Agent(chat_generator=generator(server, max_retries=0)) as agent, pytest.raises(ModelResponseError):
        agent.run([ChatMessage.from_user("x")], streaming_callback=lambda c: None)


def test_event_lines_are_read_however_the_bytes_are_cut() -> None:
    body = 'data: {"a": "é"}\r\n\r\n: comment\n\nevent: x\ndata: {"b":\ndata: 1}\r\rdata: [DONE]'.encode()
    for cut in range(len(body) + 1):
        reader = EventReader()
        raws = reader.feed(body[:cut]) + reader.feed(body[cut:]) + reader.close()
        assert raws == ['{"a": "é"}', '{"b":\n1}', "[DONE]"], cut


# -- deadlines ----------------------------------------------------------------------------------------


def trickle(count: int) -> dict[str, Any]:
    """A server that keeps the connection busy: a keep-alive comment every 0.05 s, never an answer."""
    return {"pieces": [b": keep-alive\n\n"] * count, "gap": 0.05}


@pytest.mark.parametrize("streamed", [False, True])
def test_a_server_that_only_sends_keep_alives_meets_the_deadline(server: ScriptedServer, streamed: bool) -> None:
    server.reply(**trickle(200))
    model = generator(server, timeout=5.0, deadline=0.5, max_retries=3)
    callback = (lambda c: None) if streamed else None
    with pytest.raises(ModelDeadlineError, match=r"deadline of 0\.5 s"):
        model.run([ChatMessage.from_user("x")], streaming_callback=callback)
    assert len(server.requests) == 1, "a deadline that passed is not retried"


@pytest.mark.parametrize("use_async", [False, True])
def test_a_streamed_answer_larger_than_the_limit_is_refused(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """Many small events add up: the limit counts every byte of the stream, not one event or line."""
    monkeypatch.setattr(_http, "MAX_BODY_BYTES", 64 * 1024)
    server.reply(body=events(*[delta("x" * 1000)] * 100, delta(finish="stop")))
    model = generator(server, max_retries=0)

    async def main() -> Any:
        try:
            return await model.run_async([ChatMessage.from_user("x")], streaming_callback=lambda c: None)
        finally:
            await model.close_async()

    with pytest.raises(ModelResponseError, match="larger than the limit"):
        if use_async:
            asyncio.run(main())
        else:
            model.run([ChatMessage.from_user("x")], streaming_callback=lambda c: None)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_finished_stream_is_not_held_open_by_keep_alives(server: ScriptedServer, use_async: bool) -> None:
    """After ``[DONE]`` the server keeps the connection busy: the answer is handed on, the connection cut."""
    server.reply(pieces=[events(delta("hello"), delta(finish="stop")), *[b": keep-alive\n\n"] * 60], gap=0.05)
    model = generator(server, timeout=30.0, deadline=60.0, max_retries=0)
    chunks: list[StreamingChunk] = []

    async def main() -> dict[str, Any]:
        try:
            return await model.run_async([ChatMessage.from_user("x")], streaming_callback=chunks.append)
        finally:
            await model.close_async()

    if use_async:
        result = asyncio.run(main())
    else:
        result = model.run([ChatMessage.from_user("x")], streaming_callback=chunks.append)
    assert result["replies"][0].text == "hello" and chunks[0].content == "hello"
    assert server.hung_up.wait(10), "the client read on to the end of the keep-alives"


@pytest.mark.parametrize("streamed", [False, True])
def test_the_deadline_holds_under_run_async(server: ScriptedServer, streamed: bool) -> None:
    server.reply(**trickle(200))
    model = generator(server, timeout=5.0, deadline=0.5)
    callback = (lambda c: None) if streamed else None

    async def main() -> None:
        try:
            await model.run_async([ChatMessage.from_user("x")], streaming_callback=callback)
        finally:
            await model.close_async()

    with pytest.raises(ModelDeadlineError):
        asyncio.run(main())


def test_a_retry_after_beyond_the_deadline_ends_the_call_at_once(server: ScriptedServer) -> None:
    server.reply(status=429, headers={"Retry-After": "3600"}, body=b"{}")
    with pytest.raises(RateLimitError) as raised:
        generator(server, deadline=30.0).run([ChatMessage.from_user("x")])
    assert raised.value.retry_after == "3600" and len(server.requests) == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "soon", "", "Wed, 99 Foo 2015 07:28:00 GMT", "1e999"])
def test_an_unreadable_retry_after_falls_back_to_backoff(server: ScriptedServer, value: str) -> None:
    server.reply(status=503, headers={"Retry-After": value}, body=b"busy")
    server.reply(body=completion({"content": "ok"}))
    assert generator(server).run([ChatMessage.from_user("x")])["replies"][0].text == "ok"
    assert retry_after_seconds(value) is None


def test_an_http_date_retry_after_is_honoured(server: ScriptedServer) -> None:
    server.reply(status=503, headers={"Retry-After": formatdate(time.time() - 5, usegmt=True)}, body=b"busy")
    server.reply(body=completion({"content": "ok"}))
    assert generator(server, backoff_base=30.0).run([ChatMessage.from_user("x")])["replies"][0].text == "ok"


def test_retries_are_configured_per_generator(server: ScriptedServer) -> None:
    for _ in range(2):
        server.reply(status=500, body=b"down")
    with pytest.raises(ServerError):
        generator(server, max_retries=1, backoff_base=0.0, max_backoff=0.0).run([ChatMessage.from_user("x")])
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "setting",
    [{"timeout": 0}, {"connect_timeout": -1}, {"deadline": float("nan")}, {"max_backoff": "1"}, {"max_retries": True}],
)
def test_timeouts_and_retries_are_checked(setting: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        OpenAIChatGenerator("m", Secret.from_token("k"), **setting)


def test_the_settings_round_trip(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFSM_ALLOWED_ENV_VARS", "K")
    model = OpenAIChatGenerator(
        "m", Secret.from_env_var("K", strict=False), server.url, timeout=7.0, connect_timeout=2.0, deadline=42.0
    )
    again = OpenAIChatGenerator.from_dict(json.loads(json.dumps(model.to_dict())))
    assert (again.timeout, again.connect_timeout, again.deadline, again.max_backoff) == (7.0, 2.0, 42.0, 30.0)


# -- credentials --------------------------------------------------------------------------------------


def untrusted(env_var: str, **fields: Any) -> dict[str, Any]:
    """A client's dict as a document from elsewhere could hold it."""
    return {"type": "x", "data": {"api_key": {"type": "env_var", "env_vars": [env_var]}, **fields}}


def test_data_may_name_only_the_clients_own_key_variable_or_allowed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    evil = untrusted("AWS_SECRET_ACCESS_KEY", api_base_url="http://127.0.0.1:9/v1")
    with pytest.raises(DeserializationError, match="AGENTFSM_ALLOWED_ENV_VARS") as refused:
        OpenAIChatGenerator.from_dict(evil)
    assert "allow_env_vars" in str(refused.value) and "aws-secret" not in str(refused.value)
    assert OpenAIChatGenerator.from_dict(untrusted("OPENAI_API_KEY")).api_key.to_dict()["env_vars"] == [
        "OPENAI_API_KEY"
    ]
    assert AnthropicChatGenerator.from_dict(untrusted("ANTHROPIC_API_KEY")).model
    with pytest.raises(DeserializationError):
        AnthropicChatGenerator.from_dict(untrusted("OPENAI_API_KEY"))
    monkeypatch.setenv("AGENTFSM_ALLOWED_ENV_VARS", "OTHER, AWS_SECRET_ACCESS_KEY")
    assert OpenAIChatGenerator.from_dict(evil).api_key.resolve_value() == "aws-secret"


@pytest.mark.parametrize("generator", [OpenAIChatGenerator, AnthropicChatGenerator])
def test_data_may_point_a_client_only_at_its_own_loopback_or_allowed_servers(
    generator: type[OpenAIChatGenerator] | type[AnthropicChatGenerator], monkeypatch: pytest.MonkeyPatch
) -> None:
    own = generator.api_key_env_var
    for url in (
        None,
        generator.default_base_url + "/",
        "http://localhost:8080/v1",
        "http://[::1]:1/",
        "http://127.0.0.9",
    ):
        assert generator.from_dict(untrusted(own, api_base_url=url)).api_base_url
    monkeypatch.setattr(secrets, "_user_endpoints", set())
    for evil in ("https://evil.example/v1", "https://api.openai.com.evil.example", "http://10.0.0.1", "ftp://x", 3):
        with pytest.raises(DeserializationError, match="allow_endpoints") as refused:
            generator.from_dict(untrusted(own, api_base_url=evil))
        assert "AGENTFSM_ALLOWED_ENDPOINTS" in str(refused.value)
    monkeypatch.setenv("AGENTFSM_ALLOWED_ENDPOINTS", "https://other.example, https://EVIL.example:443/anything")
    assert generator.from_dict(untrusted(own, api_base_url="https://evil.example/v1")).api_base_url
    with pytest.raises(DeserializationError):  # another port is another server
        generator.from_dict(untrusted(own, api_base_url="https://evil.example:8443/v1"))
    secrets.allow_endpoints("https://llm.internal:8443")
    assert generator.from_dict(untrusted(own, api_base_url="https://llm.internal:8443/v1")).api_base_url
    with pytest.raises(ValueError):
        secrets.allow_endpoints("llm.internal")


def test_allow_env_vars_allows_process_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_user_allowed", set())
    with pytest.raises(DeserializationError):
        Secret.from_dict({"type": "env_var", "env_vars": ["MY_KEY"]})
    secrets.allow_env_vars("MY_KEY")
    assert Secret.from_dict({"type": "env_var", "env_vars": ["MY_KEY"], "strict": False}).resolve_value() is None
    with pytest.raises(ValueError):
        secrets.allow_env_vars("")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"verify": False},
        {"proxy": "http://evil.example:3128"},
        {"base_url": "https://evil.example"},
        {"follow_redirects": True},
        {"trust_env": True},
        {"mounts": {}},
    ],
)
def test_data_may_not_change_where_or_how_securely_the_key_goes(kwargs: dict[str, Any]) -> None:
    with pytest.raises(DeserializationError, match=next(iter(kwargs))):
        OpenAIChatGenerator.from_dict(untrusted("OPENAI_API_KEY", http_client_kwargs=kwargs))


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"data": None},
        {"data": {"nope": 1}},
        {"data": {"api_key": "K"}},
        {"data": {"api_key": {"type": "x"}}},
        {"data": {"api_key": {"type": "env_var", "env_vars": "OPENAI_API_KEY"}}},
        [],
        "text",
    ],
)
def test_a_dict_of_the_wrong_shape_is_a_deserialization_error(data: Any) -> None:
    with pytest.raises(DeserializationError):
        OpenAIChatGenerator.from_dict(data)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"headers": {"Authorization": "Bearer sk-1"}},
        {"headers": {"x-api-key": "sk-1"}},
        {"headers": {"api-key": "sk-1"}},
        {"headers": [("Proxy-Authorization", "Basic abc")]},
        {"headers": {"Cookie": "session=abc"}},
        {"cookies": {"session": "abc"}},
        {"auth": ("user", "pass")},
        {"params": {"key": "sk-1"}},
        {"params": {"code": "sk-1"}},
        {"params": [("sig", "sk-1")]},
        {"params": {"accessToken": "sk-1"}},
        {"headers": [(b"Authorization", b"Bearer sk-1")]},
        {"headers": {b"x-api-key": b"sk-1"}},
        {"headers": {"X-Auth-Token": "sk-1"}},
        {"headers": {"Ocp-Apim-Subscription-Key": "sk-1"}},
        {"proxy": "http://user:pass@proxy.local:3128"},
        {"base_url": "https://user:sk-1@api.example"},
        {"base_url": "https://api.example/v1?signature=sk-1"},
        {"generation_kwargs": {"api_key": "sk-1"}},
    ],
)
def test_to_dict_refuses_credentials_outside_the_secret(kwargs: dict[str, Any]) -> None:
    generation = kwargs.pop("generation_kwargs", None)
    model = OpenAIChatGenerator(
        "m", Secret.from_env_var("K", strict=False), generation_kwargs=generation, http_client_kwargs=kwargs
    )
    with pytest.raises(SerializationError, match=r"Secret\.from_env_var") as raised:
        model.to_dict()
    assert "sk-1" not in str(raised.value) and "user:pass" not in str(raised.value)
    with pytest.raises(SerializationError):
        Agent(chat_generator=model).to_dict()


def test_to_dict_refuses_a_key_in_the_base_url() -> None:
    for url in ("https://user:sk-1@api.example/v1", "https://api.example/v1?key=sk-1"):
        with pytest.raises(SerializationError, match="api_base_url"):
            AnthropicChatGenerator("m", Secret.from_env_var("K", strict=False), url).to_dict()


@pytest.mark.parametrize(
    "name", ["OpenAI-Organization", "Idempotency-Key", "X-Request-Id", "anthropic-beta", "Accept-Encoding"]
)
def test_harmless_headers_still_serialize(name: str) -> None:
    kwargs = {"headers": {name: "v-1"}, "params": {"api-version": "2024-06-01"}}
    model = OpenAIChatGenerator(
        "m", Secret.from_env_var("K", strict=False), generation_kwargs={"max_tokens": 9}, http_client_kwargs=kwargs
    )
    assert model.to_dict()["data"]["http_client_kwargs"] == kwargs


# -- a full loop over the scripted server, streamed ----------------------------------------------------


def test_an_agent_streams_a_tool_round_trip_with_repeated_names(server: ScriptedServer) -> None:
    SIDE_EFFECTS.clear()
    parts = ['{"a": 4,', ' "b": 5}']
    server.reply(
        pieces=[
            events(
                *[delta(calls=[tool_call("c9", "add", p) | {"index": 0}]) for p in parts], delta(finish="tool_calls")
            )
        ]
    )
    server.reply(pieces=[events(delta("9"), delta(finish="stop"))])
    seen: list[StreamingChunk] = []
    with Agent(chat_generator=generator(server), tools=[add]) as agent:
        result = agent.run([ChatMessage.from_user("4 + 5?")], streaming_callback=seen.append)
    assert SIDE_EFFECTS == ["add(4,5)"] and result["last_message"].text == "9"
    assert [c.tool_calls for c in seen if c.tool_calls] == [[ToolCall("add", {"a": 4, "b": 5}, "c9")]]
    back = server.requests[1]["json"]["messages"]
    assert back[1]["content"] == "" and back[2] == {"role": "tool", "content": "9", "tool_call_id": "c9"}


# -- malformed answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"choices": "none"}',
        b'{"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]}',
        b'{"choices": [{"message": {"content": 5}}]}',
        b'{"choices": []}',
        b'{"choices": [' + b"[" * 2000 + b"]" * 2000 + b"]}",
    ],
    ids=["not-json", "a-list", "choices-not-a-list", "call-without-name", "content-a-number", "no-choice", "deep"],
)
def test_a_malformed_answer_is_a_response_error(server: ScriptedServer, body: bytes) -> None:
    server.reply(body=body)
    with pytest.raises(ModelResponseError):
        generator(server).run([ChatMessage.from_user("x")])
    assert len(server.requests) == 1


def test_deep_arguments_and_missing_ids_leave_a_reply_the_run_can_handle(server: ScriptedServer) -> None:
    deep = '{"a": ' * 1000 + "1" + "}" * 1000
    no_id = {"type": "function", "function": {"name": "add", "arguments": deep}}
    server.reply(body=completion({"content": None, "tool_calls": [no_id]}, finish="tool_calls"))
    [reply] = generator(server).run([ChatMessage.from_user("x")], [add])["replies"]
    [made] = reply.tool_calls
    assert made.id is None and made.tool_name == "add" and list(made.arguments) == ["__raw__"]
    assert json.dumps(reply.to_dict())  # what a snapshot stores
