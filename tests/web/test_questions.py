"""Questions a tool asked, answered on the review page: a field per question made from its schema."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import ChatMessage
from agentfsm.errors import InputBreakpointException
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.web import create_app
from tests.web.test_web import CHROMIUM, ASGIClient, csrf_and_seq, needs_browser, review_page, settled

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from interrupts import transfer_agent


class Asked:
    """A store holding a run paused by the transfer tool's first question, and the agent that resumes it."""

    def __init__(self, tmp: Path) -> None:
        self.store = SQLiteSnapshotStore(tmp / "runs.db", durable=True)
        with pytest.raises(InputBreakpointException) as paused:
            transfer_agent(self.store, position=0).run([ChatMessage.from_user("Pay the rent: 900.")])
        self.run_id = paused.value.snapshot.run_id
        self.agent = transfer_agent(self.store)


@pytest.fixture
def asked(tmp_path: Path) -> Iterator[Asked]:
    made = Asked(tmp_path)
    yield made
    settled(made.store, made.run_id)
    made.store.close()


def test_each_question_gets_a_field_made_from_its_schema_and_answers_are_checked(asked: Asked) -> None:
    client = ASGIClient(create_app(asked.store, asked.agent))
    try:
        page = client.get(f"/runs/{asked.run_id}").text
        assert "<p class='status' id='status'>waiting for approval</p>" in page
        assert "Which account should pay?" in page and "asked by transfer" in page
        assert "<select name='answer:t1.0' required>" in page and "<option value='&quot;savings&quot;'>" in page
        form = csrf_and_seq(page)
        head = asked.store.latest(asked.run_id).seq

        def answer(value: str) -> Any:
            return client.post(
                f"/runs/{asked.run_id}/decide", data={**form, "answer:t1.0": value}, follow_redirects=False
            )

        for value, problem in [("", "No answer for t1.0"), ('"gold"', "does not fit its schema"), ("{", "is not JSON")]:
            refused = answer(value)
            assert refused.status_code == 400 and problem in refused.text and "Nothing was changed" in refused.text
        assert asked.store.latest(asked.run_id).seq == head, "nothing ran, the run did not move"
        assert answer('"savings"').status_code == 303
        settled(asked.store, asked.run_id)
        # The tool ran again with the answer and asked its second question: a text field, its pattern checked.
        page = client.get(f"/runs/{asked.run_id}").text
        assert "The 6-digit code the bank sent?" in page and "<input name='answer:t1.1' size='60' required>" in page
        form = csrf_and_seq(page)
        wrong = client.post(f"/runs/{asked.run_id}/decide", data={**form, "answer:t1.1": "12ab"})
        assert wrong.status_code == 400 and "does not fit its schema" in wrong.text
        done = client.post(
            f"/runs/{asked.run_id}/decide", data={**form, "answer:t1.1": "123456"}, follow_redirects=False
        )
        assert done.status_code == 303
        settled(asked.store, asked.run_id)
        final = asked.store.latest(asked.run_id)
        assert final.phase.value == "DONE"
        results = [m for m in final.messages if m["role"] == "tool"]
        assert "moved 900 from savings (code 123456 accepted)" in str(results)
    finally:
        client.close()


def test_a_person_answers_a_tools_questions_in_a_browser(asked: Asked) -> None:
    needs_browser()
    from playwright.sync_api import expect, sync_playwright

    with review_page.serving(create_app(asked.store, asked.agent)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=review_page.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{url}/runs/{asked.run_id}")
            page.select_option("select[name='answer:t1.0']", label="savings")
            page.click("#decide")
            code = page.locator("input[name='answer:t1.1']")
            expect(code).to_be_visible(timeout=60_000)
            code.fill("123456")
            page.click("#decide")
            expect(page.locator("#status")).to_have_text("done", timeout=60_000)
            assert "Rent is paid." in page.inner_text("body")
        finally:
            browser.close()
