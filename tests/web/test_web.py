"""The review page: handler tests with Starlette's test client, and a real browser (headless Chromium)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.errors import ConfigurationError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from agentfsm.pauses import RunStatus
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.web import MAX_FORM_BYTES, SESSION_COOKIE, create_app

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "diagrams"))
import review_page  # noqa: E402 - the repository's screenshot script: its local server and Chromium settings

from tests.helpers import wait_until  # noqa: E402

PAID: list[str] = []
#: Cleared, a payment waits for it: the run stays in TOOL_RUN while a test looks at it.
BANK_OPEN = threading.Event()
BANK_OPEN.set()


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment."""
    if not BANK_OPEN.wait(timeout=60):
        raise TimeoutError("the test never opened the bank")
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
        # As a browser on the page sends them: for the page's host, forms posted from its origin.
        self._client = httpx.AsyncClient(
            transport=transport, base_url="http://localhost", headers={"Origin": "http://localhost"}
        )

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._runner.run(self._client.get(url, **kwargs))

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._runner.run(self._client.post(url, **kwargs))

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._runner.run(self._client.request(method, url, **kwargs))

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

    def settled(self) -> None:
        settled(self.store, self.waiting)


def settled(store: SQLiteSnapshotStore, run_id: str) -> None:
    """Wait for a run a decision resumed to end or pause: it goes on after the page answered."""

    def status() -> str:
        return next(str(r.status) for r in store.runs() if r.run_id == run_id)

    wait_until(lambda: status() != "active", f"run {run_id} to end or pause", seconds=30)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    PAID.clear()
    made = Runs(tmp_path)
    yield made
    made.settled()
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
    assert "<td class='status waiting'>waiting for approval</td>" in listing
    assert "<td class='status done'>done</td>" in listing
    assert "<td>lookup</td><td>text</td>" in listing, "the tools it called and a finished run's exit reason"
    done_only = client.get("/", params={"status": "done"}).text
    assert runs.done in done_only and runs.waiting not in done_only


def test_a_run_page_escapes_what_the_run_holds(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    page = client.get(f"/runs/{runs.done}").text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "<h2>Timeline</h2>" in page and "<td>TOOL_RUN</td>" in page
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
    assert post(seq="0").status_code == 403, "the token is bound to the snapshot the form showed"
    bad_json = post(**{"action:p1": "approve", "action:p2": "modify", "params:p2": "{not json"})
    assert bad_json.status_code == 400 and "are not JSON" in bad_json.text
    bad_args = post(**{"action:p1": "approve", "action:p2": "modify", "params:p2": '{"to": "bob", "amount": "lots"}'})
    assert bad_args.status_code == 400 and "Invalid arguments for tool &#x27;pay&#x27;" in bad_args.text
    unknown = post(**{"action:p1": "approve", "action:p2": "pay twice"})
    assert unknown.status_code == 400 and "Unknown action" in unknown.text
    assert PAID == [] and runs.store.latest(runs.waiting).seq == head, "nothing ran, the run did not move"


def test_a_decision_returns_at_once_and_resumes_the_run_once(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    form = csrf_and_seq(client.get(f"/runs/{runs.waiting}").text)
    BANK_OPEN.clear()  # the payments wait: the answer to the form cannot wait for them
    try:
        decided = client.post(
            f"/runs/{runs.waiting}/decide",
            data={**form, "action:p1": "approve", "action:p2": "modify", "params:p2": '{"to": "bob", "amount": 90}'},
            follow_redirects=False,
        )
        assert decided.status_code == 303 and decided.headers["location"] == f"/runs/{runs.waiting}"
        going = client.get(f"/runs/{runs.waiting}").text
        assert "<p class='status' id='status'>running</p>" in going and PAID == [], "decided; the calls wait"
        late = client.post(f"/runs/{runs.waiting}/decide", data={**form, "action:p1": "reject", "action:p2": "reject"})
        assert late.status_code == 409 and "Nothing was changed" in late.text, "taken, while the run goes on"
    finally:
        BANK_OPEN.set()
    runs.settled()
    assert sorted(PAID) == ["30 to ann", "90 to bob"], "each approved call ran once (in parallel: in any order)"
    page = client.get(f"/runs/{runs.waiting}").text
    assert "<p class='status' id='status'>done</p>" in page and "Done paying." in page
    again = client.post(
        f"/runs/{runs.waiting}/decide",
        data={**form, "action:p1": "approve", "action:p2": "reject"},
        follow_redirects=False,
    )
    assert again.status_code == 409 and "Nothing was changed" in again.text
    assert sorted(PAID) == ["30 to ann", "90 to bob"], "the second decision ran nothing"


def test_a_resume_of_your_own_that_pauses_again_shows_the_run_not_an_error(runs: Runs, make_client: Any) -> None:
    def resume_and_pause(snapshot: Any, decisions: list[Any]) -> None:
        runs.agent.run(snapshot=snapshot, decisions=decisions[:1])  # p2 is left: the strategy pauses again

    client = make_client(create_app(runs.store, runs.agent, resume=resume_and_pause))
    form = csrf_and_seq(client.get(f"/runs/{runs.waiting}").text)
    decided = client.post(
        f"/runs/{runs.waiting}/decide",
        data={**form, "action:p1": "approve", "action:p2": "reject"},
        follow_redirects=False,
    )
    assert decided.status_code == 303 and decided.headers["location"] == f"/runs/{runs.waiting}"
    assert PAID == [], "the calls run once both are decided"
    assert "Waiting for your decision" in client.get(f"/runs/{runs.waiting}").text


def test_a_run_decided_on_the_page_ends_in_done_with_its_last_edge(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    form = csrf_and_seq(client.get(f"/runs/{runs.waiting}").text)
    decided = client.post(
        f"/runs/{runs.waiting}/decide",
        data={**form, "action:p1": "approve", "action:p2": "reject", "feedback:p2": "too much"},
        follow_redirects=False,
    )
    assert decided.status_code == 303
    runs.settled()
    page = client.get(f"/runs/{runs.waiting}").text
    assert "<p>phase DONE, step 2, exit reason text</p>" in page
    assert "<td>EXIT_CHECK</td><td>&rarr;</td><td>DONE</td><td><code>exit</code></td>" in page, "its last edge"
    assert "Ended in DONE after EXIT_CHECK, step 2: text" in page
    assert "ended here, step 2" in page, "the diagram ends in DONE"
    listing = client.get("/").text
    assert "<td class='status done'>done</td><td>DONE</td><td class='num'>2</td><td>pay</td><td>text</td>" in listing


def test_no_decision_is_chosen_beforehand(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    page = client.get(f"/runs/{runs.waiting}").text
    assert page.count("type='radio'") == 6 and "checked" not in page
    form = csrf_and_seq(page)
    for fields in ({}, {"action:p2": "reject"}, {"action:p1": "", "action:p2": "reject"}):
        refused = client.post(f"/runs/{runs.waiting}/decide", data={**form, **fields}, follow_redirects=False)
        assert refused.status_code == 400 and "No decision for p1" in refused.text
    chosen = client.post(
        f"/runs/{runs.waiting}/decide",
        data={**form, "action:p1": "reject", "action:p2": "reject"},
        follow_redirects=False,
    )
    assert chosen.status_code == 303
    runs.settled()
    assert PAID == [], "both rejected, as chosen"


def test_csrf_tokens_are_per_session_and_per_decision(runs: Runs, make_client: Any) -> None:
    app = create_app(runs.store, runs.agent)
    ann, bob = make_client(app), make_client(app)
    ann_page, bob_page = ann.get(f"/runs/{runs.waiting}"), bob.get(f"/runs/{runs.waiting}")
    cookie = ann_page.headers["set-cookie"]
    assert (
        cookie.startswith(f"{SESSION_COOKIE}=") and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    )
    assert ann_page.cookies[SESSION_COOKIE] != bob_page.cookies[SESSION_COOKIE]
    assert "set-cookie" not in ann.get(f"/runs/{runs.waiting}").headers, "the session goes on"
    ann_form, bob_form = csrf_and_seq(ann_page.text), csrf_and_seq(bob_page.text)
    assert ann_form["csrf"] != bob_form["csrf"] and ann_form["seq"] == bob_form["seq"]
    choice = {"action:p1": "approve", "action:p2": "reject"}

    def decide(client: ASGIClient, form: dict[str, str]) -> httpx.Response:
        return client.post(f"/runs/{runs.waiting}/decide", data={**form, **choice}, follow_redirects=False)

    assert decide(bob, ann_form).status_code == 403, "ann's token in bob's session"
    cookieless = make_client(app)
    assert decide(cookieless, ann_form).status_code == 403, "ann's token without her session"
    assert PAID == []
    assert decide(ann, ann_form).status_code == 303
    runs.settled()
    assert PAID == ["30 to ann"]
    replayed = decide(ann, ann_form)
    assert replayed.status_code == 409 and "Nothing was changed" in replayed.text
    assert decide(bob, bob_form).status_code == 409, "the decision was taken: bob's form is for a pause that is over"
    assert PAID == ["30 to ann"]


def test_a_body_that_is_not_the_pages_form_is_not_read(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    form = {**csrf_and_seq(client.get(f"/runs/{runs.waiting}").text), "action:p1": "reject", "action:p2": "reject"}
    decide = f"/runs/{runs.waiting}/decide"
    oversized = client.post(decide, data={**form, "feedback:p1": "f" * MAX_FORM_BYTES})
    assert oversized.status_code == 413
    multipart = client.post(decide, data=form, files={"upload": b"x"})
    assert multipart.status_code == 415

    async def chunks() -> AsyncIterator[bytes]:
        yield b"csrf=x"

    streamed = client.post(decide, content=chunks(), headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert streamed.status_code == 411, "no Content-Length: the length is not known before reading"
    assert PAID == [] and client.post(decide, data=form, follow_redirects=False).status_code == 303


def test_every_response_forbids_framing_and_foreign_scripts(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent))
    responses = [
        client.get("/"),
        client.get(f"/runs/{runs.waiting}"),
        client.get(f"/runs/{runs.done}/snapshots/0"),
        client.get("/review.js"),
        client.get("/nowhere"),
        client.get(f"/runs/{runs.waiting}/decide"),
        client.post(f"/runs/{runs.waiting}/decide", data={"csrf": "guessed"}),
        client.get("/", headers={"Host": "evil.example"}),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 404, 405, 403, 400]
    for response in responses:
        assert response.headers["x-frame-options"] == "DENY"
        policy = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
    page = responses[1].text
    assert "<script src='/review.js'></script>" in page and "<link rel='stylesheet' href='/review.css'>" in page
    assert "<script>" not in page and "<style>" not in page and " style=" not in page, "nothing inline"
    assert client.get("/review.css").headers["content-type"].startswith("text/css")


def test_a_token_guards_every_request(runs: Runs, make_client: Any) -> None:
    client = make_client(create_app(runs.store, runs.agent, token="s3cret"))
    assert client.get("/").status_code == 401
    assert client.get("/", params={"token": "wrong"}).status_code == 401
    assert client.get("/", params={"token": "s3cret"}).status_code == 200
    assert client.get(f"/runs/{runs.done}").status_code == 200, "the cookie carries the token from then on"
    bearer = make_client(create_app(runs.store, runs.agent, token="s3cret"))
    assert bearer.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_both_cookies_are_secure_under_https_only(runs: Runs) -> None:
    app = create_app(runs.store, runs.agent, token="s3cret")

    async def first_page(base: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base, headers={"Origin": base}) as client:
            return await client.get("/", params={"token": "s3cret"})

    for base, secure in (("https://localhost", True), ("http://localhost", False)):
        cookies = asyncio.run(first_page(base)).headers.get_list("set-cookie")
        assert len(cookies) == 2 and all(("; secure" in c.lower()) is secure for c in cookies), cookies


# -- a page on another site, its name rebound to 127.0.0.1 ------------------------------------------------


def test_a_rebound_page_reads_nothing_and_decides_nothing(runs: Runs) -> None:
    """The attack: evil.example resolves to 127.0.0.1 for the victim's browser, and its page fetches and posts there."""
    head = runs.store.latest(runs.waiting).seq
    with review_page.serving(create_app(runs.store, runs.agent)) as url, httpx.Client(base_url=url) as browser:
        port = url.rsplit(":", 1)[1]
        evil = f"evil.example:{port}"
        read = browser.get(f"/runs/{runs.waiting}", headers={"Host": evil})
        assert read.status_code == 400 and "does not answer to the host 'evil.example:" in read.text
        assert "csrf" not in read.text and "set-cookie" not in read.headers, "no form, no session"
        posted = browser.post(
            f"/runs/{runs.waiting}/decide",
            headers={"Host": evil, "Origin": f"http://{evil}"},
            data={"action:p1": "approve", "action:p2": "approve"},
        )
        assert posted.status_code == 400
        # The victim's own session on the page: a form from another origin in that browser is refused all the same.
        form = csrf_and_seq(browser.get(f"/runs/{runs.waiting}").text)
        choice = {**form, "action:p1": "approve", "action:p2": "approve"}
        for headers in (
            {"Origin": f"http://{evil}"},
            {"Origin": "null"},
            {"Referer": f"http://{evil}/attack"},
            {"Origin": f"http://localhost:{int(port) + 1}"},
            {},
        ):
            refused = browser.post(f"/runs/{runs.waiting}/decide", headers=headers, data=choice)
            assert refused.status_code == 403 and "Nothing was changed" in refused.text, headers
        assert PAID == [] and runs.store.latest(runs.waiting).seq == head, "no tool ran, the run did not move"
        # The same form from the page itself goes through, by Origin or by Referer.
        sent = browser.post(
            f"/runs/{runs.waiting}/decide", headers={"Referer": f"{url}/runs/{runs.waiting}"}, data=choice
        )
        assert sent.status_code == 303
        runs.settled()
        assert PAID == ["30 to ann", "9000 to bob"]


def test_allowed_hosts_name_a_proxy(runs: Runs) -> None:
    app = create_app(runs.store, runs.agent, allowed_hosts=["Review.Example.com", "::1"])
    with review_page.serving(app) as url, httpx.Client(base_url=url) as browser:
        assert browser.get("/", headers={"Host": "review.example.com"}).status_code == 200
        assert browser.get("/", headers={"Host": "review.example.com.evil.example"}).status_code == 400
        assert browser.get("/", headers={"Host": "[::1]:8443"}).status_code == 200
        # A proxy that passes the request on as 127.0.0.1: the form comes from the proxy's origin.
        form = csrf_and_seq(browser.get(f"/runs/{runs.waiting}").text)
        choice = {**form, "action:p1": "reject", "action:p2": "reject"}
        sent = browser.post(
            f"/runs/{runs.waiting}/decide", headers={"Origin": "https://review.example.com"}, data=choice
        )
        assert sent.status_code == 303
    for wrong in ("https://review.example.com", "review.example.com:443", "", "*"):
        with pytest.raises(ConfigurationError, match="is not a host name"):
            create_app(runs.store, runs.agent, allowed_hosts=[wrong])


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
    # Both things it lacks, in one message.
    assert done.returncode == 1 and "give it a --token" in done.stderr and "--allowed-host NAME" in done.stderr


def test_serve_on_every_address_needs_the_names_it_answers_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm.cli import main

    SQLiteSnapshotStore(tmp_path / "runs.db").close()
    serve = ["serve", "--store", str(tmp_path / "runs.db"), "--token", "t0k"]
    assert main([*serve, "--host", "0.0.0.0"]) == 1
    assert "--allowed-host NAME" in capsys.readouterr().err
    assert main([*serve, "--host", "127.0.0.1", "--allowed-host", "http://review.example.com"]) == 1
    assert "'http://review.example.com' is not a host name" in capsys.readouterr().err


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
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))
            page.goto(served)
            page.get_by_role("link", name="Pay ann 30 and bob 9000.").click()
            page.wait_for_selector("#decide")
            page.screenshot(path=str(artifacts / "review-waiting.png"), full_page=True)
            assert page.locator("#status").inner_text() == "waiting for approval"
            # Nothing is chosen beforehand: the page asks for a choice for every call.
            page.click("#decide")
            for call in ("p1", "p2"):
                assert page.locator(f"[data-call='{call}'] .problem").inner_text() == (
                    "Choose approve, reject or modify for this call."
                )
            page.check("input[name='action:p1'][value='approve']")
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
            styled = page.evaluate("getComputedStyle(document.body).fontFamily")
        finally:
            browser.close()
    assert "system-ui" in styled, "the style sheet loaded under the page's security policy"
    assert not [m for m in console if "Content Security Policy" in m], console
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
        [
            *(sys.executable, "-m", "agentfsm.cli", "serve", "--store", db, "--port", str(port), "--token", "t0k"),
            *("--allowed-host", "review.example.com"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, listing = time.monotonic() + 120, None  # a busy machine starts a process slowly
        while listing is None and time.monotonic() < deadline and server.poll() is None:
            try:
                listing = httpx.get(f"http://127.0.0.1:{port}/", params={"token": "t0k"})
            except httpx.ConnectError:
                time.sleep(0.1)
        assert listing is not None, f"agentfsm serve did not answer within 120 s (exit code {server.poll()})"
        assert listing.status_code == 200 and runs.waiting in listing.text
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 401
        proxied = {"Host": "review.example.com", "Authorization": "Bearer t0k"}
        assert httpx.get(f"http://127.0.0.1:{port}/", headers=proxied).status_code == 200
        rebound = {"Host": "evil.example", "Authorization": "Bearer t0k"}
        assert httpx.get(f"http://127.0.0.1:{port}/", headers=rebound).status_code == 400
    finally:
        server.terminate()
        _, err = server.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}/?token=t0k" in err


def test_the_docs_screenshots_are_made_by_the_same_page(tmp_path: Path) -> None:
    """``make diagrams`` photographs the page with diagrams/review_page.py: it still runs, and the docs show its pictures."""
    needs_browser()
    review_page.screenshot(tmp_path)
    page = (ROOT / "docs" / "review-page.md").read_text()
    for name in ("review-page.png", "review-run.png", "review-list.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG"), name
        assert (ROOT / "diagrams" / name).read_bytes().startswith(b"\x89PNG"), f"{name} is committed"
        assert f"](diagrams/{name})" in page, f"docs/review-page.md shows {name}"
    assert (
        "![A run waiting for approval on the review page](diagrams/review-page.png)" in (ROOT / "README.md").read_text()
    )


def test_a_running_run_is_shown_moving(runs: Runs, make_client: Any) -> None:

    runs.store.claim(runs.waiting, runs.store.latest(runs.waiting).seq)  # another process runs it now
    client = make_client(create_app(runs.store, runs.agent))
    page = client.get(f"/runs/{runs.waiting}").text
    assert "<p class='status' id='status'>running</p>" in page and "http-equiv='refresh'" in page
    assert "http-equiv='refresh'" not in client.get(f"/runs/{runs.done}").text
    runs.store.release(runs.waiting, RunStatus.PAUSED)  # the other process lets it go


# -- fuzzing the page's requests ------------------------------------------------------------------------------

#: Text as requests carry it, with what breaks naive code: control and format characters, other
#: scripts, astral characters, markup, path tricks (no lone surrogates: no request can carry one).
odd_text = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
    st.sampled_from(
        ["", "\u202e\u0000", "\ufeff\U0001d552\u0301", "<script>", "../../etc/passwd", "%00%ff", "null", "9" * 5000]
    ),
)
#: Host values the page answers to, and others (a rebound name, look-alikes, malformed ones).
good_hosts = st.sampled_from(["localhost", "LOCALHOST:8765", "127.0.0.1:1", "[::1]", "[::1]:443"])
bad_hosts = st.one_of(
    st.sampled_from(["evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "[::1", "localhost:x", "::1", ""]),
    odd_text.map(lambda text: f"x{text}"),
)
#: A path segment as a client sends it: numbers too big for a store, percent-encoded text, also NUL, bytes that are
#: not UTF-8, a slash.
segments = st.one_of(
    odd_text.map(lambda text: quote(text, safe="")),
    st.integers(-1, 2**100).map(str),
    st.just("9" * 5000),
    st.sampled_from(["%00", "%ff%fe", "%c0%af", "%2e%2e%2f", "%2F", "%E2%80%AE", "%25"]),
)
#: Paths to the page's routes and beside them.
paths = st.tuples(
    st.sampled_from(
        ["/runs/{}", "/runs/{}/snapshots/{}", "/runs/{}/decide", "/{}", "/{}/{}", "/runs/{}/snapshots/{}/"]
    ),
    st.lists(
        st.one_of(segments, st.sampled_from(["{waiting}", "{done}", "runs", "review.js"])), min_size=2, max_size=2
    ),
).map(lambda p: p[0].format(*p[1]))
header_values = st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"").replace(b"\0", b""))
headers = st.dictionaries(
    st.sampled_from(["origin", "referer", "cookie", "content-type", "authorization", "accept", "x-forwarded-host"]),
    header_values,
    max_size=4,
)


def secured(response: httpx.Response) -> bool:
    return (
        response.headers.get("x-frame-options") == "DENY"
        and "frame-ancestors 'none'" in response.headers.get("content-security-policy", "")
        and response.headers.get("x-content-type-options") == "nosniff"
    )


class Fuzzed:
    """A client of a page whose decisions are recorded, not applied (the run stays waiting), and its form's fields."""

    def __init__(self, runs: Runs, make_client: Any) -> None:
        self.runs, self.recorded = runs, list[list[Any]]()
        app = create_app(runs.store, runs.agent, resume=lambda snapshot, decisions: self.recorded.append(decisions))
        self.client: ASGIClient = make_client(app)
        self.form = csrf_and_seq(self.client.get(f"/runs/{runs.waiting}").text)  # good for every example
        self.locked: ASGIClient = make_client(create_app(runs.store, runs.agent, token="s3cret"))


@pytest.fixture
def fuzzed(runs: Runs, make_client: Any) -> Fuzzed:
    return Fuzzed(runs, make_client)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"]),
    path=paths,
    query=st.dictionaries(odd_text, odd_text, max_size=3),
    host=good_hosts,
    extra=headers,
    body=st.one_of(st.binary(max_size=2000), st.dictionaries(odd_text, odd_text, max_size=5)),
    locked=st.booleans(),
)
@example(
    method="GET",
    path="/runs/{done}/snapshots/" + "9" * 5000,
    query={},
    host="localhost",
    extra={},
    body=b"",
    locked=False,
)
@example(method="GET", path="/runs/%00", query={"status": "\u202e"}, host="localhost", extra={}, body=b"", locked=False)
@example(
    method="POST", path="/runs/{waiting}/decide", query={}, host="localhost", extra={}, body={"csrf": ""}, locked=False
)
def test_any_request_for_the_page_gets_an_answer_never_a_server_error(
    fuzzed: Fuzzed,
    method: str,
    path: str,
    query: dict[str, str],
    host: str,
    extra: dict[str, bytes],
    body: bytes | dict[str, str],
    locked: bool,
) -> None:
    """Any request: an answer with the security headers, never a server error; one that cannot change anything, a 4xx.

    ``locked``: the page has an access token, which no request here carries.
    """
    runs, client = fuzzed.runs, fuzzed.locked if locked else fuzzed.client
    content = {"content": body} if isinstance(body, bytes) else {"data": body}
    url = path.format(waiting=runs.waiting, done=runs.done)
    response = client.request(method, url, params=query, headers={**extra, "Host": host}, **content)
    assert response.status_code < 500 and secured(response), (response.status_code, response.text[:300])
    if method not in ("GET", "HEAD") or locked:
        assert 400 <= response.status_code < 500, "no valid CSRF token, or no access token: nothing to see or change"
    assert fuzzed.recorded == [] and PAID == []


#: Where a state-changing request may claim to come from, other than the page: another site, a look-alike, an
#: opaque origin, another port, not a URL.
foreign_origins = st.one_of(
    st.sampled_from(["http://evil.example", "null", "http://localhost:1", "https://localhost.evil.example", "x"]),
    st.sampled_from(["http://localhost@evil.example", "http://[::1", "ftp://localhost", "file://", ""]),
    odd_text,
).map(lambda text: text.encode().replace(b"\r", b"").replace(b"\n", b"").replace(b"\0", b""))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "BREW"]),
    path=st.sampled_from(["/", "/review.js", "/runs/{waiting}", "/runs/{waiting}/decide", "/nowhere"]),
    host=st.one_of(st.none(), bad_hosts),
    origin=st.tuples(st.sampled_from(["origin", "referer", "neither"]), foreign_origins),
    choices=st.sampled_from(["approve", "reject"]),
)
def test_a_request_for_another_host_or_from_another_origin_is_refused(
    fuzzed: Fuzzed, method: str, path: str, host: str | None, origin: tuple[str, bytes], choices: str
) -> None:
    """A valid session, token and decision, sent for another host or from another origin: nothing happens."""
    form = {**fuzzed.form, "action:p1": choices, "action:p2": choices}
    where, claimed = origin
    headers = {"Origin": claimed if where == "origin" else b""}  # in place of the client's own
    if where == "referer":
        headers["Referer"] = claimed
    if host is not None:
        headers["Host"] = host.encode()
    url = path.format(waiting=fuzzed.runs.waiting)
    response = fuzzed.client.request(method, url, headers=headers, data=form)
    assert secured(response)
    if host is not None:
        assert response.status_code == 400
    elif method not in ("GET", "HEAD"):
        assert response.status_code == 403 and "Nothing was changed" in response.text
    assert fuzzed.recorded == [] and PAID == []


valid_params = st.fixed_dictionaries(
    {"to": st.text(st.characters(exclude_categories=["Cs"])), "amount": st.integers(-(2**63), 2**63 - 1)}
).map(json.dumps)
invalid_params = st.one_of(
    odd_text.filter(lambda text: not text.strip().startswith(("{", "[", '"')) and not text.strip()[:1].isdigit()),
    st.sampled_from(["[]", "3", '"x"', "{}", '{"to": 1, "amount": 2}', '{"to": "bob", "amount": "lots"}']),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    actions=st.tuples(*[st.one_of(st.none(), st.sampled_from(["approve", "reject", "modify"]), odd_text)] * 2),
    params=st.tuples(*[st.one_of(valid_params.map(lambda p: (p, True)), invalid_params.map(lambda p: (p, False)))] * 2),
    feedback=st.tuples(odd_text, st.sampled_from([0, 10, 3000]).map(lambda n: "f" * n)),
    extra=st.dictionaries(odd_text, odd_text, max_size=4),
)
def test_a_decision_form_is_taken_exactly_when_every_call_has_a_valid_choice(
    fuzzed: Fuzzed,
    actions: tuple[str | None, str | None],
    params: tuple[tuple[str, bool], tuple[str, bool]],
    feedback: tuple[str, str],
    extra: dict[str, str],
) -> None:
    runs, client, recorded = fuzzed.runs, fuzzed.client, fuzzed.recorded
    recorded.clear()
    form = {**extra, **fuzzed.form}
    for call, action, (arguments, _) in zip(("p1", "p2"), actions, params, strict=True):
        form |= {f"params:{call}": arguments, f"feedback:{call}": feedback[0] + feedback[1]}
        if action is not None:
            form[f"action:{call}"] = action
    response = client.post(f"/runs/{runs.waiting}/decide", data=form, follow_redirects=False)
    valid = all(
        action in ("approve", "reject") or (action == "modify" and fits)
        for action, (_, fits) in zip(actions, params, strict=True)
    )
    assert secured(response)
    if valid:
        assert response.status_code == 303, response.text[:300]
        original = {"p1": {"to": "ann", "amount": 30}, "p2": {"to": "bob", "amount": 9000}}
        expected = [
            (call, action != "reject", json.loads(arguments) if action == "modify" else original[call])
            for call, action, (arguments, _) in zip(("p1", "p2"), actions, params, strict=True)
        ]
        taken = [(d.tool_call_id, d.execute, d.final_tool_params) for d in recorded[0]]
        assert taken == [(call, run, arguments if run else None) for call, run, arguments in expected]
    else:
        assert response.status_code == 400 and "Nothing was changed" in response.text and recorded == []
    assert PAID == []


def test_a_call_in_doubt_after_a_crash_is_decided_on_the_page(tmp_path: Path, make_client: Any) -> None:
    from agentfsm import Breakpoint, BreakpointException, Phase

    PAID.clear()
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    script = [ChatMessage.from_assistant(tool_calls=[ToolCall("pay", {"to": "ann", "amount": 30}, id="p1")]), "Paid."]

    def agent(position: int = 0) -> Agent:
        return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=[pay], snapshot_store=store)

    with pytest.raises(BreakpointException) as paused:
        agent().run([ChatMessage.from_user("Pay ann 30.")], break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    # As a crash while the payment ran leaves it: started, its result never recorded.
    crashed = paused.value.snapshot.model_copy(update={"break_point": None, "started_tool_calls": ["p1"]})
    with pytest.raises(BreakpointException):
        agent(1).run(snapshot=crashed)
    run_id = crashed.run_id
    assert PAID == []

    client = make_client(create_app(store, agent(1)))
    page = client.get(f"/runs/{run_id}").text
    assert "Waiting for your decision" in page and "data-call='p1'" in page
    decided = client.post(
        f"/runs/{run_id}/decide",
        data={**csrf_and_seq(page), "action:p1": "reject", "feedback:p1": "paid: receipt 17"},
        follow_redirects=False,
    )
    assert decided.status_code == 303
    settled(store, run_id)
    assert PAID == [], "the decision gave the call's result: it did not run again"
    done = client.get(f"/runs/{run_id}").text
    assert "<p class='status' id='status'>done</p>" in done and "receipt 17" in done
    store.close()


def test_the_page_lists_threads_and_shows_one_turn_by_turn(tmp_path: Path, make_client: Any) -> None:
    store = SQLiteSnapshotStore(tmp_path / "threads.db")
    agent = Agent(chat_generator=ScriptedChatGenerator(["Hello <b>you</b>.", "Bye."]), snapshot_store=store)
    agent.run([ChatMessage.from_user("Hi!")], thread="chat <1>")
    agent.run([ChatMessage.from_user("Bye!")], thread="chat <1>")
    client = make_client(create_app(store, agent))
    assert "<a href='/threads'>Threads</a>" in client.get("/").text
    listing = client.get("/threads").text
    assert f"<a href='/threads/{quote('chat <1>', safe='')}'>chat &lt;1&gt;</a></td><td>2</td><td>done</td>" in listing
    shown = client.get(f"/threads/{quote('chat <1>', safe='')}").text
    assert (
        shown.index("<h2>Turn 1</h2>") < shown.index("Hello &lt;b&gt;you&lt;/b&gt;.") < shown.index("<h2>Turn 2</h2>")
    )
    assert "Bye!" in shown and "<b>you</b>" not in shown
    missing = client.get("/threads/nope")
    assert missing.status_code == 404 and "No thread" in missing.text
