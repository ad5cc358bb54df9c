"""A run's timeline and finding runs: handler tests on the app's ASGI interface, and one real browser (headless Chromium)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, State, ToolCall, hook, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import HITLBreakpointException, ToolExecutionDecision
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.web import create_app
from agentfsm.web.finding import PER_PAGE, Query
from agentfsm.web.pages import human_duration
from tests.web.test_web import CHROMIUM, PAID, ASGIClient, needs_browser, paying_agent, review_page, settled


@tool
def lookup(name: str, deep: dict[str, list[int]] | None = None) -> str:
    """Look a name up."""
    return f"{name.upper()} <b>found</b>"


@hook
def noted(state: State) -> None:
    """A hook that does nothing but fire."""


def looking_agent(store: SQLiteSnapshotStore, replies: list[Any]) -> Agent:
    return Agent(
        chat_generator=ScriptedChatGenerator(replies),
        tools=[lookup],
        hooks={"before_llm": [noted]},
        snapshot_store=store,
    )


LOOK = ChatMessage.from_assistant(tool_calls=[ToolCall("lookup", {"name": "ann", "deep": {"a": [1, 2]}}, id="l1")])


class Store:
    """A store keeping events, with a finished run, a failed one and one waiting for approval."""

    def __init__(self, tmp: Path) -> None:
        self.store = SQLiteSnapshotStore(tmp / "runs.db", durable=True, record_events=True)
        looking_agent(self.store, [LOOK, "Ann is <i>here</i>."]).run([ChatMessage.from_user("Who is <ann>?")])
        (self.done,) = (r.run_id for r in self.store.runs())
        with pytest.raises(Exception, match="ran out of replies"):
            looking_agent(self.store, [LOOK]).run([ChatMessage.from_user("Fail on purpose.")])
        self.failed = next(r.run_id for r in self.store.runs() if r.run_id != self.done)
        with pytest.raises(HITLBreakpointException) as paused:
            paying_agent(self.store, tmp).run([ChatMessage.from_user("Pay ann 30 and bob 9000.")])
        self.waiting = paused.value.snapshot.run_id
        self.agent = paying_agent(self.store, tmp, position=1)

    def settled(self) -> None:
        settled(self.store, self.waiting)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Store]:
    PAID.clear()
    made = Store(tmp_path)
    yield made
    made.settled()
    made.store.close()


@pytest.fixture
def client(runs: Store) -> Iterator[ASGIClient]:
    made = ASGIClient(create_app(runs.store, runs.agent))
    yield made
    made.close()


def rows(listing: str) -> list[str]:
    return re.findall(r"<tr data-run='([0-9a-f]+)'>", listing)


# -- handler tests ------------------------------------------------------------------------------------------


def test_durations_read_in_human_units() -> None:
    assert [human_duration(us) for us in (840, 14934, 250_000, 2_400_000, 185e6, 7_800e6, 200_000e6)] == [
        "840 µs",
        "15 ms",
        "250 ms",
        "2.4 s",
        "3 min 5 s",
        "2 h 10 min",
        "2 d 7 h",
    ]


def test_the_list_titles_runs_and_finds_them_by_id_tool_and_text(runs: Store, client: ASGIClient) -> None:
    listing = client.get("/").text
    assert "Who is &lt;ann&gt;?</a>" in listing and "<ann>" not in listing, "titled by its first user message, escaped"
    assert re.search(r">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time></td></tr>", listing), "no microseconds"
    assert set(rows(listing)) == {runs.done, runs.failed, runs.waiting}
    assert "all <span class='count'>3</span>" in listing
    for status in ("done", "failed", "waiting for approval"):
        assert re.search(rf"data-status='{status}'[^>]*>{status} <span class='count'>1</span>", listing), status
    assert rows(client.get("/", params={"q": "BOB 9000"}).text) == [runs.waiting], "message text, any case"
    assert rows(client.get("/", params={"q": runs.failed[:12]}).text) == [runs.failed], "part of an id"
    assert set(rows(client.get("/", params={"q": "lookup"}).text)) == {runs.done, runs.failed}, "a tool name"
    searched = client.get("/", params={"q": "lookup", "status": "failed"}).text
    assert rows(searched) == [runs.failed]
    assert "data-status='done'" in searched and re.search(r"done <span class='count'>1</span>", searched), (
        "the counts are of the search, whatever the status shown"
    )
    nothing = client.get("/", params={"q": "<script>nowhere"}).text
    assert rows(nothing) == [] and "No run matches." in nothing and "&lt;script&gt;nowhere" in nothing
    assert rows(client.get("/", params={"until": "2000-01-01"}).text) == [], "changed after that day"
    assert len(rows(client.get("/", params={"since": "2000-01-01", "status": "bogus", "page": "x"}).text)) == 3


def test_the_list_sorts_and_pages(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "many.db", durable=True)
    try:
        for n in range(PER_PAGE + 5):
            replies = [LOOK, "ok"] if n == 7 else ["ok"]
            looking_agent(store, replies).run([ChatMessage.from_user(f"question {n:02d}")])
        browser = ASGIClient(create_app(store))
        first, second = browser.get("/").text, browser.get("/", params={"page": "2"}).text
        by_title = browser.get("/", params={"sort": "title"}).text
        by_steps = browser.get("/", params={"sort": "steps", "q": "question"}).text
        beyond = browser.get("/", params={"page": "99"}).text
        browser.close()
    finally:
        store.close()
    assert len(rows(first)) == PER_PAGE and len(rows(second)) == 5
    assert "page 1 of 2" in first and "rel='next' href='/?page=2'" in first and "rel='prev'" in second
    assert not set(rows(first)) & set(rows(second))
    titles = re.findall(r"<a href='/runs/[0-9a-f]+'>(question \d\d)</a>", by_title)
    assert titles == sorted(titles) and titles[0] == "question 00"
    assert re.findall(r"<a href='/runs/[0-9a-f]+'>(question \d\d)</a>", by_steps)[0] == "question 07"
    assert rows(beyond) == rows(second), "a page past the last shows the last"
    assert Query.from_params({"page": "0", "sort": "x", "since": "2026-13"}) == Query()


def test_a_run_page_shows_each_step_with_its_model_call_tools_hooks_and_state(runs: Store, client: ASGIClient) -> None:
    page = client.get(f"/runs/{runs.done}").text
    timeline = page.split("<section id='timeline'>")[1].split("</section>")[0]
    assert "Ended in DONE after EXIT_CHECK, step 2: text" in timeline
    assert timeline.index("id='step-0'") < timeline.index("id='step-1'") < timeline.index("id='step-2'")
    assert "<td>LLM_CALL</td><td>&rarr;</td><td>TOOL_PENDING</td><td><code>tool_calls</code></td>" in timeline
    assert re.search(r"<time datetime='[^']+' title='[^']+'>\d\d:\d\d:\d\d\.\d{3}</time>", timeline), "clock times"
    assert " µs</td>" in timeline or " ms</td>" in timeline
    assert "Ann is &lt;i&gt;here&lt;/i&gt;." in timeline and "<i>here" not in timeline, "the reply, escaped"
    assert "latency " in timeline, "the model's latency, from its event"
    # The tool call with its arguments and result, folded, as pretty JSON when unfolded.
    assert "<div class='entry tool' data-phases='TOOL_RUN' data-call='l1'><h4>lookup <small>l1</small>" in timeline
    assert "<pre class='json'>{\n  &quot;deep&quot;: {\n    &quot;a&quot;: [\n      1," in timeline
    assert "ANN &lt;b&gt;found&lt;/b&gt;" in timeline and "<b>found" not in page
    assert "hook noted at before_llm" in timeline, "the hook's firing, from its event"
    assert "<li class='added'>+ <details class='value'><summary>tool_call_counts" in timeline, "State: a key added"
    assert "<li class='changed'>~ step_count" in timeline, "State: a key changed"


def test_a_failed_run_shows_where_and_why(runs: Store, client: ASGIClient) -> None:
    page = client.get(f"/runs/{runs.failed}").text
    assert "<p class='ending failed' id='ending'>Ended in FAILED after LLM_CALL, step 1: ScriptExhaustedError" in page
    assert "<td>LLM_CALL</td><td>&rarr;</td><td>FAILED</td><td><code>fail</code></td>" in page
    assert "<p class='error'>failed: " in page, "the model call that failed, from its event"


def test_decisions_are_shown_with_their_verb_arguments_feedback_and_time(runs: Store, client: ASGIClient) -> None:
    waiting = client.get(f"/runs/{runs.waiting}").text
    assert "paused: waiting for a decision on p1, p2" in waiting and "not run yet" in waiting
    form = dict(re.findall(r"name='(csrf|seq)' value='([^']*)'", waiting))
    decided = client.post(
        f"/runs/{runs.waiting}/decide",
        data={
            **form,
            "action:p1": "modify",
            "params:p1": '{"to": "ann", "amount": 25}',
            "action:p2": "reject",
            "feedback:p2": "over <the> limit",
        },
        follow_redirects=False,
    )
    assert decided.status_code == 303
    runs.settled()
    assert PAID == ["25 to ann"]
    page = client.get(f"/runs/{runs.waiting}").text
    modified = re.search(
        r"<div class='entry decision modified' data-phases='CONFIRM' data-call='p1'>.*?</div>", page, re.S
    )
    rejected = re.search(
        r"<div class='entry decision rejected' data-phases='CONFIRM' data-call='p2'>.*?</div>", page, re.S
    )
    assert modified is not None and rejected is not None
    assert "<span class='verb'>modified</span> pay" in modified[0] and "&quot;amount&quot;: 25" in modified[0]
    assert "feedback: <q>over &lt;the&gt; limit</q>" in rejected[0]
    assert re.search(r"<h4><time datetime=", rejected[0]), "when it was taken"
    assert "resumed into CONFIRM" in page and "Ended in DONE after EXIT_CHECK, step 2: text" in page
    assert "ran with <code>{&quot;to&quot;:&quot;ann&quot;,&quot;amount&quot;:25}" in page


def test_a_store_without_events_gets_its_timeline_from_snapshots(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "quiet.db")  # neither durable nor keeping events: a few snapshots
    try:
        with pytest.raises(HITLBreakpointException) as paused:
            paying_agent(store, tmp_path).run([ChatMessage.from_user("Pay ann 30 and bob 9000.")])
        decisions = [
            ToolExecutionDecision("pay", True, "p1"),
            ToolExecutionDecision("pay", False, "p2", feedback="no"),
        ]
        paying_agent(store, tmp_path, position=1).run(snapshot=paused.value.snapshot, decisions=decisions)
        (run,) = store.runs()
        assert len(store.history(run.run_id)) < 4
        browser = ASGIClient(create_app(store))
        page = browser.get(f"/runs/{run.run_id}").text
        browser.close()
    finally:
        store.close()
    assert "Ended in DONE after EXIT_CHECK, step 2: text" in page and "data-call='p2'" in page
    assert "<span class='verb'>rejected</span> pay" in page and "<span class='verb'>approved</span> pay" in page
    assert "title='" in page and "estimated from the durations" in page, "clock times between snapshots, estimated"


# -- a real browser -----------------------------------------------------------------------------------------


def test_finding_deciding_and_reading_runs_in_a_browser(runs: Store) -> None:
    """Search with the keyboard, decide, read the decisions and the ending, filter by phase, a failed run, dark mode."""
    needs_browser()
    from playwright.sync_api import expect, sync_playwright

    with review_page.serving(create_app(runs.store, runs.agent)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=review_page.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))
            page.goto(url)
            expect(page.locator("nav.counts")).to_contain_text("all 3")
            # Found with the keyboard: the search field, typed into, sent with Enter.
            for _ in range(3):  # past the header's links: the page's name, its threads
                page.keyboard.press("Tab")
            expect(page.locator("#q")).to_be_focused()
            page.keyboard.type("bob 9000")
            page.keyboard.press("Enter")
            expect(page.locator("#shown")).to_have_text("1 run matching bob 9000")
            page.get_by_role("link", name="Pay ann 30 and bob 9000.").click()
            # Decided: one call with new arguments, one rejected; Enter in the feedback field sends the form.
            page.check("input[name='action:p1'][value='modify']")
            page.fill("textarea[name='params:p1']", '{"to": "ann", "amount": 25}')
            page.check("input[name='action:p2'][value='reject']")
            page.fill("input[name='feedback:p2']", "over the 100 EUR limit")
            page.press("input[name='feedback:p2']", "Enter")
            expect(page.locator("#status")).to_have_text("done")
            expect(page.locator("#ending")).to_have_text("Ended in DONE after EXIT_CHECK, step 2: text")
            modified = page.locator(".entry.decision.modified[data-call='p1']")
            expect(modified).to_contain_text("modified pay")
            expect(modified.locator("pre")).to_contain_text('"amount": 25')
            expect(page.locator(".entry.decision.rejected[data-call='p2']")).to_contain_text("over the 100 EUR limit")
            # A folded result unfolds to its JSON.
            result = page.locator(".entry.tool[data-call='p1'] details", has_text="result")
            expect(result.locator("pre")).to_be_hidden()
            result.locator("summary").click()
            expect(result.locator("pre")).to_have_text("paid 25 to ann")
            # A phase clicked on the diagram filters the timeline; clicked again (here: Enter), it shows all.
            decision = page.locator(".entry.decision").first
            page.click(".diagram g.node[data-phase='LLM_CALL']")
            expect(decision).to_be_hidden()
            expect(page.locator(".entry.model").first).to_be_visible()
            expect(page.locator("#phase-filter")).to_have_value("LLM_CALL")
            page.focus(".diagram g.node[data-phase='LLM_CALL']")
            page.keyboard.press("Enter")
            expect(decision).to_be_visible()
            page.select_option("#phase-filter", "CONFIRM")
            expect(decision).to_be_visible()
            expect(page.locator(".entry.model").first).to_be_hidden()
            # A failed run: where it failed, and why.
            page.goto(f"{url}/?status=failed")
            page.get_by_role("link", name="Fail on purpose.").click()
            expect(page.locator("#ending")).to_contain_text(
                "Ended in FAILED after LLM_CALL, step 1: ScriptExhaustedError"
            )
            expect(page.locator("#status")).to_have_text("failed")
            light = page.evaluate("getComputedStyle(document.body).backgroundColor")
            page.emulate_media(color_scheme="dark")
            dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
        finally:
            browser.close()
    assert (light, dark) == ("rgb(251, 251, 250)", "rgb(15, 18, 22)"), "dark when the system is"
    assert not [m for m in console if "Content Security Policy" in m], console
    assert PAID == ["25 to ann"]
