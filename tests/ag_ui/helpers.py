"""Posting inputs to an AG-UI app in-process and reading its answer back as the protocol's own events."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import Event
from pydantic import TypeAdapter
from starlette.testclient import TestClient

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def user_input(thread: str, run: str, text: str = "Pay Ann 30 EUR.", **fields: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` with one user message."""
    return {
        "threadId": thread,
        "runId": run,
        "messages": [{"id": f"{run}-u", "role": "user", "content": text}],
        **fields,
    }


def approve(thread: str, run: str, *ids: str, **payload: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` that answers the interrupts ``ids`` with ``{"approved": true, ...payload}``."""
    answer = {"approved": True, **payload}
    resume = [{"interruptId": i, "status": "resolved", "payload": answer} for i in ids]
    return {"threadId": thread, "runId": run, "messages": [], "resume": resume}


def post(client: TestClient, body: Any, **headers: str) -> tuple[int, list[dict[str, Any]] | dict[str, Any]]:
    """The status and the events (each checked to be one of the protocol's), or the JSON error."""
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    response = client.post("/", content=raw, headers={"Content-Type": "application/json", **headers})
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return response.status_code, response.json()
    events = []
    for block in response.text.split("\n\n"):
        if block.startswith("data: "):
            data = json.loads(block[len("data: ") :])
            EVENTS.validate_python(data)  # one of the protocol's events, as its package defines them
            events.append(data)
    return response.status_code, events


def kinds(events: Any) -> list[str]:
    return [e["type"] for e in events]
