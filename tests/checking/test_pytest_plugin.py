"""The pytest plugin, enabled the documented way, in a pytest session of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = 'pytest_plugins = ["agentfsm.checking.pytest_plugin"]\n'

TESTS = """
from tests.checking import agents


def test_a_correct_agent(agent_check):
    result = agent_check(agents.plain, max_steps=1)
    assert result.ok and result.paths > 0


def test_a_broken_agent(agent_check):
    agent_check(agents.endless, max_steps=1, crashes=False, breakpoints=False)
"""


def test_the_fixture_fails_a_test_with_the_counterexample(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_agents.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "[ends_within_bound]" in done.stdout and "def test_ends_within_bound_regression" in done.stdout
