"""The chat page example, in headless Chromium: a run streams in, a payment waits for approval, approving resumes it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agentfsm.stores import SQLiteSnapshotStore
from tests.servers import ROOT, needs_node_package, serving

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def needs_browser() -> None:
    missing = "Chromium" if CHROMIUM is None else "playwright" if importlib.util.find_spec("playwright") is None else ""
    if missing:
        message = f"{missing} is not installed (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must run the browser test")
        pytest.skip(message)


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ag_ui_chat_server", ROOT / "examples" / "ag_ui_chat" / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_chat_page_streams_a_run_and_resumes_it_after_an_approval(tmp_path: Path) -> None:
    needs_node_package("@ag-ui/client")
    needs_node_package("esbuild")
    needs_browser()
    from playwright.sync_api import sync_playwright

    chat = example()
    store = SQLiteSnapshotStore(tmp_path / "runs.db")
    artifacts = Path(os.environ.get("AGENTFSM_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    requests: list[str] = []
    with serving(chat.page_app(chat.chat_agent(store, tmp_path))) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("request", lambda request: requests.append(request.url))
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url + "/")
            page.click("#send")
            page.wait_for_selector(".approval button.approve", timeout=20_000)
            assert page.locator("#log li.user").inner_text() == "Please pay Ann 30 EUR."
            assert page.locator("#log li.assistant").first.inner_text() == "Sure, I will send Ann 30 EUR."
            assert page.locator("#log li.tool").first.inner_text() == 'pay({"to":"ann","amount":30})'
            assert "Approve pay(" in page.locator(".approval p").inner_text()
            assert page.locator("#status").inner_text() == "Waiting for your approval." and chat.PAID == []
            page.screenshot(path=str(artifacts / "ag-ui-chat-approval.png"), full_page=True)
            page.click(".approval button.approve")
            page.wait_for_selector("#status:has-text('Done.')", timeout=20_000)
            assert (
                page.locator("#log li.assistant").last.inner_text() == "Done: the payment went through. Anything else?"
            )
            assert page.locator("#log li.tool").last.inner_text() == "→ paid 30 EUR to ann"
            page.screenshot(path=str(artifacts / "ag-ui-chat-done.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
    store.close()
    assert chat.PAID == ["ann:30"]
    assert all(r.startswith(url) for r in requests), "the page loads nothing from elsewhere"
