"""The page's scripts and style sheet: files in the package, served as files, linked from the pages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import agentfsm.web
from agentfsm import ChatMessage
from agentfsm.demo import DEMO_QUESTION, demo_agent
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.web import create_app
from agentfsm.web.assets import STATIC_FILES
from tests.web.test_web import ASGIClient

STATIC = Path(agentfsm.web.__file__).parent / "static"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteSnapshotStore]:
    """A store holding one finished run of the demo agent, with its events."""
    runs = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True, record_events=True)
    agent = demo_agent()
    agent.snapshot_store = runs
    agent.run([ChatMessage.from_user(DEMO_QUESTION)])
    yield runs
    runs.close()


def test_every_file_in_static_is_one_the_page_serves() -> None:
    assert sorted(p.name for p in STATIC.iterdir()) == sorted(STATIC_FILES)


def test_each_file_is_served_as_it_is_with_its_media_type(store: SQLiteSnapshotStore) -> None:
    browser = ASGIClient(create_app(store))
    try:
        for name, media_type in STATIC_FILES.items():
            served = browser.get(f"/{name}")
            assert served.status_code == 200, name
            assert served.headers["content-type"] == f"{media_type}; charset=utf-8"
            assert served.content == (STATIC / name).read_bytes()
            assert served.headers["content-security-policy"].startswith("default-src 'none'")
    finally:
        browser.close()


def test_the_pages_link_to_the_files(store: SQLiteSnapshotStore) -> None:
    browser = ASGIClient(create_app(store))
    try:
        (run,) = store.runs()
        listing, page = browser.get("/").text, browser.get(f"/runs/{run.run_id}").text
    finally:
        browser.close()
    assert "<link rel='stylesheet' href='/review.css'>" in listing
    assert "<link rel='stylesheet' href='/review.css'>" in page
    assert "<script src='/review.js'></script><script src='/live.js'></script>" in page


def test_the_files_need_the_token_as_the_pages_do(store: SQLiteSnapshotStore) -> None:
    browser = ASGIClient(create_app(store, token="s3cret"))
    try:
        for name in STATIC_FILES:
            assert browser.get(f"/{name}").status_code == 401, name
            assert browser.get(f"/{name}", headers={"Authorization": "Bearer s3cret"}).status_code == 200, name
    finally:
        browser.close()
