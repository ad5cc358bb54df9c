"""Serving an ASGI app on 127.0.0.1 for a test: uvicorn in a thread, on a free port, ready when the port answers."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, seconds: float = 20.0) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing answered on 127.0.0.1:{port} within {seconds} s") from None
            time.sleep(0.05)


@contextmanager
def serving(app: Any, port: int | None = None) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 for as long as the block runs; yields its base URL."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http="h11", loop="asyncio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def needs_node_package(package: str) -> None:
    """Fail under CI, skip elsewhere, when Node or the npm package is missing (``make node-tools`` installs it)."""
    missing = "Node" if NODE is None else "" if (ROOT / "node_modules" / package / "package.json").exists() else package
    if missing:
        message = f"{missing} is not installed (make node-tools installs it)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must run this test")
        pytest.skip(message)
