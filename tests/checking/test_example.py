"""examples/check_payments.py: the checker finds the double charge, and passes the fixed agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_finds_the_double_charge() -> None:
    done = subprocess.run(
        [sys.executable, "examples/check_payments.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "violated: each payment call charges once: charged twice without a decision: [(1, 'call_1_0')]" in out
    assert "the process was killed before write" in out and "def test_each_payment_call_charges_once_regression" in out
    assert "with pay_safely: no violation" in out
