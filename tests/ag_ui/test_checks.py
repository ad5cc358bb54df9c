"""What a request to the AG-UI endpoint must be to be answered: loopback, its origin, its token, JSON of a bounded size."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from agentfsm import Agent
from agentfsm._serving.guard import SECURITY_HEADERS, check_listening
from agentfsm.ag_ui import create_app, serve
from agentfsm.errors import ConfigurationError
from tests.ag_ui.helpers import kinds, post, user_input

BODY = json.dumps(user_input("t1", "r1"))


def ran(agent: Agent) -> int:
    return len(agent.chat_generator.calls)  # type: ignore[attr-defined]


def test_a_request_for_another_host_is_refused_before_anything_runs(agent: Agent) -> None:
    with TestClient(create_app(agent), base_url="http://127.0.0.1") as browser:
        refused = browser.post("/", content=BODY, headers={"Content-Type": "application/json", "Host": "evil.example"})
        assert refused.status_code == 400 and "does not answer to the host 'evil.example'" in refused.json()["error"]
        assert refused.headers["x-frame-options"] == SECURITY_HEADERS["X-Frame-Options"]
    with TestClient(create_app(agent, allowed_hosts=["agents.example.com"]), base_url="http://agents.example.com") as b:
        status, events = post(b, user_input("t1", "r1"))
        assert status == 200 and kinds(events)[-1] == "RUN_FINISHED"


def test_a_browser_page_of_another_origin_is_refused_unless_allowed(agent: Agent) -> None:
    with TestClient(create_app(agent), base_url="http://127.0.0.1:8000") as browser:
        refused = browser.post(
            "/", content=BODY, headers={"Content-Type": "application/json", "Origin": "http://evil.example"}
        )
        assert refused.status_code == 403 and ran(agent) == 0
        # A page of the endpoint's own origin is answered; so is a client that says no origin (no page).
        status, _ = post(browser, user_input("t2", "r1"), Origin="http://127.0.0.1:8000")
        assert status == 200
    page = "http://localhost:3000"
    with TestClient(create_app(agent, allowed_origins=[page]), base_url="http://127.0.0.1:8000") as browser:
        preflight = browser.options(
            "/",
            headers={
                "Origin": page,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == page
        assert "Content-Type" in preflight.headers["access-control-allow-headers"]
        assert browser.options("/", headers={"Origin": "http://evil.example"}).status_code == 403


def test_with_a_token_every_request_carries_it(agent: Agent) -> None:
    with TestClient(create_app(agent, token="s3cret"), base_url="http://127.0.0.1") as browser:
        for given in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            refused = browser.post("/", content=BODY, headers={"Content-Type": "application/json", **given})
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert ran(agent) == 0
        status, events = post(browser, user_input("t1", "r1"), Authorization="Bearer s3cret")
        assert status == 200 and kinds(events)[0] == "RUN_STARTED"


def test_a_request_is_json_of_a_stated_bounded_length(agent: Agent) -> None:
    with TestClient(create_app(agent, max_body_bytes=2048), base_url="http://127.0.0.1") as browser:
        as_form = browser.post("/", content=BODY, headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert as_form.status_code == 415
        as_text = browser.post("/", content=BODY, headers={"Content-Type": "text/plain"})  # what a form may send
        assert as_text.status_code == 415
        big = json.dumps(user_input("t1", "r1", "x" * 4000))
        too_long = browser.post("/", content=big, headers={"Content-Type": "application/json"})
        assert too_long.status_code == 413 and "at most 2048 bytes" in too_long.json()["error"]
        assert browser.get("/").status_code == 405
    assert ran(agent) == 0


def test_serving_beyond_loopback_needs_a_token_and_names() -> None:
    check_listening("127.0.0.1", None, ())
    check_listening("::1", None, ())
    check_listening("localhost", None, ())
    with pytest.raises(ConfigurationError, match="set a token"):
        check_listening("192.0.2.10", None, ())
    with pytest.raises(ConfigurationError, match="allowed_hosts"):
        check_listening("0.0.0.0", "t0k", ())
    check_listening("0.0.0.0", "t0k", ["agents.lan"])


def test_serve_refuses_before_it_listens(agent: Agent) -> None:
    with pytest.raises(ConfigurationError, match="set a token"):
        serve(agent, host="0.0.0.0")


def test_an_allowed_host_or_origin_that_is_none_is_refused_at_once(agent: Agent) -> None:
    with pytest.raises(ConfigurationError, match="is not a host name"):
        create_app(agent, allowed_hosts=["https://agents.example.com"])
    with pytest.raises(ConfigurationError, match="is not an origin"):
        create_app(agent, allowed_origins=["localhost:3000"])
