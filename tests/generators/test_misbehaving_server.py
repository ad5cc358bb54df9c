"""A fuzzer: a model server on 127.0.0.1 that answers with generated statuses, headers, bodies and streams.

Whatever it sends, both clients, streamed or not, either return replies or raise a
``ModelClientError``: never a raw exception from deeper down, never a hang.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import ChatMessage
from agentfsm.errors import ModelClientError
from agentfsm.generators import AnthropicChatGenerator, OpenAIChatGenerator
from agentfsm.secrets import Secret
from tests.generators.conftest import ScriptedServer
from tests.helpers import add

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


arguments = st.one_of(st.text(max_size=20), json_values, st.integers(90, 1100).map(nested), st.just('{"a": 1, "b": 2}'))
openai_call = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.text(max_size=6), st.none(), st.integers()),
        "index": st.one_of(st.integers(-1, 3), st.none(), st.text(max_size=2)),
        "type": st.just("function"),
        "function": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {},
                optional={"name": st.one_of(st.sampled_from(["add", "ad", "d"]), json_values), "arguments": arguments},
            ),
        ),
    },
)
openai_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.just("assistant"),
        "content": st.one_of(st.text(max_size=10), st.none(), json_values),
        "tool_calls": st.one_of(st.lists(openai_call, max_size=3), json_values),
    },
)
openai_answer = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.text(max_size=5), json_values),
        "choices": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "index": json_values,
                        "message": st.one_of(openai_message, json_values),
                        "delta": st.one_of(openai_message, json_values),
                        "finish_reason": st.one_of(st.sampled_from(["stop", "tool_calls"]), json_values),
                    },
                ),
                max_size=2,
            ),
            json_values,
        ),
        "usage": json_values,
    },
)
anthropic_block = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "tool_use", "thinking", "text_delta", "input_json_delta", "other"]),
        "text": json_values,
        "id": json_values,
        "name": st.one_of(st.just("add"), json_values),
        "input": arguments,
        "partial_json": st.text(max_size=10),
        "thinking": json_values,
    },
)
anthropic_answer = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(
            ["message", "message_start", "content_block_start", "content_block_delta", "message_delta", "message_stop"]
        ),
        "content": st.one_of(st.lists(anthropic_block, max_size=3), json_values),
        "content_block": st.one_of(anthropic_block, json_values),
        "delta": st.one_of(anthropic_block, json_values, st.just({"stop_reason": "end_turn"})),
        "index": json_values,
        "message": json_values,
        "stop_reason": json_values,
        "usage": json_values,
    },
)


def as_body(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def stream_of(events: list[Any], done: bool) -> bytes:
    lines = [(e if isinstance(e, bytes) else b"data: " + json.dumps(e).encode()) + b"\n\n" for e in events]
    return b"".join(lines) + (b"data: [DONE]\n\n" if done else b"")


answers = st.fixed_dictionaries(
    {
        "status": st.sampled_from([200, 200, 200, 200, 400, 404, 429, 500, 503]),
        "retry_after": st.one_of(
            st.none(), st.sampled_from(["0", "nan", "-1", "soon", "Thu, 01 Jan 1970 00:00:00 GMT"])
        ),
        "openai": st.one_of(openai_answer, json_values, st.binary(max_size=30)),
        "anthropic": st.one_of(anthropic_answer, json_values, st.binary(max_size=30)),
        "openai_events": st.lists(st.one_of(openai_answer, json_values, st.binary(max_size=12)), max_size=5),
        "anthropic_events": st.lists(st.one_of(anthropic_answer, json_values, st.binary(max_size=12)), max_size=5),
        "done": st.booleans(),
        "cut": st.one_of(st.none(), st.integers(0, 400)),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=answers, api=st.sampled_from(["openai", "anthropic"]), streamed=st.booleans())
def test_any_answer_is_replies_or_a_model_client_error(
    server: ScriptedServer, answer: dict[str, Any], api: str, streamed: bool
) -> None:
    body = stream_of(answer[f"{api}_events"], answer["done"]) if streamed else as_body(answer[api])
    if answer["cut"] is not None:
        body = body[: answer["cut"]]
    headers = {"Retry-After": answer["retry_after"]} if answer["retry_after"] is not None else {}
    server.answers.clear()
    for _ in range(2):  # the first try and one retry
        server.reply(status=answer["status"], headers=headers, body=body)
    kind = OpenAIChatGenerator if api == "openai" else AnthropicChatGenerator
    model = kind("m", Secret.from_token("k"), server.url, max_retries=1, backoff_base=0.0, timeout=5.0, deadline=10.0)
    try:
        output = model.run(
            [ChatMessage.from_user("x")], tools=[add], streaming_callback=(lambda c: None) if streamed else None
        )
    except ModelClientError:
        return
    finally:
        model.close()
    assert output["replies"] and all(isinstance(r, ChatMessage) for r in output["replies"])
    for reply in output["replies"]:
        reply.to_dict()  # what a snapshot would store
        assert all(isinstance(c.tool_name, str) and isinstance(c.arguments, dict) for c in reply.tool_calls)
