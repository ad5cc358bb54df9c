"""The model clients' own cost per request: agentfsm's against the official openai and anthropic SDKs.

Run in the peers' virtualenv by ``bench/run.py`` (``python clients.py RUNS``); prints JSON. A local
HTTP server in this process answers every request with the same prepared reply (keep-alive, no
model), so what differs between the rows is each client's own work: building the request,
sending it, and parsing the answer (a JSON completion, or a stream of server-sent events).
The clients take turns, sample by sample.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from typing import Any

REQUESTS = 50  # per sample

OPENAI_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "The answer is 42."}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}
ANTHROPIC_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "The answer is 42."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5},
}
WORDS = ["The", " answer", " is", " 42", "."]


def openai_stream() -> bytes:
    """The OpenAI reply as server-sent events, a word an event."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    events = [{**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in WORDS]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def anthropic_stream() -> bytes:
    """The Anthropic reply as server-sent events, a word a delta."""
    message = {**ANTHROPIC_REPLY, "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
    events = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}} for w in WORDS),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


BODIES = {
    ("/v1/chat/completions", False): (json.dumps(OPENAI_REPLY).encode(), "application/json"),
    ("/v1/chat/completions", True): (openai_stream(), "text/event-stream"),
    ("/v1/messages", False): (json.dumps(ANTHROPIC_REPLY).encode(), "application/json"),
    ("/v1/messages", True): (anthropic_stream(), "text/event-stream"),
}


class Handler(BaseHTTPRequestHandler):
    """Answers every POST with the prepared reply for its path (streamed when the request asks)."""

    protocol_version = "HTTP/1.1"  # keep-alive: the rows measure requests, not connections
    disable_nagle_algorithm = True  # headers and body leave at once, not after the client's delayed ACK

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        """Answer."""
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body, kind = BODIES[(self.path, bool(request.get("stream")))]
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def clients(url: str) -> dict[str, Callable[[], Any]]:
    """One request of each client, by row name."""
    import anthropic
    import openai

    from agentfsm import ChatMessage
    from agentfsm.generators import AnthropicChatGenerator, OpenAIChatGenerator
    from agentfsm.secrets import Secret

    messages = [ChatMessage.from_user("What is the answer?")]
    raw = [{"role": "user", "content": "What is the answer?"}]
    ours_openai = OpenAIChatGenerator("m", Secret.from_token("k"), url, max_retries=0)
    ours_anthropic = AnthropicChatGenerator("m", Secret.from_token("k"), url, max_retries=0)
    sdk_openai = openai.OpenAI(api_key="k", base_url=url, max_retries=0)
    sdk_anthropic = anthropic.Anthropic(api_key="k", base_url=url.removesuffix("/v1"), max_retries=0)

    def ignore(_chunk: Any) -> None:
        pass

    def sdk_openai_stream() -> None:
        for _ in sdk_openai.chat.completions.create(model="m", messages=raw, stream=True):  # type: ignore[arg-type]
            pass

    def sdk_anthropic_stream() -> None:
        with sdk_anthropic.messages.stream(model="m", max_tokens=64, messages=raw) as stream:  # type: ignore[arg-type]
            stream.get_final_message()

    return {
        "agentfsm OpenAIChatGenerator": lambda: ours_openai.run(messages),
        "openai SDK": lambda: sdk_openai.chat.completions.create(model="m", messages=raw),  # type: ignore[arg-type]
        "agentfsm OpenAIChatGenerator, streamed": lambda: ours_openai.run(messages, streaming_callback=ignore),
        "openai SDK, streamed": sdk_openai_stream,
        "agentfsm AnthropicChatGenerator": lambda: ours_anthropic.run(messages),
        "anthropic SDK": lambda: sdk_anthropic.messages.create(model="m", max_tokens=64, messages=raw),  # type: ignore[arg-type]
        "agentfsm AnthropicChatGenerator, streamed": lambda: ours_anthropic.run(messages, streaming_callback=ignore),
        "anthropic SDK, streamed": sdk_anthropic_stream,
    }


def main() -> None:
    """Time every client taking turns; print the median and min µs per request, and the versions."""
    runs = int(sys.argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    calls = clients(url)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(runs + 1):  # the first round warms the connections up and is not kept
        for name, call in calls.items():
            started = time.perf_counter()
            for _ in range(REQUESTS):
                call()
            samples[name].append((time.perf_counter() - started) / REQUESTS * 1e6)
    rows = {
        name: {"median_us": round(statistics.median(s[1:]), 1), "min_us": round(min(s[1:]), 1)}
        for name, s in samples.items()
    }
    versions = {p: version(p) for p in ("agentfsm", "openai", "anthropic", "httpx")}
    print(json.dumps({"rows": rows, "versions": versions, "requests_per_sample": REQUESTS}))
    server.shutdown()


if __name__ == "__main__":
    main()
