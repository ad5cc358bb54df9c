"""examples/a2a_agents.py: two agents talking A2A on 127.0.0.1, the remote's approval given through the caller's pause."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.servers import ROOT


def test_the_two_agents_example_delegates_and_approves_through_the_callers_pause() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "examples/a2a_agents.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        'the payments agent asks: Approve pay(to="ann", amount=30) (Send a payment in EUR.)?',
        "paid before the approval: []",
        "paid after the approval: ['ann:30']",
        "assistant: The payments agent confirmed: Ann has her 30 EUR.",
    ]
