"""The review page's live view: a run's events, recorded in the store by the run's process, streamed to the page."""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from agentfsm.serialization import TAG
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.web import create_app
from tests.web.test_web import CHROMIUM, ROOT, ASGIClient, needs_browser, review_page

#: A run in another process: it looks a name up, which waits until the file ``release`` exists, then answers.
RUNNER = """
import sys, time
from pathlib import Path
from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.stores import SQLiteSnapshotStore

release = Path(sys.argv[2])

@tool
def lookup(name: str) -> str:
    '''Look a name up, once the test lets it.'''
    while not release.exists():
        time.sleep(0.02)
    return name.upper()

script = [ChatMessage.from_assistant(tool_calls=[ToolCall("lookup", {"name": "ann"}, id="l1")]), "Ann it is."]
store = SQLiteSnapshotStore(sys.argv[1], durable=True, record_events=True)
Agent(chat_generator=ScriptedChatGenerator(script), tools=[lookup], snapshot_store=store).run(
    [ChatMessage.from_user("Who is ann?")], streaming_callback=lambda chunk: None
)
store.close()
"""


def wait_for(found: Any, what: str, seconds: float = 120.0) -> Any:
    """``found()``'s first true value, polled until ``seconds`` have passed (a busy machine starts processes slowly)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def messages(response: httpx.Response) -> Iterator[tuple[str, str, str]]:
    """``(event name, id, data)`` of each Server-Sent Event of a streamed response, as a browser parses them."""
    name, number, data = "message", "", []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield name, number, "\n".join(data)
            name, data = "message", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "id":
                number = value
            elif field == "data":
                data.append(value)


def follow(
    url: str, run_id: str, last: str | None = None, until: str = "run_ended"
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The run's events from the page's stream until one of kind ``until``, reconnecting as a browser does.

    ``last``: the ``Last-Event-ID`` of the first connection (none: from the run's first event).
    """
    while True:
        headers = {} if last is None else {"Last-Event-ID": last}
        with httpx.stream("GET", f"{url}/runs/{run_id}/events", headers=headers, timeout=30) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            for name, number, data in messages(response):
                assert name == "message", data
                last = number
                event = json.loads(data)
                yield int(number), event
                if event["kind"] == until:
                    return


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    """A run going on in another process, writing its snapshots and events to ``runs.db``; ``release`` lets it end."""
    db, release = tmp_path / "runs.db", tmp_path / "release"
    SQLiteSnapshotStore(db).close()
    process = subprocess.Popen([sys.executable, "-c", RUNNER, str(db), str(release)])
    yield process, db, release
    release.touch()
    process.wait(timeout=60)


def test_the_page_streams_a_run_of_another_process_as_it_goes_and_resumes_after_the_last_event(
    runner: tuple[subprocess.Popen[bytes], Path, Path],
) -> None:
    process, db, release = runner
    store = SQLiteSnapshotStore(db)  # the page's: it records nothing, it reads what the run's process writes
    try:
        run_id = wait_for(lambda: [r.run_id for r in store.runs()], "the run to start")[0]
        with review_page.serving(create_app(store)) as url:
            seen: list[tuple[int, dict[str, Any]]] = []
            for number, event in follow(url, run_id):
                seen.append((number, event))
                if event["kind"] == "tool_started":
                    # Streamed while the run waits in its tool: live, not read back afterwards.
                    assert process.poll() is None and not release.exists()
                    assert store.runs()[0].status.value == "active"
                    release.touch()
            assert process.wait(timeout=60) == 0
            assert [n for n, _ in seen] == list(range(1, len(seen) + 1))
            kinds = [e["kind"] for _, e in seen]
            assert kinds[0] == "run_started" and kinds[-1] == "run_ended" and "tool_ended" in kinds
            chunks = [e["chunk"]["data"]["content"] for _, e in seen if e["kind"] == "model_chunk"]
            assert "".join(chunks) == "Ann it is.", "the streamed reply, chunk by chunk"
            # The transitions arrive in the order the run took them: its trace as stored (a done run's
            # record holds its last edge, into DONE).
            edges = [(e["source"], e["dest"], e["trigger"]) for _, e in seen if e["kind"] == "transition"]
            stored = [(r["source"], r["dest"], r["trigger"]) for r in store.latest(run_id).trace]
            assert edges == stored and stored[-1] == ("EXIT_CHECK", "DONE", "exit") and len(stored) > 5
            # A browser that reconnects after event 7 gets event 8 on, the same as before.
            assert list(follow(url, run_id, last="7")) == seen[7:]
            with httpx.stream("GET", f"{url}/runs/{run_id}/events", params={"after": len(seen) - 2}) as tail:
                assert [int(n) for _, n, _ in itertools.islice(messages(tail), 2)] == [len(seen) - 1, len(seen)]
    finally:
        store.close()


# -- handler tests, on the app's ASGI interface ---------------------------------------------------------

SCRIPT: list[ChatMessage | str] = [
    ChatMessage.from_assistant(tool_calls=[ToolCall("lookup", {"name": "ann"}, id="l1")]),
    ChatMessage.from_assistant(tool_calls=[ToolCall("pay", {"to": "ann", "amount": 30}, id="p1")]),
    "Done paying.",
]
PAID: list[str] = []
#: Set to let ``lookup`` return (tests that watch a run while it looks up).
LOOKED_UP = threading.Event()


@tool
def lookup(name: str) -> str:
    """Look a name up."""
    LOOKED_UP.wait(30)
    return name.upper()


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment."""
    PAID.append(f"{amount} to {to}")
    return f"paid {amount} to {to}"


def paying_agent(store: SQLiteSnapshotStore | None, tmp: Path, position: int = 0) -> Agent:
    """Looks ann up, then pays her once a person approves."""
    return Agent(
        chat_generator=ScriptedChatGenerator(SCRIPT, position=position),
        tools=[lookup, pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(tmp))},
        snapshot_store=store,
    )


def resuming_agent() -> Agent:
    """The agent ``agentfsm serve --agent`` resumes the paused run with: past its first two replies."""
    return paying_agent(None, Path(tempfile.gettempdir()), position=2)


@pytest.fixture
def paused(tmp_path: Path) -> Iterator[tuple[SQLiteSnapshotStore, str]]:
    """A store holding a run that recorded its events and waits for a payment's approval, and the run's id."""
    PAID.clear()
    LOOKED_UP.set()
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True, record_events=True)
    with pytest.raises(HITLBreakpointException) as waiting:
        paying_agent(store, tmp_path).run([ChatMessage.from_user("Pay ann 30.")])
    yield store, waiting.value.snapshot.run_id
    store.close()


@pytest.fixture
def client() -> Iterator[Any]:
    made: list[ASGIClient] = []

    def make(app: Any) -> ASGIClient:
        made.append(ASGIClient(app))
        return made[-1]

    yield make
    for c in made:
        c.close()


def test_a_run_page_follows_the_runs_events_from_where_it_was_drawn(
    paused: tuple[SQLiteSnapshotStore, str], client: Any
) -> None:
    store, run_id = paused
    browser = client(create_app(store))
    page = browser.get(f"/runs/{run_id}")
    counted = store.event_count(run_id)
    assert counted > 10
    assert f"<section id='live' data-events='/runs/{run_id}/events?after={counted}'>" in page.text
    assert "<script src='/live.js'></script>" in page.text and "<script src='/review.js'></script>" in page.text
    assert "connect-src 'self'" in page.headers["content-security-policy"], "the live view may read this page only"
    script = browser.get("/live.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in script.text, "events are shown as text, never as markup"
    # Running in another process: shown moving by its events, not by reloading the page.
    store.claim(run_id, store.latest(run_id).seq)
    running = browser.get(f"/runs/{run_id}").text
    assert "<p class='status' id='status'>running</p>" in running and "http-equiv='refresh'" not in running


def test_without_stored_events_a_running_run_reloads_as_before(tmp_path: Path, client: Any) -> None:
    LOOKED_UP.set()
    quiet = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    with pytest.raises(HITLBreakpointException) as waiting:
        paying_agent(quiet, tmp_path).run([ChatMessage.from_user("Pay ann 30.")])
    run_id = waiting.value.snapshot.run_id
    quiet.claim(run_id, quiet.latest(run_id).seq)
    running = client(create_app(quiet)).get(f"/runs/{run_id}").text
    assert "http-equiv='refresh'" in running and "data-events='/runs/" in running
    quiet.close()


class RunsOnly:
    """What the page reads runs from when they keep no events (as ``DurableRuns``)."""

    def __init__(self, store: SQLiteSnapshotStore) -> None:
        self.runs, self.latest, self.history, self.load = store.runs, store.latest, store.history, store.load


def test_events_of_an_unknown_run_or_from_a_store_without_events_are_not_found(
    paused: tuple[SQLiteSnapshotStore, str], client: Any
) -> None:
    store, run_id = paused
    browser = client(create_app(store))
    assert browser.get("/runs/nope/events").status_code == 404
    assert browser.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "x1"}).status_code == 400
    assert browser.get(f"/runs/{run_id}/events", params={"after": "9" * 19}).status_code == 400
    assert client(create_app(store, token="s3cret")).get(f"/runs/{run_id}/events").status_code == 401
    runs_only = client(create_app(RunsOnly(store)))
    assert runs_only.get(f"/runs/{run_id}/events").status_code == 404
    page = runs_only.get(f"/runs/{run_id}").text
    assert "id='live'" not in page and "/live.js" not in page


def test_the_stream_of_a_finished_run_ends_after_its_last_event(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True, record_events=True)
    try:
        Agent(chat_generator=ScriptedChatGenerator(["Hello."]), snapshot_store=store).run(
            [ChatMessage.from_user("Hi.")]
        )
        [run] = store.runs()
        run_id = run.run_id
        counted = wait_for(lambda: store.event_count(run_id), "the run's events to be written")
        with (
            review_page.serving(create_app(store)) as url,
            httpx.stream("GET", f"{url}/runs/{run_id}/events", timeout=30) as response,
        ):
            received = list(messages(response))  # the server ends the response: no reconnecting forever
        assert [n for _, n, _ in received[:-1]] == [str(i) for i in range(1, counted + 1)]
        assert json.loads(received[-2][2])["kind"] == "run_ended"
        assert received[-1][0] == "end"  # sent at the run's end only: a stream that ran out of time has none
        # A page drawn after the run ended, or a browser reconnecting, follows from its last event: it ends at once.
        with review_page.serving(create_app(store)) as url:
            last = {"Last-Event-ID": str(counted)}
            with httpx.stream("GET", f"{url}/runs/{run_id}/events", headers=last, timeout=30) as response:
                assert [name for name, _, _ in messages(response)] == ["end"]
    finally:
        store.close()


def forged_event(run_id: str) -> dict[str, Any]:
    """A stored ``tool_ended`` event whose result names a module the allow-list refuses (``this``, which prints on import)."""
    forged = {"kind": "tool_ended", "run_id": run_id, "step": 1, "at": 1.0, "call": "l1", "call_id": "l1"}
    return forged | {
        "tool": "lookup",
        "result": {TAG: "object", "type": "this.s", "data": {}},
        "error": None,
        "duration_us": 1,
    }


def insert_events(store: SQLiteSnapshotStore, run_id: str, first: int, *events: dict[str, Any]) -> None:
    """Write ``events`` as the run's stored events numbered ``first``, ``first + 1``..., as someone with the file could."""
    with sqlite3.connect(store.path) as db:
        db.executemany(
            "INSERT OR REPLACE INTO events VALUES (?, ?, ?)",
            [(run_id, first + i, json.dumps(e)) for i, e in enumerate(events)],
        )


def test_a_stored_event_that_cannot_be_read_is_a_problem_and_the_stream_goes_on(
    paused: tuple[SQLiteSnapshotStore, str], client: Any
) -> None:
    store, run_id = paused
    counted = store.event_count(run_id)
    ended = {"kind": "run_ended", "run_id": run_id, "step": 2, "at": 2.0, "result": None, "exit_reason": "text"}
    insert_events(store, run_id, counted + 1, forged_event(run_id), ended | {"error": None})
    stream = client(create_app(store)).get(f"/runs/{run_id}/events", headers={"Last-Event-ID": str(counted - 1)})
    lines = stream.text.split("\n\n")
    assert lines[1].startswith(f"id: {counted}\ndata: ") and json.loads(lines[1].split("data: ", 1)[1])["kind"]
    number, name, data = lines[2].split("\n")
    assert (number, name) == (f"id: {counted + 1}", "event: problem")
    problem = json.loads(data[6:])
    assert problem["number"] == counted + 1 and "module 'this': it is not in the allow-list" in problem["error"]
    assert lines[3].startswith(f"id: {counted + 2}\ndata: ") and '"run_ended"' in lines[3], "the events after it go out"
    assert lines[4] == "event: end\ndata: {}"
    assert "this" not in sys.modules, "nothing a stored event names is imported unless allowed"


def test_a_finished_runs_stream_ends_when_its_last_event_cannot_be_read(tmp_path: Path, client: Any) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True, record_events=True)
    Agent(chat_generator=ScriptedChatGenerator(["Hello."]), snapshot_store=store).run([ChatMessage.from_user("Hi.")])
    [run] = store.runs()
    counted = wait_for(lambda: store.event_count(run.run_id), "the run's events to be written")
    insert_events(store, run.run_id, counted, forged_event(run.run_id))  # in place of its run_ended
    app = client(create_app(store))
    names = [part.split("\n")[-2] for part in app.get(f"/runs/{run.run_id}/events").text.split("\n\n")[1:-1]]
    assert names[-2:] == ["event: problem", "event: end"], names
    # A browser reconnecting after that event is told the stream ended, at once.
    again = app.get(f"/runs/{run.run_id}/events", headers={"Last-Event-ID": str(counted)}).text
    assert again.split("\n\n")[1] == "event: end\ndata: {}"
    store.close()


def test_agentfsm_serve_records_the_events_of_the_runs_it_resumes(paused: tuple[SQLiteSnapshotStore, str]) -> None:
    store, run_id = paused
    before = store.event_count(run_id)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve = ["serve", "--store", store.path, "--port", str(port), "--agent", "tests.web.test_live:resuming_agent"]
    server = subprocess.Popen([sys.executable, "-m", "agentfsm.cli", *serve], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, headers={"Origin": url}) as browser:
            page = wait_for(lambda: _page_or_none(browser, f"/runs/{run_id}"), "the page to answer").text
            form = dict(re.findall(r"name='(csrf|seq)' value='([^']*)'", page))
            decided = browser.post(f"/runs/{run_id}/decide", data={**form, "action:p1": "approve"})
            assert decided.status_code == 303, decided.text
    finally:
        server.terminate()
        server.communicate(timeout=10)
    resumed = [s.event for s in store.events(run_id, after=before)]
    assert resumed[0].kind == "run_started" and resumed[0].resumed and resumed[-1].kind == "run_ended"
    assert PAID == [], "paid in the page's process, not in this one"


def _page_or_none(client: httpx.Client, path: str) -> httpx.Response | None:
    try:
        return client.get(path)
    except httpx.ConnectError:
        return None


# -- a real browser ---------------------------------------------------------------------------------------


def test_a_reviewer_watches_a_run_live_and_decides_without_reloading_the_page(tmp_path: Path) -> None:
    needs_browser()
    from playwright.sync_api import sync_playwright

    PAID.clear()
    LOOKED_UP.clear()
    db = tmp_path / "runs.db"
    # The run goes on in a thread of its own with its own store, as another process would run it.
    runs_store = SQLiteSnapshotStore(db, durable=True, record_events=True)
    stopped: list[BaseException] = []

    def run() -> None:
        try:
            paying_agent(runs_store, tmp_path).run([ChatMessage.from_user("Pay ann 30.")])
        except BaseException as exc:  # its pause, for the page to decide
            stopped.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    page_store = SQLiteSnapshotStore(db, durable=True, record_events=True)  # as agentfsm serve opens it
    artifacts = Path(os.environ.get("AGENTFSM_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    try:
        run_id = wait_for(lambda: [r.run_id for r in page_store.runs()], "the run to start")[0]
        wait_for(lambda: page_store.event_count(run_id), "its first events")
        app = create_app(page_store, paying_agent(page_store, tmp_path, position=2))
        with review_page.serving(app) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=review_page.CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.set_default_timeout(60_000)  # a busy machine draws slowly
                console: list[str] = []
                page.on("console", lambda message: console.append(message.text))
                page.goto(f"{url}/runs/{run_id}")
                assert page.locator("#status").inner_text() == "running"
                page.evaluate("window.drawnOnce = true")  # gone if the page were loaded again
                page.wait_for_selector("#live-state:has-text('Following the run')")
                LOOKED_UP.set()  # the lookup returns while the page watches
                page.wait_for_selector("#live-log li[data-kind='tool_ended']")
                assert "lookup (call l1) returned ANN" in page.inner_text("#live-log")
                page.wait_for_selector("#live-log li[data-kind='paused']")
                page.wait_for_selector("#decide")  # the form came in with the redraw
                assert page.locator("#status").inner_text() == "waiting for approval"
                assert page.evaluate("window.drawnOnce") is True, "redrawn in place, not loaded again"
                log = page.inner_text("#live-log")
                page.screenshot(path=str(artifacts / "review-live.png"), full_page=True)
                page.click("#decide")  # the form's check still works on the form brought in later
                assert page.locator("[data-call='p1'] .problem").inner_text().startswith("Choose approve")
                page.check("input[name='action:p1'][value='approve']")
                page.click("#decide")
                page.wait_for_selector("#status:has-text('done')")
                page.wait_for_selector("#live-state:has-text('The run ended')")  # and it stopped listening
            finally:
                browser.close()
    finally:
        LOOKED_UP.set()
        runner.join(30)
        runs_store.close()
        page_store.close()
    assert len(stopped) == 1 and isinstance(stopped[0], HITLBreakpointException)
    assert PAID == ["30 to ann"], "approved once, paid once"
    assert not [m for m in console if "Content Security Policy" in m], console
    assert "LLM_CALL -> TOOL_PENDING" in log and "-> CONFIRM" in log and "paused: confirmation" in log, log
