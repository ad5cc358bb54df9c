"""A real HTTP server on 127.0.0.1 (random port) that replays scripted answers, for the model clients."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.generators.servers import llama_cpp_python_url, llama_server_url

__all__ = ["llama_cpp_python_url", "llama_server_url"]  # session fixtures: the real model servers


class Scripted(BaseHTTPRequestHandler):
    """Answers each POST with the next scripted response of its server; records every request."""

    server: ScriptedServer
    protocol_version = "HTTP/1.1"  # an answer with ``keep_alive`` leaves the connection open for the next request

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append(
            {"path": self.path, "headers": dict(self.headers), "json": json.loads(body), "client": self.client_address}
        )
        answer = self.server.answers.popleft()
        if answer.get("drop"):  # the connection dies without an answer
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        time.sleep(answer.get("delay", 0))
        self.send_response(answer.get("status", 200))
        for name, value in answer.get("headers", {}).items():
            self.send_header(name, value)
        pieces = answer.get("pieces", [answer.get("body", b"")])
        if answer.get("keep_alive"):
            self.send_header("Content-Length", str(sum(map(len, pieces))))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        try:
            for number, piece in enumerate(pieces):
                if number and "hold" in answer:  # the next pieces wait until the client has seen the first
                    answer["held"] = answer["hold"].wait(60)
                self.wfile.write(piece)
                self.wfile.flush()
                time.sleep(answer.get("gap", 0))
        except (BrokenPipeError, ConnectionResetError):  # the client went away mid-answer
            self.server.hung_up.set()


class ScriptedServer(ThreadingHTTPServer):
    """A local model server: ``answers`` are given out in order."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Scripted)
        self.answers: deque[dict[str, Any]] = deque()
        self.requests: list[dict[str, Any]] = []
        #: Set when a client closed the connection while an answer was being sent.
        self.hung_up = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def reply(self, **answer: Any) -> None:
        self.answers.append(answer)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    httpd = ScriptedServer()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
