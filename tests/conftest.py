"""Shared fixtures: the test modules hold the tool functions that serialization tests import."""

from __future__ import annotations

import pytest

from agentfsm.serialization import _user_allowed, allow_modules

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
