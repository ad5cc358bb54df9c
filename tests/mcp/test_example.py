"""examples/mcp_tools.py runs as written, with its own MCP server over stdio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_mcp_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, "examples/mcp_tools.py"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "tools: [('write_note', 'not idempotent'), ('read_notes', 'idempotent')]" in done.stdout
    assert "tool said: buy bread" in done.stdout  # the second run used the session of the first
    assert done.stdout.rstrip().endswith("session: closed")
