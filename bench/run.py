"""agentfsm benchmarks: per-step overhead, durable snapshots, snapshot encoding. ``make bench`` runs them.

Writes ``bench/results.json`` and ``bench/RESULTS.md``. ``--quick`` runs a tiny workload (used by
the test suite to check that the benchmark works; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from agentfsm import Agent, AgentSnapshot, Breakpoint, BreakpointException, ChatMessage, Phase, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.logs import configure_logging, stdlib_logger
from agentfsm.runtime import AgentRun, TransitionRecord
from agentfsm.stores import SQLiteSnapshotStore

HERE = Path(__file__).resolve().parent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script(steps: int) -> list[ChatMessage | str]:
    """``steps`` replies that each call ``add`` once, then a text answer."""
    calls: list[ChatMessage | str] = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": i, "b": 1}, id=f"c{i}")]) for i in range(steps)
    ]
    return [*calls, "done"]


def history(n: int) -> list[ChatMessage]:
    """A conversation of ``n`` messages to start from."""
    return [ChatMessage.from_user(f"earlier message number {i} with some words in it") for i in range(n)]


class SnapshotEveryTransition:
    """An observer that takes an in-memory snapshot at every transition (and encodes it)."""

    def transition(self, run: AgentRun, record: TransitionRecord) -> None:
        run.make_snapshot().to_bytes()

    def tool_completed(self, run: AgentRun, key: str) -> None:
        """Nothing to do per tool call."""


def per_step_us(
    make_agent: Callable[[], Agent], steps: int, runs: int, messages: list[ChatMessage]
) -> dict[str, float]:
    """Median and min microseconds per step (model call + tool call) over ``runs`` timed runs."""
    make_agent().run(messages)  # warm-up
    samples = []
    for _ in range(runs):
        agent = make_agent()
        started = time.perf_counter()
        agent.run(messages)
        samples.append((time.perf_counter() - started) / (steps + 1) * 1e6)
    return {"median_us": round(statistics.median(samples), 1), "min_us": round(min(samples), 1)}


def overhead(steps: int, runs: int) -> dict[str, Any]:
    """The four configurations of the per-step workload."""
    user = [ChatMessage.from_user("go")]

    def plain() -> Agent:
        return Agent(chat_generator=ScriptedChatGenerator(script(steps)), tools=[add], max_agent_steps=steps + 1)

    def in_memory_snapshots() -> Agent:
        agent = plain()
        agent._observers = (SnapshotEveryTransition(),)
        return agent

    results: dict[str, Any] = {"plain": per_step_us(plain, steps, runs, user)}
    configure_logging(stream=io.StringIO())
    try:
        results["logging"] = per_step_us(plain, steps, runs, user)
    finally:
        stdlib_logger.handlers[:] = [h for h in stdlib_logger.handlers if h.get_name() != "agentfsm-configured"]
        stdlib_logger.setLevel(logging.NOTSET)
    results["snapshot_every_transition"] = per_step_us(in_memory_snapshots, steps, runs, user)
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**9))

        def durable() -> Agent:
            store = SQLiteSnapshotStore(Path(tmp) / f"bench{next(counter)}.db", durable=True)
            return Agent(
                chat_generator=ScriptedChatGenerator(script(steps)),
                tools=[add],
                max_agent_steps=steps + 1,
                snapshot_store=store,
            )

        results["sqlite_durable"] = per_step_us(durable, steps, runs, user)
    tracemalloc.start()
    plain().run(user)
    results["peak_memory_kib"] = round(tracemalloc.get_traced_memory()[1] / 1024, 1)
    tracemalloc.stop()
    return results


class TimedStore(SQLiteSnapshotStore):
    """A durable store that times each write after the first (full) row of a run: the delta rows."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, durable=True)
        self.delta_us: list[float] = []
        self._rows = 0

    def _record(self, run: AgentRun, phase: Phase) -> None:
        started = time.perf_counter()
        super()._record(run, phase)
        self._rows += 1
        if self._rows > 1:
            self.delta_us.append((time.perf_counter() - started) * 1e6)


def durable_write_us(size: int, steps: int, runs: int, tmp: Path) -> dict[str, float]:
    """Median and min cost of one durable write (a transition or a finished tool call) after the first row."""
    samples: list[float] = []
    for i in range(runs):
        store = TimedStore(tmp / f"timed-{size}-{i}.db")
        Agent(
            chat_generator=ScriptedChatGenerator(script(steps)),
            tools=[add],
            max_agent_steps=steps + 1,
            snapshot_store=store,
        ).run(history(size))
        samples.extend(store.delta_us)
        store.close()
    return {"median_us": round(statistics.median(samples), 1), "min_us": round(min(samples), 1)}


def growth(sizes: list[int], steps: int, runs: int) -> dict[str, Any]:
    """Per-step cost, plain and durable, starting from conversations of different lengths."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**9))
        for size in sizes:
            start = history(size)

            def plain() -> Agent:
                return Agent(
                    chat_generator=ScriptedChatGenerator(script(steps)), tools=[add], max_agent_steps=steps + 1
                )

            def durable() -> Agent:
                store = SQLiteSnapshotStore(Path(tmp) / f"g{next(counter)}.db", durable=True)
                return Agent(
                    chat_generator=ScriptedChatGenerator(script(steps)),
                    tools=[add],
                    max_agent_steps=steps + 1,
                    snapshot_store=store,
                )

            out[str(size)] = {
                "plain": per_step_us(plain, steps, runs, start),
                # A step is 4 transitions plus one tool completion: 5 durable rows, the first of a run full.
                "sqlite_durable": per_step_us(durable, steps, runs, start),
                "durable_write": durable_write_us(size, steps, runs, Path(tmp)),
            }
    return out


def snapshot_costs(sizes: list[int], runs: int) -> dict[str, Any]:
    """Encode/decode time and size of a snapshot paused after a conversation of each length."""
    out: dict[str, Any] = {}
    for size in sizes:
        agent = Agent(chat_generator=ScriptedChatGenerator(script(1)), tools=[add])
        try:
            agent.run(history(size), break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
        except BreakpointException as exc:
            snapshot: AgentSnapshot = exc.snapshot
        data = snapshot.to_bytes()
        encode = min(_time(snapshot.to_bytes) for _ in range(runs))
        decode = min(_time(partial(AgentSnapshot.from_bytes, data)) for _ in range(runs))
        with tempfile.TemporaryDirectory() as tmp:
            path = snapshot.to_file(Path(tmp) / "s.json")
            store = SQLiteSnapshotStore(Path(tmp) / "s.db")
            store.save(snapshot)
            resume_file = min(_time(partial(_resume, path=path)) for _ in range(runs))
            resume_sqlite = min(_time(partial(_resume, store=store, run_id=snapshot.run_id)) for _ in range(runs))
        out[str(size)] = {
            "bytes": len(data),
            "encode_us": round(encode, 1),
            "decode_us": round(decode, 1),
            "resume_from_file_us": round(resume_file, 1),
            "resume_from_sqlite_us": round(resume_sqlite, 1),
        }
    return out


def _time(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e6


def _resume(path: Path | None = None, store: SQLiteSnapshotStore | None = None, run_id: str = "") -> None:
    snapshot = AgentSnapshot.from_file(path) if path else store.latest(run_id)  # type: ignore[union-attr]
    Agent(chat_generator=ScriptedChatGenerator(script(1), position=1), tools=[add]).run(snapshot=snapshot)


def markdown(results: dict[str, Any]) -> str:
    """The results as the Markdown tables the README quotes."""
    m = results["machine"]
    lines = [
        f"Measured {m['date']} on {m['machine']} ({m['cpus']} CPUs), Python {m['python']}; "
        f"workload: {results['steps']} steps of (model call -> one `add` tool call) on the scripted model, "
        f"median of {results['runs']} runs.",
        "",
        "| configuration | median µs/step | min µs/step |",
        "|---|---:|---:|",
    ]
    for name, row in results["overhead"].items():
        if isinstance(row, dict):
            lines.append(f"| {name.replace('_', ' ')} | {row['median_us']} | {row['min_us']} |")
    lines += [
        "",
        f"Peak memory of one plain run: {results['overhead']['peak_memory_kib']} KiB.",
        "",
        "| history (messages) | plain µs/step | SQLite durable µs/step | one durable write µs (median / min) |",
        "|---:|---:|---:|---:|",
    ]
    for size, row in results["growth"].items():
        write = row["durable_write"]
        lines.append(
            f"| {size} | {row['plain']['median_us']} | {row['sqlite_durable']['median_us']} | "
            f"{write['median_us']} / {write['min_us']} |"
        )
    lines += [
        "",
        "| history (messages) | snapshot bytes | encode µs | decode µs | resume from file µs | resume from SQLite µs |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in results["snapshots"].items():
        lines.append(
            f"| {size} | {row['bytes']} | {row['encode_us']} | {row['decode_us']} | "
            f"{row['resume_from_file_us']} | {row['resume_from_sqlite_us']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny workload, to check that the benchmark runs")
    parser.add_argument("--out", type=Path, default=HERE, help="directory for results.json and RESULTS.md")
    args = parser.parse_args(argv)
    steps, runs, sizes = (3, 2, [10, 100]) if args.quick else (50, 20, [10, 100, 1000])
    results = {
        "machine": {
            "date": datetime.now(UTC).date().isoformat(),
            "machine": f"{platform.system()} {platform.machine()}",
            "cpus": __import__("os").cpu_count(),
            "python": platform.python_version(),
        },
        "steps": steps,
        "runs": runs,
        "overhead": overhead(steps, runs),
        "growth": growth(sizes, steps, max(runs // 2, 2)),
        "snapshots": snapshot_costs(sizes, runs),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "RESULTS.md").write_text(markdown(results), encoding="utf-8")
    sys.stdout.write(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
