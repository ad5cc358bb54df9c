"""One SQLite store shared by the review page, ``decide`` and ``resume``, each in its own process, and by the app.

The app opens the store when it is imported, as the README's pattern does (``--agent`` names it),
so each command's process holds the file open through the app's connection before it opens the
store itself. Closing any other descriptor of the file would drop every POSIX lock the process
holds on it, SQLite's included: another process could then take the file for its own, delete the
write-ahead log a live connection still writes to, and lose runs or damage the file (issue 51).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx

ROOT = Path(__file__).resolve().parents[2]

#: The app, as a user writes it beside the store: the store opened at import, the agent made from it.
APP = '''
import json
import sys

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from agentfsm.stores import SQLiteSnapshotStore

store = SQLiteSnapshotStore("runs.db", durable=True)


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment."""
    return f"paid {amount} to {to}"


class Model:
    """Pays whom the user names, then says so: the same replies in whichever process runs it."""

    def run(self, messages, tools=None, streaming_callback=None, **kwargs):
        last = messages[-1]
        if last.tool_call_result is not None:
            return {"replies": [ChatMessage.from_assistant(f"Done: {last.tool_call_result.result}.")]}
        call = ToolCall("pay", {"to": last.text, "amount": 1}, id="p1")
        return {"replies": [ChatMessage.from_assistant(tool_calls=[call])]}


def agent():
    strategy = BreakpointConfirmationStrategy(".")
    return Agent(chat_generator=Model(), tools=[pay], confirmation_strategies={"pay": strategy}, snapshot_store=store)


def start(count):
    """Start ``count`` runs, each waiting for its payment's approval; print their ids."""
    waiting = []
    for n in range(count):
        try:
            agent().run([ChatMessage.from_user(f"payee {n}")])
        except HITLBreakpointException as paused:
            waiting.append(paused.snapshot.run_id)
    json.dump(waiting, sys.stdout)
'''

#: How long any one step may take before the test gives up on it (a busy machine is slow, not stuck).
PATIENCE = 60.0


def environment() -> dict[str, str]:
    """This environment, with this checkout first on the path: the commands run this agentfsm, and import the app."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def command(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``agentfsm ARGS`` run in ``where``, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *args],
        cwd=where,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )


@contextlib.contextmanager
def review_page(where: Path) -> Iterator[httpx.Client]:
    """``agentfsm serve`` over ``where``'s store with the app's agent, and a browser on it; stopped at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve = ["serve", "--store", "runs.db", "--agent", "app:agent", "--port", str(port)]
    server = subprocess.Popen(
        [sys.executable, "-m", "agentfsm.cli", *serve], cwd=where, env=environment(), stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read(stream: IO[str]) -> None:
        with stream:
            for line in stream:
                lines.put(line)
        lines.put(None)  # the server closed its stderr: it stopped

    assert server.stderr is not None
    reader = threading.Thread(target=read, args=(server.stderr,))
    reader.start()
    said: list[str] = []

    def stop() -> str:
        """Stop the server; everything it said."""
        server.terminate()
        server.wait(timeout=PATIENCE)
        reader.join(timeout=PATIENCE)
        said.extend(line for line in iter(lines.get_nowait, None))
        return "".join(said)

    url = f"http://127.0.0.1:{port}"
    try:
        while not said or "agentfsm review page:" not in said[-1]:
            try:
                line = lines.get(timeout=PATIENCE)
            except queue.Empty:
                raise AssertionError(f"agentfsm serve did not say where its page is in {PATIENCE} s") from None
            assert line is not None, "agentfsm serve stopped before it said where its page is"
            said.append(line)
        with httpx.Client(base_url=url, headers={"Origin": url}, timeout=PATIENCE) as browser:
            # The address is printed before the server listens on it: the first answer tells it is up.
            deadline = time.monotonic() + PATIENCE
            while True:
                try:
                    browser.get("/")
                    break
                except httpx.ConnectError:
                    assert server.poll() is None, "agentfsm serve stopped"
                    assert time.monotonic() < deadline, f"the page at {url} did not answer within {PATIENCE} s"
                    time.sleep(0.05)
            yield browser
    except AssertionError as failed:
        raise AssertionError(f"{failed}\nagentfsm serve said:\n{stop()}") from None
    finally:
        if server.returncode is None:
            stop()
    assert server.returncode in (0, -15), f"agentfsm serve ended with {server.returncode}: {''.join(said)}"


def decide_on_the_page(browser: httpx.Client, run_id: str) -> None:
    """Approve the run's payment on its page, as a reviewer does; the page runs the rest before it answers."""
    page = browser.get(f"/runs/{run_id}")
    assert page.status_code == 200 and "Waiting for your decision" in page.text, (run_id, page.text[-2000:])
    form = dict(re.findall(r"name='(csrf|seq)' value='([^']*)'", page.text))
    decided = browser.post(f"/runs/{run_id}/decide", data={**form, "action:p1": "approve"})
    assert decided.status_code == 303, (run_id, decided.text[-2000:])


def test_the_page_decide_and_resume_keep_every_run_of_a_store_the_app_opens_too(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    started = subprocess.run(
        [sys.executable, "-c", "import app; app.start(6)"],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    )
    runs = json.loads(started.stdout)
    assert len(runs) == 6, started.stderr
    agent = ("--store", "runs.db", "--agent", "app:agent", "--approve-all")
    with review_page(tmp_path) as browser:
        # The page and the commands take turns: each process's runs are written while the others hold the file.
        for n, run_id in enumerate(runs):
            if n % 3 == 0:
                decide_on_the_page(browser, run_id)
            else:
                done = command(tmp_path, "decide" if n % 3 == 1 else "resume", run_id, *agent)
                assert done.returncode == 0 and done.stdout.startswith("Done: paid 1 to payee"), done.stderr
        # The page sees every run the commands finished.
        listed = browser.get("/").text
        assert all(run_id in listed for run_id in runs), listed
    with contextlib.closing(sqlite3.connect(tmp_path / "runs.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    shown = command(tmp_path, "runs", "--store", "runs.db", "--json")
    assert shown.returncode == 0, shown.stderr
    assert sorted((r["run_id"], r["status"]) for r in json.loads(shown.stdout)) == sorted((r, "done") for r in runs)
