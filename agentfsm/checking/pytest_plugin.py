"""A pytest plugin: the ``agent_check`` fixture, ``check_agent`` that fails the test on a violation.

Enable it in your ``conftest.py`` (it is not loaded on its own, so it costs nothing elsewhere)::

    pytest_plugins = ["agentfsm.checking.pytest_plugin"]

    def test_my_agent_on_every_path(agent_check):
        agent_check(make_agent(), max_steps=2)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from agentfsm.agent import Agent
from agentfsm.checking.explorer import CheckResult, check_agent
from agentfsm.messages import ChatMessage


@pytest.fixture
def agent_check() -> Callable[..., CheckResult]:
    """``check_agent(agent, messages, **options)``: fails the test with the counterexamples, else returns the result."""

    def check(agent: Agent, messages: Sequence[ChatMessage] | None = None, **options: Any) -> CheckResult:
        options.setdefault("progress", False)
        result = check_agent(agent, messages, **options)
        if not result.ok:
            pytest.fail(result.text(), pytrace=False)
        return result

    return check
