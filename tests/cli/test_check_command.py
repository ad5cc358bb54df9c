"""``agentfsm check MODULE:ATTR``: exit status, text and JSON reports."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from agentfsm.checking import check_agent
from agentfsm.cli import main
from tests.checking import agents
from tests.mcp.conftest import children, wait_for_no_children


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


def test_check_lists_a_lazy_mcp_toolset_and_plays_its_tools_never_calling_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # capfd: the server's stderr is this process's own descriptor.
    marker = tmp_path / "the-server-ran-a-tool"
    monkeypatch.setenv("AGENTFSM_TEST_MARKER", str(marker))
    agents.EXECUTED.clear()
    before = children()
    arguments = ["check", "tests.checking.agents:lazy_mcp", "--max-steps", "1", "--no-crashes", "--no-breakpoints"]
    status = main([*arguments, "--invariant", "tests.checking.agents:tools_executed", "--format", "json"])
    assert status == 0, capfd.readouterr()
    assert "mark" in agents.EXECUTED, "the toolset was listed and its tool explored"
    assert not marker.exists(), "the server's tool was never called"
    assert wait_for_no_children(before) == [], "the command closed the toolset it connected"


def test_a_blocking_tool_holds_a_check_no_longer_than_its_tool_timeout() -> None:
    finished: list[object] = []
    checking = threading.Thread(
        target=lambda: finished.append(
            check_agent(agents.blocking, max_steps=1, crashes=False, breakpoints=False, tool_timeout=0.2)
        ),
        daemon=True,
    )
    checking.start()
    checking.join(timeout=120)
    agents.RELEASED.set()  # the threads the timed-out calls were abandoned in end
    assert finished, "the check ended although its tool never returns"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("sys:exit", "sys:exit is a built-in function, not an Agent"),
        ("os.path:join", "os.path:join is a function that needs arguments, not an Agent"),
        ("tests.checking.agents:Counter", "the class Counter, not an Agent"),
        (".agents:plain", "not a path"),
        ("../tests/checking/agents.py:plain", "not a path"),
        ("tests/checking/agents.py:plain", "not a path"),
        ("tests.checking.agents:lazy_mcp.x", "not a path"),
    ],
)
def test_a_module_path_that_names_no_agent_is_a_one_line_error(
    spec: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", spec]) == 1
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err
