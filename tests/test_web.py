"""The review page: handler tests with Starlette's test client, and a real browser (headless Chromium)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.web import create_app

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "diagrams"))
import review_page  # noqa: E402 - the repository's screenshot script: its local server and Chromium settings

PAID: list[str] = []


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment."""
    PAID.append(f"{amount} to {to}")
    return f"paid {amount} to {to}"


@tool
def lookup(name: str) -> str:
    """Look a name up."""
    return "<script>alert('x')</script> is a tricky name"


SCRIPT = [
    ChatMessage.from_assistant(
        "Paying both.",
        tool_calls=[
            ToolCall("pay", {"to": "ann", "amount": 30}, id="p1"),
            ToolCall("pay", {"to": "bob", "amount": 9000}, id="p2"),
        ],
    ),
    "Done paying.",
]


def paying_agent(store: SQLiteSnapshotStore, tmp: Path, position: int = 0) -> Agent:
    return Agent(
        chat_generator=ScriptedChatGenerator(SCRIPT, position=position),
        tools=[pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(tmp))},
        snapshot_store=store,
    )


class ASGIClient:
    """httpx on the app's ASGI interface, used synchronously; cookies persist from one request to the next."""

    def __init__(self, app: Any) -> None:
        self._runner = asyncio.Runner()
        transport = httpx.ASGITransport(app=app)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver")

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._runner.run(self._client.get(url, **kwargs))

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._runner.run(self._client.post(url, **kwargs))

    def close(self) -> None:
        self._runner.run(self._client.aclose())
        self._runner.close()


class Runs:
    """A store with a run waiting for approval and a finished run, and the agent that resumes them."""

    def __init__(self, tmp: Path) -> None:
        self.store = SQLiteSnapshotStore(tmp / "runs.db", durable=True)
        with pytest.raises(HITLBreakpointException) as paused:
            paying_agent(self.store, tmp).run([ChatMessage.from_user("Pay ann 30 and bob 9000.")])
        self.waiting = paused.value.snapshot.run_id
        script = [ChatMessage.from_assistant(tool_calls=[ToolCall("lookup", {"name": "x"}, id="l1")]), "ok"]
        Agent(chat_generator=ScriptedChatGenerator(script), tools=[lookup], snapshot_store=self.store).run(
            [ChatMessage.from_user("Look x up.")]
        )
        self.done = next(r.run_id for r in self.store.runs() if r.run_id != self.waiting)
        self.agent = paying_agent(self.store, tmp, position=1)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    PAID.clear()
    made = Runs(tmp_path)
    yield made
    made.store.close()


@pytest.fixture
def make_client() -> Iterator[Any]:
    """Makes clients of an app; closes them after the test."""
    made: list[ASGIClient] = []

    def make(app: Any) -> ASGIClient:
        made.append(ASGIClient(app))
        return made[-1]

    yield make
    for c in made:
        c.close()


def csrf_and_seq(page: str) -> dict[str, str]:
    import re

    found = dict(re.findall(r"name='(csrf|seq)' value='([^']*)'", page))
    assert set(found) == {"csrf", "seq"}, page
    return found


def test_the_runs_list_and_its_filter(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    listing = client.get("/").text
    assert runs.waiting in listing and runs.done in listing
    assert "waiting for approval" in listing and "<td class='status'>done</td>" in listing
    assert "<td>text</td>" in listing, "a finished run's exit reason"
    done_only = client.get("/", params={"status": "done"}).text
    assert runs.done in done_only and runs.waiting not in done_only


def test_a_run_page_escapes_what_the_run_holds(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    page = client.get(f"/runs/{runs.done}").text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "<h2>Transitions</h2>" in page and "TOOL_RUN" in page
    assert f"/runs/{runs.done}/snapshots/0" in page
    snapshot = client.get(f"/runs/{runs.done}/snapshots/0").json()
    assert snapshot["run_id"] == runs.done and snapshot["seq"] == 0
    assert client.get("/runs/nope").status_code == 404


def test_decisions_that_do_not_fit_change_nothing(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    page = client.get(f"/runs/{runs.waiting}").text
    assert "Waiting for your decision" in page and "Send a payment." in page
    form = csrf_and_seq(page)
    head = runs.store.latest(runs.waiting).seq

    def post(**fields: str) -> Any:
        return client.post(f"/runs/{runs.waiting}/decide", data={**form, **fields}, follow_redirects=False)

    forged = client.post(f"/runs/{runs.waiting}/decide", data={"seq": form["seq"]}, follow_redirects=False)
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert post(seq="0").status_code == 409
    bad_json = post(**{"action:p2": "modify", "params:p2": "{not json"})
    assert bad_json.status_code == 400 and "are not JSON" in bad_json.text
    bad_args = post(**{"action:p2": "modify", "params:p2": '{"to": "bob", "amount": "lots"}'})
    assert bad_args.status_code == 400 and "Invalid arguments for tool &#x27;pay&#x27;" in bad_args.text
    assert PAID == [] and runs.store.latest(runs.waiting).seq == head, "nothing ran, the run did not move"


def test_a_decision_resumes_the_run_once(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    form = csrf_and_seq(client.get(f"/runs/{runs.waiting}").text)
    decided = client.post(
        f"/runs/{runs.waiting}/decide",
        data={**form, "action:p1": "approve", "action:p2": "modify", "params:p2": '{"to": "bob", "amount": 90}'},
        follow_redirects=False,
    )
    assert decided.status_code == 303 and decided.headers["location"] == f"/runs/{runs.waiting}"
    assert PAID == ["30 to ann", "90 to bob"]
    page = client.get(f"/runs/{runs.waiting}").text
    assert "<p class='status' id='status'>done</p>" in page and "Done paying." in page
    again = client.post(f"/runs/{runs.waiting}/decide", data={**form, "action:p2": "reject"}, follow_redirects=False)
    assert again.status_code == 409 and "Nothing was changed" in again.text
    assert PAID == ["30 to ann", "90 to bob"], "the second decision ran nothing"


def test_a_token_guards_every_request(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent, token="s3cret"))
    assert client.get("/").status_code == 401
    assert client.get("/", params={"token": "wrong"}).status_code == 401
    assert client.get("/", params={"token": "s3cret"}).status_code == 200
    assert client.get(f"/runs/{runs.done}").status_code == 200, "the cookie carries the token from then on"
    bearer = make_client(create_app(runs.store, runs.agent, token="s3cret"))
    assert bearer.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_serve_refuses_other_machines_without_a_token(tmp_path: Path) -> None:
    SQLiteSnapshotStore(tmp_path / "runs.db").close()
    done = subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", "serve", "--store", str(tmp_path / "runs.db"), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "AGENTFSM_TOKEN"},
    )
    assert done.returncode == 1 and "give it a --token" in done.stderr


# -- a real browser ---------------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def needs_browser() -> None:
    """Fail under CI, skip elsewhere, when Chromium or Playwright is missing (``make test`` installs both)."""
    import importlib.util

    missing = "Chromium" if CHROMIUM is None else "playwright" if importlib.util.find_spec("playwright") is None else ""
    if missing:
        message = f"{missing} is not installed (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must run the browser test")
        pytest.skip(message)


@pytest.fixture
def served(runs: Runs) -> Iterator[str]:
    with review_page.serving(create_app(runs.store, runs.agent)) as url:
        yield url


def test_a_reviewer_approves_one_call_and_rejects_another_in_a_browser(runs: Runs, served: str, tmp_path: Path) -> None:
    needs_browser()
    from playwright.sync_api import sync_playwright

    artifacts = Path(os.environ.get("AGENTFSM_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=review_page.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(served)
            page.get_by_role("link", name=runs.waiting).click()
            page.wait_for_selector("#decide")
            page.screenshot(path=str(artifacts / "review-waiting.png"), full_page=True)
            assert page.locator("#status").inner_text() == "waiting for approval"
            # Arguments that break the tool's schema are caught in the page, before anything is sent.
            page.check("input[name='action:p2'][value='modify']")
            page.fill("textarea[name='params:p2']", '{"to": "bob", "amount": "lots"}')
            page.click("#decide")
            problem = page.locator("[data-call='p2'] .problem")
            assert problem.inner_text() == '"amount" must be of type integer.' and PAID == []
            page.check("input[name='action:p2'][value='reject']")
            page.fill("input[name='feedback:p2']", "over the 100 EUR limit")
            page.click("#decide")
            page.wait_for_selector("#status:has-text('done')")
            page.screenshot(path=str(artifacts / "review-done.png"), full_page=True)
            text = page.inner_text("body")
        finally:
            browser.close()
    assert PAID == ["30 to ann"], "the approved call ran once, the rejected one never"
    assert "Done paying." in text and "over the 100 EUR limit" in page_source(runs)


def page_source(runs: Runs) -> str:
    """The finished run's conversation, as stored."""
    return str(runs.store.latest(runs.waiting).messages)


def test_serve_runs_the_page(runs: Runs, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = str(tmp_path / "runs.db")
    server = subprocess.Popen(
        [sys.executable, "-m", "agentfsm.cli", "serve", "--store", db, "--port", str(port), "--token", "t0k"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, listing = time.monotonic() + 30, None
        while listing is None and time.monotonic() < deadline:
            try:
                listing = httpx.get(f"http://127.0.0.1:{port}/", params={"token": "t0k"})
            except httpx.ConnectError:
                time.sleep(0.1)
        assert listing is not None and listing.status_code == 200 and runs.waiting in listing.text
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 401
    finally:
        server.terminate()
        _, err = server.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}/?token=t0k" in err


def test_the_readme_screenshot_is_made_by_the_same_page(tmp_path: Path) -> None:
    """``make diagrams`` photographs the page with diagrams/review_page.py: it still runs, and the README shows its picture."""
    needs_browser()
    shot = tmp_path / "review-page.png"
    review_page.screenshot(shot)
    assert shot.read_bytes().startswith(b"\x89PNG")
    assert (ROOT / "diagrams" / "review-page.png").read_bytes().startswith(b"\x89PNG")
    assert (
        "![A run waiting for approval on the review page](diagrams/review-page.png)" in (ROOT / "README.md").read_text()
    )


def test_a_running_run_is_shown_moving(runs: Runs, make_client: Any) -> None:

    runs.store.claim(runs.waiting, runs.store.latest(runs.waiting).seq)  # another process runs it now
    client = make_client(create_app(runs.store, runs.agent))
    page = client.get(f"/runs/{runs.waiting}").text
    assert "<p class='status' id='status'>running</p>" in page and "http-equiv='refresh'" in page
    assert "http-equiv='refresh'" not in client.get(f"/runs/{runs.done}").text
