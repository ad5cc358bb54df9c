"""The benchmark runs (on a tiny workload: its figures are not checked, only that it works)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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
        "no-op hooks at before_llm, before_tool, on_exit",
        "logging",
        "events to a no-op handler",
        "plain, replies reporting usage",
        "all limits on",
        "loop detection",
        "OpenTelemetry on, no-op exporter",
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
    assert set(results["checker"]) == {"demo", "three_tools"}
    assert all(row["ok"] and row["paths_per_cpu_s"] > 0 for row in results["checker"].values())


def test_the_performance_page_includes_the_committed_results() -> None:
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert '\n--8<-- "bench/RESULTS.md"\n' in page, "the site builds the page with the figures of bench/RESULTS.md"
    assert (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8").startswith("Measured ")


def load_bench_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_peer_workloads_report_frameworks_they_cannot_import() -> None:
    # The test environment has agentfsm but none of the peers: their rows say so, agentfsm's are timed.
    done = subprocess.run(
        [sys.executable, "bench/peers/workloads.py", "3", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    measured = json.loads(done.stdout)
    runs = measured["runs"]
    for name in ("agentfsm", "agentfsm, durable SQLite store in memory", "agentfsm, durable SQLite store in a file"):
        assert runs[name]["median_us"] > 0 and runs[name]["peak_kib"] > 0, runs[name]
    for name in ("haystack", "langgraph", "langgraph, SqliteSaver in a file"):
        assert runs[name]["error"].startswith("ModuleNotFoundError"), runs[name]
    assert runs["langgraph, SqliteSaver in a file"]["baseline"] == "agentfsm, durable SQLite store in a file"
    assert measured["import_ms"]["agentfsm"] > 0
    assert measured["import_ms"]["haystack"] is None


def test_peer_tables_compare_each_row_with_its_baseline_and_say_why_a_row_is_missing() -> None:
    def row(framework: str, baseline: str, median: float, least: float) -> dict[str, object]:
        timing = {"median_us": median, "min_us": least, "peak_kib": 64.0, "version": "1.0"}
        return {"framework": framework, "baseline": baseline, **timing}

    memory = "agentfsm, durable SQLite store in memory"
    runs = {
        "agentfsm": row("agentfsm", "agentfsm", 20.0, 19.0),
        "haystack": {"framework": "haystack", "baseline": "agentfsm", "error": "not installed: no haystack-ai"},
        "langgraph": row("langgraph", "agentfsm", 2000.0, 1900.0),
        memory: row("agentfsm", memory, 100.0, 95.0),
        "langgraph, InMemorySaver": row("langgraph", memory, 3900.0, 3800.0),
    }
    imports = {"agentfsm": 350.0, "haystack": None, "langgraph": 1200.0}
    table = "\n".join(load_bench_script().peer_tables({"runs": runs, "import_ms": imports}))
    assert "| agentfsm (1.0) | 20.0 | 19.0 | 1.0x / 1.0x | 64.0 | 350.0 |" in table
    assert "| haystack | not installed: no haystack-ai |  |  |  |  |" in table
    assert "| langgraph (1.0) | 2000.0 | 1900.0 | 100.0x / 100.0x | 64.0 | 1200.0 |" in table
    assert "| langgraph, InMemorySaver (1.0) | 3900.0 | 3800.0 | 39.0x / 40.0x | 64.0 |" in table


def test_target_table_judges_this_run_by_its_medians() -> None:
    bench = load_bench_script()

    def results(at_1000: float, peers: object, hooks: float = 21.0) -> dict[str, object]:
        growth = {"10": {"durable_write": {"median_us": 20.0}}, "1000": {"durable_write": {"median_us": at_1000}}}
        overhead = {
            "plain": {"median_us": 18.0},
            "no-op hooks at before_llm, before_tool, on_exit": {"median_us": hooks},
            "OpenTelemetry on, no-op exporter": {"median_us": 36.0},
            "events to a no-op handler": {"median_us": 21.5},
            "plain, replies reporting usage": {"median_us": 20.0},
            "all limits on": {"median_us": 27.0},
        }
        return {"growth": growth, "peers": peers, "overhead": overhead}

    def peers(haystack: float, sqlite_saver: float) -> dict[str, object]:
        return {
            "runs": {
                "agentfsm": {"median_us": 20.0},
                "haystack": {"median_us": haystack},
                "agentfsm, durable SQLite store in a file": {"median_us": 150.0},
                "langgraph, SqliteSaver in a file": {"median_us": sqlite_saver},
            }
        }

    met = "\n".join(bench.target_table(results(21.0, peers(210.0, 3900.0))))
    assert "| ≥ 10x faster than Haystack's Agent per plain step | 10.5x | yes |" in met
    assert "| ≥ 25x faster than LangGraph's SqliteSaver, a checkpoint per step | 26.0x | yes |" in met
    assert "from 10 to 1000 messages (≤ 2x; a whole snapshot grows with the history) | 1.05x | yes |" in met
    assert "| a hook firing ≤ 2 µs beyond the hook's own work | 1.5 µs | yes |" in met
    assert "| OpenTelemetry on, no-op exporter ≤ 2x plain | 2.00x | yes |" in met
    assert "| events to a no-op handler ≤ 1.2x plain | 1.19x | yes |" in met
    assert "| all usage limits on ≤ 1.3x the same replies (reporting usage) without limits | 1.35x | no |" in met
    assert "logging" not in met, "a row not measured is left out"

    missed = "\n".join(bench.target_table(results(2000.0, peers(190.0, 3600.0), hooks=23.0)))
    assert missed.count("| no |") == 5, missed
    unmeasured = "\n".join(bench.target_table(results(21.0, {})))
    assert "| ≥ 10x faster than Haystack's Agent per plain step |  | not measured |" in unmeasured


def test_the_client_table_sets_each_client_beside_its_sdk() -> None:
    bench = load_bench_script()
    names = [name for pair in bench.CLIENT_PAIRS for name in pair]
    rows = {name: {"median_us": 100.0, "min_us": 90.0} for name in names}
    rows["anthropic SDK, streamed"] = {"median_us": 80.0, "min_us": 75.0}
    clients = {
        "rows": rows,
        "versions": {"openai": "1.0", "anthropic": "2.0", "httpx": "0.28"},
        "requests_per_sample": 50,
    }
    table = "\n".join(bench.client_table(clients))
    assert "| agentfsm AnthropicChatGenerator, streamed | 100.0 | 90.0 | 0.8x |" in table
    assert "| openai SDK | 100.0 | 90.0 | |" in table
    assert "openai 1.0, anthropic 2.0, httpx 0.28" in table
    assert bench.client_table({"error": "no network"}) == ["", "The model clients were not measured: no network"]
    runs = {"runs": {}, "clients": clients}
    targets = "\n".join(
        bench.target_table(
            {
                "growth": {"10": {"durable_write": {"median_us": 1.0}}},
                "peers": runs,
                "overhead": {
                    "plain": {"median_us": 1.0},
                    "no-op hooks at before_llm, before_tool, on_exit": {"median_us": 2.0},
                },
            }
        )
    )
    assert (
        "| model clients no slower than the openai and anthropic SDKs (the closest of 4 pairs) | 0.8x | no |" in targets
    )


def test_only_some_rows_are_timed_and_printed(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--only", "plain,hooks", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert set(printed) == {"plain", "hooks", "hook firing us"}
    assert not list(tmp_path.iterdir()), "--only writes no file"
