"""Structured output on real model servers: Gemma 3 270M answering in an output type's schema.

llama.cpp's llama-server turns the OpenAI API's ``response_format`` (``json_schema``) into a grammar
that constrains the model's tokens, so even the tiny model answers JSON in the schema; the agent
checks it and returns the parsed value. The schema bounds each string (1 to 30 characters), so the
grammar also makes the answer fit in ``max_tokens``: what the model writes there is its choice,
that it is a valid answer is not. Over the Anthropic API the agent shows the model its
final-answer tool instead; the tiny model's answer is not constrained there (it may call the tool
or answer in text), so that test asserts the loop (the tool offered, the answer checked, sent back
once) for whichever it does, rather than the answer.
The servers start once per session (``servers``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import BaseModel, Field

from agentfsm import Agent, ChatMessage, StreamingChunk
from agentfsm.errors import OutputValidationError
from agentfsm.generators import AnthropicChatGenerator, OpenAIChatGenerator
from agentfsm.output import FINAL_ANSWER_TOOL
from agentfsm.secrets import Secret

KEY = Secret.from_env_var("NO_KEY_NEEDED", strict=False)
QUESTION = [ChatMessage.from_user("Name a city and its country. Answer in JSON.")]


class Place(BaseModel):
    """What the model must answer."""

    city: str = Field(min_length=1, max_length=30)
    country: str = Field(min_length=1, max_length=30)


def recorded(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    def record(request: httpx.Request) -> None:
        bodies.append(json.loads(request.content))

    return {"event_hooks": {"request": [record]}}


def test_the_openai_api_answers_in_the_schema_through_response_format(llama_server_url: str) -> None:
    bodies: list[dict[str, Any]] = []
    model = OpenAIChatGenerator(
        "gemma",
        KEY,
        llama_server_url,
        {"max_tokens": 128, "temperature": 0},
        timeout=300.0,
        max_retries=2,
        deadline=900.0,
        http_client_kwargs=recorded(bodies),
    )
    with Agent(chat_generator=model, output_type=Place) as agent:
        result = agent.run(QUESTION)
    assert isinstance(result["output"], Place) and result["output"].city and result["output"].country
    assert result.exit_reason == "text"
    response_format = bodies[0]["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["schema"]["required"] == ["city", "country"]
    assert response_format["json_schema"]["schema"]["properties"]["city"]["maxLength"] == 30, "the bound is sent"


async def test_a_streamed_answer_over_the_openai_api_with_run_async(llama_server_url: str) -> None:
    chunks: list[StreamingChunk] = []
    model = OpenAIChatGenerator(
        "gemma", KEY, llama_server_url, {"max_tokens": 128, "temperature": 0}, timeout=300.0, deadline=900.0
    )
    async with Agent(chat_generator=model, output_type=Place, streaming_callback=chunks.append) as agent:
        result = await agent.run_async(QUESTION)
    assert isinstance(result["output"], Place)
    streamed = "".join(c.content for c in chunks)
    assert Place.model_validate_json(streamed) == result["output"], "the streamed text is the answer checked"


def test_the_anthropic_api_answers_through_the_final_answer_tool_and_is_sent_back_when_it_misses(
    llama_server_url: str,
) -> None:
    """The tiny model's answer is not constrained to the schema: the test asserts the loop, not the answer.

    The tool reaches the server with the schema as its input schema; the model's answer (a call of
    the tool, or text) is either the output or goes back to the server with the problems, once, then
    fails the run.
    """
    bodies: list[dict[str, Any]] = []
    model = AnthropicChatGenerator(
        "gemma",
        KEY,
        llama_server_url,
        {"max_tokens": 64, "temperature": 0, "tool_choice": {"type": "any"}},
        timeout=300.0,
        max_retries=2,
        deadline=900.0,
        http_client_kwargs=recorded(bodies),
    )
    question = [ChatMessage.from_user("Name a city and its country. Use the final_answer tool.")]
    with Agent(chat_generator=model, output_type=Place, output_retries=1) as agent:
        try:
            result = agent.run(question)
        except OutputValidationError as error:
            assert error.retries == 1 and error.problems
            assert len(bodies) == 2
            sent_back = bodies[1]["messages"][-1]["content"]
            assert any("does not match the required schema" in block.get("text", "") for block in sent_back)
        else:
            assert isinstance(result["output"], Place)
            assert result.exit_reason in (f"tool:{FINAL_ANSWER_TOOL}", "text")
    [offered] = bodies[0]["tools"]
    assert offered["name"] == FINAL_ANSWER_TOOL and offered["input_schema"]["required"] == ["city", "country"]
    assert all(m["role"] in ("user", "assistant") for m in bodies[-1]["messages"])
