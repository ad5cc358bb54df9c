"""The benchmark runs (on a tiny workload: its figures are not checked, only that it works)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_benchmark_smoke(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["overhead"]) == {
        "plain",
        "logging",
        "whole_snapshot_encoded_at_every_transition_in_memory",
        "sqlite_durable_in_memory",
        "sqlite_durable",
        "sqlite_durable_synchronous_off",
        "peak_memory_kib",
    }
    assert set(results["growth"]) == {"10", "100"}
    assert set(results["growth"]["10"]) == {"plain", "sqlite_durable", "durable_write"}
    assert (tmp_path / "RESULTS.md").read_text().startswith("Measured ")
    assert results["concurrency"]["cross_talk"] == "none (checked)"
    assert results["concurrency_inline_tools"]["cross_talk"] == "none (checked)"
    assert results["peers"] == {}, "the quick run does not install the peers"


def test_readme_quotes_the_committed_results() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quoted = readme.split("<!-- bench-results:start -->\n")[1].split("<!-- bench-results:end -->")[0]
    assert quoted == (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8"), "run `make bench` to refresh both"
