"""Shared fixtures: the test modules hold the tool functions that serialization tests import."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from agentfsm.serialization import _user_allowed, allow_modules

# Hypothesis's per-example deadline and "too slow" health check are timing assertions: on a shared
# 2-core CI machine they fail tests whose code is right. Properties are bounded by their examples.
settings.register_profile("agentfsm", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("agentfsm")

#: The ``postgres`` fixture: a real PostgreSQL server for the durable-run tests.
pytest_plugins = ["tests.postgres"]


@pytest.fixture
def allow_tests_modules() -> object:
    """Allow deserialization to import from ``tests.*`` for the duration of one test."""
    before = set(_user_allowed)
    allow_modules("tests")
    yield
    _user_allowed.clear()
    _user_allowed.update(before)
