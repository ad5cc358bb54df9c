"""The review page's screenshots in diagrams/, taken in headless Chromium.

A run waiting for a payment approval (``review-page.png``), the same run's timeline once decided
(``review-run.png``), and the list of runs (``review-list.png``).

``make diagrams`` runs it (``python diagrams/review_page.py``); ``tests/web/test_web.py`` drives the
same page the same way. Needs the ``web`` extra, Playwright and Debian's ``chromium``.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.web import create_app

HERE = Path(__file__).resolve().parent
#: Chromium as this kind of machine needs it: no sandbox as root, no background connections.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@tool
def lookup(name: str) -> str:
    """Look a customer up."""
    return f"{name}: customer since 2019, no open invoices"


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment."""
    return f"paid {amount} to {to}"


SCRIPT: list[ChatMessage | str] = [
    ChatMessage.from_assistant(
        "Paying both invoices.",
        tool_calls=[
            ToolCall("pay", {"to": "ann", "amount": 30}, id="p1"),
            ToolCall("pay", {"to": "bob", "amount": 9000}, id="p2"),
        ],
    ),
    "Both invoices are handled.",
]


def paying_agent(store: SQLiteSnapshotStore, folder: Path, position: int = 0) -> Agent:
    """An agent whose payments wait for a person's decision."""
    return Agent(
        chat_generator=ScriptedChatGenerator(SCRIPT, position=position),
        tools=[pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(folder))},
        snapshot_store=store,
    )


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free local port, for as long as the block runs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http="h11", loop="asyncio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def finished_runs(store: SQLiteSnapshotStore) -> None:
    """Two runs that looked customers up, for the list to hold more than the run waiting."""
    for name in ("ann", "bob"):
        calls = [ChatMessage.from_assistant(tool_calls=[ToolCall("lookup", {"name": name}, id="l1")])]
        model = ScriptedChatGenerator([*calls, f"{name.title()} has no open invoices."])
        Agent(chat_generator=model, tools=[lookup], snapshot_store=store).run(
            [ChatMessage.from_user(f"Does {name.title()} owe us anything?")]
        )


def screenshot(folder: Path) -> None:
    """Pause a run for approval and photograph its page, then decide it and photograph its timeline and the list."""
    from playwright.sync_api import expect, sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed (make test installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteSnapshotStore(Path(tmp) / "runs.db", durable=True, record_events=True)
        finished_runs(store)
        try:
            paying_agent(store, Path(tmp)).run([ChatMessage.from_user("Pay this month's invoices.")])
        except HITLBreakpointException as paused:
            run_id = paused.snapshot.run_id
        with serving(create_app(store, paying_agent(store, Path(tmp), position=1))) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 900})
                page.goto(f"{url}/runs/{run_id}")
                page.check("input[name='action:p1'][value='approve']")  # nothing is chosen beforehand
                page.check("input[name='action:p2'][value='reject']")
                page.fill("input[name='feedback:p2']", "over the 100 EUR limit")
                page.screenshot(path=str(folder / "review-page.png"), full_page=True)
                page.press("input[name='feedback:p2']", "Enter")
                expect(page.locator("#status")).to_have_text("done", timeout=60_000)
                page.screenshot(path=str(folder / "review-run.png"), full_page=True)
                page.goto(url)
                page.screenshot(path=str(folder / "review-list.png"), full_page=True)
            finally:
                browser.close()
        store.close()


if __name__ == "__main__":
    screenshot(HERE)
    sys.exit(0)
