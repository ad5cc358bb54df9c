"""``agentfsm check MODULE:ATTR``: exit status, text and JSON reports."""

from __future__ import annotations

import json

import pytest

from agentfsm.cli import main


def test_a_violation_exits_non_zero_with_the_counterexample(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["check", "tests.checking.agents:endless", "--max-steps", "1", "--no-crashes", "--no-breakpoints"])
    out = capsys.readouterr().out
    assert status == 1
    assert "[ends_within_bound]" in out and "def test_ends_within_bound_regression" in out
    assert "from tests.checking.agents import endless" in out and "stateDiagram-v2" in out


def test_a_correct_agent_exits_zero_and_reports_json(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["check", "tests.checking.agents:plain", "--max-steps", "1", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    assert report["ok"] is True and report["violations"] == [] and report["runs"] > report["paths"] > 0


def test_an_agent_that_cannot_be_loaded_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "tests.checking.agents:nothing_here"]) == 1
    assert "nothing_here" in capsys.readouterr().err


def test_user_invariants_are_named_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["check", "tests.checking.agents:double_charge", "--max-steps", "1", "--no-breakpoints"]
    status = main([*arguments, "--invariant", "tests.checking.agents:charged_once", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 1
    [violation] = report["violations"]
    assert violation["invariant"] == "each payment call charges once"
    assert "from tests.checking.agents import charged_once" in violation["regression_test"]
    assert report["paths_per_second"] > 0 and report["runs_per_second"] >= report["paths_per_second"]


def test_an_invariant_that_is_not_one_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["check", "tests.checking.agents:plain", "--invariant", "tests.checking.agents:CHARGES"])
    assert status == 1
    assert "not an Invariant" in capsys.readouterr().err
