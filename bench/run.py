"""agentfsm benchmarks: per-step overhead, durable snapshots, snapshot encoding. ``make bench`` runs them.

Writes ``bench/results.json`` and ``bench/RESULTS.md``. ``--quick`` runs a tiny workload (used by
the test suite to check that the benchmark works; its figures mean nothing). ``--only plain,hooks,haystack``
times only those rows (agentfsm's plain and hooks rows, the peers' rows by name) and prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import multiprocessing
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/, for timing.py when imported from elsewhere
import checker
from timing import Setup, import_ms, timed_run

from agentfsm import (
    Agent,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    LoopDetection,
    Phase,
    RunHandle,
    State,
    ToolCall,
    UsageLimits,
    hook,
    telemetry,
    tool,
)
from agentfsm.builtin_hooks import CompactionHook, MessageCount, SlidingWindowCompactor
from agentfsm.events import Event
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.logs import configure_logging, use_standard_logging
from agentfsm.snapshot import now_iso
from agentfsm.stores import RunDelta, SQLiteSnapshotStore

HERE = Path(__file__).resolve().parent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@hook
def no_op(state: State) -> None:
    """A hook that does nothing: what remains is the cost of firing it."""


#: The hook points of the hooks row; on this workload they fire twice a step (see hook_firing_us).
NO_OP_HOOKS = {"before_llm": [no_op], "before_tool": [no_op], "on_exit": [no_op]}


def hook_firing_us(overhead: dict[str, Any]) -> float:
    """What one hook firing adds to a step.

    before_llm fires at every model call, before_tool at every tool step, on_exit once at the end:
    twice a step of the (steps + 1)-call workload.
    """
    extra = overhead["no-op hooks at before_llm, before_tool, on_exit"]["median_us"] - overhead["plain"]["median_us"]
    return round(extra / 2, 2)


def script(steps: int) -> list[ChatMessage | str]:
    """``steps`` replies that each call ``add`` once, then a text answer."""
    calls: list[ChatMessage | str] = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": i, "b": 1}, id=f"c{i}")]) for i in range(steps)
    ]
    return [*calls, "done"]


def workload_agent(steps: int, **agent_kwargs: Any) -> Agent:
    """An agent on a fresh scripted model for the ``steps``-step workload."""
    return Agent(
        chat_generator=ScriptedChatGenerator(script(steps)), tools=[add], max_agent_steps=steps + 1, **agent_kwargs
    )


def with_usage(message: ChatMessage | str) -> ChatMessage:
    """A scripted reply as the HTTP clients give it: the model's name and the token usage in its meta."""
    reply = ChatMessage.from_assistant(message) if isinstance(message, str) else message
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    return ChatMessage.from_assistant(reply.text, tool_calls=reply.tool_calls, meta={"model": "bench", "usage": usage})


#: Every usage limit set, none of them reached by the workload.
ALL_USAGE_LIMITS = UsageLimits(
    requests=10_000,
    tool_calls=10_000,
    input_tokens=10**9,
    output_tokens=10**9,
    total_tokens=10**9,
    cost=10**6,
    wall_clock=3600,
    prices={"bench": (1.0, 2.0)},
)


def usage_agent(steps: int, **agent_kwargs: Any) -> Agent:
    """The workload agent on replies that report their token usage, as the HTTP clients' replies do.

    Its rows give each run a ``RunHandle``, as the limits row does: the two differ by the limits only.
    """
    return Agent(
        chat_generator=ScriptedChatGenerator([with_usage(m) for m in script(steps)]),
        tools=[add],
        max_agent_steps=steps + 1,
        **agent_kwargs,
    )


def limited_agent(steps: int) -> Agent:
    """``usage_agent`` with every usage limit on (its runs get a ``RunHandle``).

    Its replies report usage, so that tokens and cost are counted. Its baseline is ``usage_agent``
    without limits: both sum the replies' usage into ``token_usage``, which plain replies skip.
    """
    return usage_agent(steps, usage_limits=ALL_USAGE_LIMITS)


def cancellable() -> dict[str, Any]:
    """Run options: a handle that can cancel the run (never used)."""
    return {"cancel": RunHandle()}


def history(n: int) -> list[ChatMessage]:
    """A conversation of ``n`` messages to start from."""
    return [ChatMessage.from_user(f"earlier message number {i} with some words in it") for i in range(n)]


class WholeSnapshotEveryTransition(SQLiteSnapshotStore):
    """A durable store that encodes the whole snapshot at every point it is told of: what recording costs without deltas.

    The bytes are kept in memory.
    """

    def __init__(self) -> None:
        super().__init__(":memory:", durable=True)
        self.encoded: list[bytes] = []
        self.messages: list[ChatMessage] = []
        self.trace: list[Any] = []

    def observe(self, delta: RunDelta) -> None:
        """Encode the whole snapshot of the point the run is at."""
        self.messages = [*([] if delta.rewritten else self.messages), *delta.messages]
        self.trace += delta.trace
        if delta.fields is not None:
            whole = AgentSnapshot.model_construct(
                **delta.fields,
                messages=[m.to_dict() for m in self.messages],
                trace=[r.to_dict() for r in self.trace],
                created_at=now_iso(),
            )
            self.encoded.append(whole.to_bytes())


@dataclass(frozen=True)
class Configuration:
    """How to build the agent of one timed run, its input, and the setting (a context manager) it runs in."""

    make_agent: Callable[[], Agent]
    messages: list[ChatMessage]
    setting: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    #: Options of each run (made fresh for each: a ``RunHandle`` serves one run).
    run_options: Callable[[], dict[str, Any]] = dict

    def setup(self) -> Callable[[], object]:
        """Build the agent; return its run, to be timed."""
        return partial(self.make_agent().run, self.messages, **self.run_options())


def ignore_event(event: Event) -> None:
    """An ``on_event`` handler that does nothing: what remains is the cost of the events."""


@contextlib.contextmanager
def opentelemetry_no_op_export() -> Iterator[None]:
    """``agentfsm.telemetry`` on, with the SDK (batched spans, metrics aggregated in memory) exporting nothing.

    The SDK is imported here: ``peers/durable.py`` imports this module in a virtualenv without it.
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class NoExport(SpanExporter):
        """A span exporter that sends nothing: what remains is the cost of building the spans."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            """Drop the spans."""
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(NoExport()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry.instrument(tracer_provider, meter_provider)
    try:
        yield
    finally:
        telemetry.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()


@contextlib.contextmanager
def transition_logging() -> Iterator[None]:
    """``configure_logging()`` on (writing to memory) for the duration."""
    configure_logging(stream=io.StringIO())
    try:
        yield
    finally:
        use_standard_logging()


def take_turns(
    setups: dict[str, Setup],
    steps: int,
    runs: int,
    settings: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] | None = None,
) -> dict[str, dict[str, float]]:
    """Median and min microseconds per step (model call + tool call) of each setup.

    The setups take turns, ``runs`` times: in its turn, each collects the garbage left before its
    turn, makes an untimed run (its code and data back in the CPU caches) and a timed one, in its
    setting if it has one. A slow spell of the machine thus falls on every setup alike instead of
    on the one measured at that moment. ``peers/durable.py`` times its rows with it too;
    ``peers/workloads.py`` makes its processes take turns the same way (``timed_run``).
    """
    samples: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(runs):
        for name, setup in setups.items():
            with (settings or {}).get(name, contextlib.nullcontext)():
                samples[name].append(timed_run(setup) / (steps + 1) * 1e6)
    return {
        name: {"median_us": round(statistics.median(s), 1), "min_us": round(min(s), 1)} for name, s in samples.items()
    }


def per_step_us(configurations: dict[str, Configuration], steps: int, runs: int) -> dict[str, dict[str, float]]:
    """``take_turns`` for agentfsm configurations."""
    setups = {name: c.setup for name, c in configurations.items()}
    return take_turns(setups, steps, runs, {name: c.setting for name, c in configurations.items()})


def overhead(steps: int, runs: int) -> dict[str, Any]:
    """The configurations of the per-step workload, timed taking turns."""
    user = [ChatMessage.from_user("go")]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stores:

        def store(path: str, synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL") -> SQLiteSnapshotStore:
            # One database for every run, as an application keeps it (opening and closing a WAL database
            # costs milliseconds, and its checkpoints are then paid by the runs that trigger them).
            opened = SQLiteSnapshotStore(path, durable=True, synchronous=synchronous)
            stores.callback(opened.close)
            return opened

        configurations = {
            "plain": Configuration(partial(workload_agent, steps), user),
            "no-op hooks at before_llm, before_tool, on_exit": Configuration(
                partial(workload_agent, steps, hooks=NO_OP_HOOKS), user
            ),
            "logging": Configuration(partial(workload_agent, steps), user, transition_logging),
            "events to a no-op handler": Configuration(
                partial(workload_agent, steps), user, run_options=lambda: {"on_event": ignore_event}
            ),
            "plain, replies reporting usage": Configuration(partial(usage_agent, steps), user, run_options=cancellable),
            "all limits on": Configuration(partial(limited_agent, steps), user, run_options=cancellable),
            "loop detection": Configuration(partial(workload_agent, steps, loop_detection=LoopDetection()), user),
            "OpenTelemetry on, no-op exporter": Configuration(
                partial(workload_agent, steps), user, opentelemetry_no_op_export
            ),
            "whole_snapshot_encoded_at_every_transition_in_memory": Configuration(
                lambda: workload_agent(steps, snapshot_store=WholeSnapshotEveryTransition()), user
            ),
            "sqlite_durable_in_memory": Configuration(
                partial(workload_agent, steps, snapshot_store=store(":memory:")), user
            ),
            "sqlite_durable": Configuration(
                partial(workload_agent, steps, snapshot_store=store(f"{tmp}/normal.db")), user
            ),
            "sqlite_durable_synchronous_off": Configuration(
                partial(workload_agent, steps, snapshot_store=store(f"{tmp}/off.db", "OFF")), user
            ),
        }
        results: dict[str, Any] = per_step_us(configurations, steps, runs)
    tracemalloc.start()
    workload_agent(steps).run(user)
    results["peak_memory_kib"] = round(tracemalloc.get_traced_memory()[1] / 1024, 1)
    tracemalloc.stop()
    return results


class TimedStore(SQLiteSnapshotStore):
    """A durable store that times what storing each snapshot costs (commits included), except a run's first (full) one.

    The run's own part, working out what changed, is not in it (it is in the per-step figures).
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path, durable=True)
        self.elapsed_us = 0.0
        self.snapshots = 0

    def _timed(self, record: Callable[[], None], first: bool) -> None:
        started = time.perf_counter()
        record()
        if not first:
            self.elapsed_us += (time.perf_counter() - started) * 1e6
            self.snapshots += 1

    def observe(self, delta: RunDelta) -> None:
        """Store the snapshot, timed."""
        self._timed(partial(super().observe, delta), first=delta.rewritten)


def durable_write_us(size: int, steps: int, runs: int, tmp: Path) -> dict[str, float]:
    """Median and min over runs of the mean cost of one durable snapshot (commits included), after the first."""
    samples: list[float] = []
    store = TimedStore(tmp / f"timed-{size}.db")
    for _ in range(runs):
        store.elapsed_us, store.snapshots = 0.0, 0
        workload_agent(steps, snapshot_store=store).run(history(size))
        samples.append(store.elapsed_us / store.snapshots)
    store.close()
    return {"median_us": round(statistics.median(samples), 1), "min_us": round(min(samples), 1)}


def bare_loop_us(steps: int, runs: int) -> dict[str, float]:
    """The same workload as a hand-written ``while`` loop over plain dicts: the floor."""

    def add_numbers(a: int, b: int) -> int:
        return a + b

    replies = [
        {"role": "assistant", "tool_calls": [{"name": "add", "args": {"a": i, "b": 1}, "id": f"c{i}"}]}
        for i in range(steps)
    ]
    replies.append({"role": "assistant", "content": "done"})
    functions = {"add": add_numbers}

    def once() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        i = 0
        while True:
            reply = replies[i]
            i += 1
            messages.append(reply)
            calls = reply.get("tool_calls")
            if not calls:
                break
            for c in calls:
                messages.append({"role": "tool", "content": str(functions[c["name"]](**c["args"])), "id": c["id"]})

    once()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        once()
        samples.append((time.perf_counter() - started) / (steps + 1) * 1e6)
    return {"median_us": round(statistics.median(samples), 2), "min_us": round(min(samples), 2)}


class SleepyModel:
    """A model that takes 10 ms per call: ``steps - 1`` replies calling ``add``, then a text answer."""

    def __init__(self, index: int, steps: int) -> None:
        self.index, self.steps, self.calls = index, steps, 0

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, list[ChatMessage]]:
        """Not used: the concurrency benchmark is async."""
        raise NotImplementedError("the concurrency benchmark runs agents with run_async")

    async def run_async(
        self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any
    ) -> dict[str, list[ChatMessage]]:
        """Wait 10 ms, as a model server would, then reply: a tool call, or the final text."""
        await asyncio.sleep(0.01)
        step = self.calls
        self.calls += 1
        if step < self.steps - 1:
            call = ToolCall("add", {"a": self.index, "b": step}, id=f"{self.index}-{step}")
            return {"replies": [ChatMessage.from_assistant(tool_calls=[call])]}
        return {"replies": [ChatMessage.from_assistant(f"agent {self.index} done")]}


#: A gen-0 threshold for applications that keep thousands of runs alive: Python's default (700)
#: runs a collection every few hundred allocations, and the full ones scan every live run.
GC_TUNED = (50_000, 20, 20)

#: The concurrency table's rows: sync tools in worker threads or inline, and the application's gc thresholds.
CONCURRENCY_SETTINGS: dict[str, tuple[bool, tuple[int, int, int] | None]] = {
    "concurrency": (True, None),
    "concurrency_inline_tools": (False, None),
    "concurrency_gc_tuned": (True, GC_TUNED),
    "concurrency_inline_tools_gc_tuned": (False, GC_TUNED),
}


def run_concurrently(agents: int, steps: int, in_threads: bool) -> None:
    """``agents`` run_async runs of ``steps`` model calls on one new event loop; checks they did not mix."""

    async def run_all() -> list[dict[str, Any]]:
        runs = [
            Agent(
                chat_generator=SleepyModel(i, steps),
                tools=[add],
                max_agent_steps=steps,
                tool_invoker_kwargs={"sync_tools_in_threads": in_threads},
            ).run_async([ChatMessage.from_user(f"agent {i}")])
            for i in range(agents)
        ]
        return list(await asyncio.gather(*runs))

    results = asyncio.run(run_all())
    for i, result in enumerate(results):  # every run saw only its own messages and results
        assert result["messages"][0].text == f"agent {i}"
        assert result["last_message"].text == f"agent {i} done"
        tool_results = [m.tool_call_result for m in result["messages"] if m.tool_call_result]
        assert [r.result for r in tool_results] == [str(i + step) for step in range(steps - 1)]
        assert all(r.origin.id.startswith(f"{i}-") for r in tool_results)


def concurrency(agents: int, steps: int, step_us: float, runs: int) -> dict[str, dict[str, Any]]:
    """Wall time (median and min of ``runs``, the settings taking turns), memory and a cross-talk check per setting.

    The ideal is the model latency of one run (``steps`` x 10 ms); with ``step_us``, the CPU time
    of a step in a sync run, the ideal plus overhead adds what all the steps cost on one core.
    """
    walls: dict[str, list[float]] = {name: [] for name in CONCURRENCY_SETTINGS}
    default_threshold = gc.get_threshold()
    for _ in range(runs):
        for name, (in_threads, gc_threshold) in CONCURRENCY_SETTINGS.items():
            gc.collect()
            if gc_threshold is not None:
                gc.set_threshold(*gc_threshold)
            try:
                started = time.perf_counter()
                run_concurrently(agents, steps, in_threads)
                walls[name].append(time.perf_counter() - started)
            finally:
                gc.set_threshold(*default_threshold)
    ideal = steps * 0.01
    with_overhead = ideal + agents * steps * step_us / 1e6
    table = {}
    for name, (in_threads, _) in CONCURRENCY_SETTINGS.items():
        tracemalloc.start()
        run_concurrently(agents, steps, in_threads)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        wall = statistics.median(walls[name])
        table[name] = {
            "agents": agents,
            "steps": steps,
            "runs": runs,
            "wall_s": round(wall, 3),
            "wall_min_s": round(min(walls[name]), 3),
            "ideal_s": ideal,
            "ratio_to_ideal": round(wall / ideal, 2),
            "ideal_plus_overhead_s": round(with_overhead, 3),
            "ratio_to_ideal_plus_overhead": round(wall / with_overhead, 2),
            "peak_kib_per_run": round(peak / agents / 1024, 1),
            "cross_talk": "none (checked)",
        }
    return table


def concurrency_in_a_fresh_process(agents: int, steps: int, step_us: float, runs: int) -> dict[str, dict[str, Any]]:
    """``concurrency`` in a new interpreter (on the same CPU).

    When the collector runs, and how much a full collection scans, then depends on the workload,
    not on what the tables before it left.
    """
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
        return fresh.submit(concurrency, agents, steps, step_us, runs).result()


def peers(steps: int, runs: int) -> dict[str, Any]:
    """Run the workload on agentfsm, Haystack, LangGraph and pydantic-ai, a process each, taking turns.

    The process runs in the peers' own virtualenv (made on first use; agentfsm is installed there from this checkout).

    Returns what ``peers/workloads.py`` prints, or ``{"error": why}`` when nothing could be measured.
    The frameworks are installed one by one: the rows of one that cannot be installed say why.
    """
    venv = HERE / ".peers-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)

    def pip_install(*packages: str) -> str | None:
        """None once installed, else pip's last line of error."""
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *packages], capture_output=True, text=True, check=False
        )
        return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["pip failed"])[-1]

    failed = pip_install("-e", f"{HERE.parent}[dbos,mcp]")
    if failed is not None:
        return {"error": f"agentfsm could not be installed in {venv}: {failed}"}
    not_installed = {name: why for name, packages in PEER_PACKAGES.items() if (why := pip_install(*packages))}
    # The durable rows write to files: the kernel's writeback of what this process and pip wrote
    # before would otherwise land in their timed runs (seen as medians 40% above their minimums).
    os.sync()
    measured = run_script(python, "workloads.py", "the workload", steps, runs)
    if "error" in measured:
        return measured
    for row in measured["runs"].values():
        if "error" in row and row["framework"] in not_installed:
            row["error"] = f"not installed: {not_installed[row['framework']]}"
    measured["clients"] = model_clients(python, pip_install, runs)
    measured["mcp"] = mcp_tools(python, pip_install, runs)
    return measured


def mcp_tools(python: Path, pip_install: Callable[..., str | None], runs: int) -> dict[str, Any]:
    """What ``peers/mcp_tools.py`` prints: one MCP tool call through agentfsm and its peers, or ``{"error": why}``."""
    failed = pip_install(*MCP_PEERS)
    if failed is not None:
        return {"error": f"the MCP peers could not be installed: {failed}"}
    return run_script(python, "mcp_tools.py", "the MCP tools' benchmark", runs)


def model_clients(python: Path, pip_install: Callable[..., str | None], runs: int) -> dict[str, Any]:
    """What ``peers/clients.py`` prints: the model clients against the official SDKs, or ``{"error": why}``."""
    failed = pip_install(*CLIENT_SDKS)
    if failed is not None:
        return {"error": f"the SDKs could not be installed: {failed}"}
    return run_script(python, "clients.py", "the clients' benchmark", runs)


#: How long a peers' script may run (the whole workload table takes a few minutes).
SCRIPT_TIMEOUT_SECONDS = 1800


def run_script(python: Path, script: str, what: str, *args: object) -> dict[str, Any]:
    """The JSON that ``peers/<script>`` prints when ``python`` runs it, or ``{"error": why}`` when it fails."""
    try:
        done = subprocess.run(
            [str(python), str(HERE / "peers" / script), *map(str, args)],
            capture_output=True,
            text=True,
            check=False,
            timeout=SCRIPT_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{what} did not finish within {SCRIPT_TIMEOUT_SECONDS} s"}
    if done.returncode != 0:
        return {"error": f"{what} failed: {done.stderr.strip()[-300:]}"}
    measured: dict[str, Any] = json.loads(done.stdout)
    return measured


def durable_runs(python: Path, steps: int, runs: int, throughput_runs: int) -> dict[str, Any]:
    """What ``peers/durable.py`` prints, on a SQLite file and on a PostgreSQL server: ``{database: figures}``.

    ``python``: the peers' interpreter (for pydantic-ai's DBOSAgent), or this one without the peers.
    """
    sys.path.insert(0, str(HERE.parent))
    from tests.postgres import temporary_server

    def measure(url: str) -> dict[str, Any]:
        os.sync()
        return run_script(python, "durable.py", "the durable benchmark", url, steps, runs, throughput_runs)

    out: dict[str, Any] = {}
    pinned = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if pinned is not None:  # DBOS writes from its own threads, and the server is a process of its own
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out["SQLite"] = measure(f"sqlite:///{tmp}/dbos.sqlite")
        try:
            with temporary_server(fsync=True) as server:
                out["PostgreSQL"] = measure(server.url("bench"))
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:
            out["PostgreSQL"] = {"error": f"no PostgreSQL server: {exc}"}
    finally:
        if pinned is not None:
            os.sched_setaffinity(0, pinned)
    return out


#: The official model SDKs that the model clients are timed against.
CLIENT_SDKS = ["openai", "anthropic"]

#: The MCP tools that agentfsm's are timed against.
MCP_PEERS = ["mcp-haystack", "pydantic-ai-slim[mcp]"]

#: The peers' packages, framework by framework.
PEER_PACKAGES = {
    "haystack": ["haystack-ai"],
    "langgraph": ["langgraph", "langchain-core", "langgraph-checkpoint-sqlite"],
    "pydantic-ai": ["pydantic-ai-slim"],
}


def growth(sizes: list[int], steps: int, runs: int) -> dict[str, Any]:
    """Per-step cost, plain and durable, starting from conversations of different lengths."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stores:
        configurations = {}
        for size in sizes:
            start = history(size)
            store = SQLiteSnapshotStore(Path(tmp) / f"g{size}.db", durable=True)
            stores.callback(store.close)
            configurations[f"{size}/plain"] = Configuration(partial(workload_agent, steps), start)
            # A step is 4 transitions plus one tool completion: 5 snapshots in 2 commits.
            configurations[f"{size}/sqlite_durable"] = Configuration(
                partial(workload_agent, steps, snapshot_store=store), start
            )
        timed = per_step_us(configurations, steps, runs)
        return {
            str(size): {
                "plain": timed[f"{size}/plain"],
                "sqlite_durable": timed[f"{size}/sqlite_durable"],
                "durable_write": durable_write_us(size, steps, runs, Path(tmp)),
            }
            for size in sizes
        }


def compacting_hooks() -> dict[str, list[Any]]:
    """The compaction table's hooks: a sliding window that keeps two steps once the conversation passes 40 messages."""
    return {"before_llm": [CompactionHook(SlidingWindowCompactor(min_keep_steps=2), MessageCount(40))]}


def compaction(lengths: list[int], runs: int) -> dict[str, Any]:
    """Per-step cost of runs of each length (a step adds two messages), without and with compaction."""
    user = [ChatMessage.from_user("go")]
    out: dict[str, Any] = {}
    for steps in lengths:
        configurations = {
            "plain": Configuration(partial(workload_agent, steps), user),
            "compacted": Configuration(partial(workload_agent, steps, hooks=compacting_hooks()), user),
        }
        out[str(2 * steps + 2)] = per_step_us(configurations, steps, runs)
    return out


def _stored_bytes(path: Path) -> int:
    """The bytes a store's snapshot rows hold, read by another connection (as another process would)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT COALESCE(SUM(LENGTH(entries)), 0) FROM snapshot_batches").fetchone()[0])


def thread_turns(marks: list[int]) -> dict[str, Any]:
    """What turn ``n`` of one thread costs the SQLite store, plain and durable: the bytes it wrote, its writes' µs.

    One thread grows to ``max(marks)`` turns of a user message and a reply; at each mark the next turn
    is measured. The whole turn's µs are given too: the run builds and checks the conversation it
    continues in memory, which grows with it.
    """
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for durable in (False, True):
            path = Path(tmp) / f"thread-{durable}.db"
            store = SQLiteSnapshotStore(path, durable=durable)
            spent = [0.0]

            def timed(method: Callable[..., Any], spent: list[float] = spent) -> Callable[..., Any]:
                def call(*args: Any, **kwargs: Any) -> Any:
                    started = time.perf_counter()
                    try:
                        return method(*args, **kwargs)
                    finally:
                        spent[0] += time.perf_counter() - started

                return call

            for name in ("begin_turn", "release", "save", "observe"):  # its writes (reading the head is the run's)
                setattr(store, name, timed(getattr(store, name)))
            replies: list[ChatMessage | str] = ["A reply of a few words, as a chat has."] * (max(marks) + 1)
            agent = Agent(
                chat_generator=ScriptedChatGenerator(replies), system_prompt="Be brief.", snapshot_store=store
            )
            rows = {}
            for turn in range(1, max(marks) + 1):
                before, spent[0] = _stored_bytes(path), 0.0
                started = time.perf_counter()
                agent.run([ChatMessage.from_user(f"Question number {turn:05d}?")], thread="chat")
                took = time.perf_counter() - started
                if turn in marks:
                    rows[str(turn)] = {
                        "bytes": _stored_bytes(path) - before,
                        "store_us": round(spent[0] * 1e6, 1),
                        "turn_us": round(took * 1e6, 1),
                    }
            store.close()
            out["sqlite_durable" if durable else "sqlite"] = rows
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


def review_page(count: int, runs: int) -> dict[str, Any]:
    """Server time of the review page (ms) over ``count`` stored runs: the list (first, warm, a search, a filter) and a run's page.

    The runs are one step each (a user question, a call of ``add``, a reply), in one durable SQLite file.
    """
    import httpx

    from agentfsm.web import create_app

    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteSnapshotStore(Path(tmp) / "runs.db", durable=True)
        started = time.perf_counter()
        for i in range(count):
            workload_agent(1, snapshot_store=store).run([ChatMessage.from_user(f"Question {i:05d}: add one to {i}")])
        filled_s = time.perf_counter() - started
        run_id = store.runs()[count // 2].run_id
        store.close()
        store = SQLiteSnapshotStore(Path(tmp) / "runs.db")

        async def timed(urls: list[str]) -> list[float]:
            app = create_app(store)
            transport = httpx.ASGITransport(app=app)
            spent = []
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                for url in urls:
                    begun = time.perf_counter()
                    response = await client.get(url)
                    spent.append((time.perf_counter() - begun) * 1e3)
                    assert response.status_code == 200, (url, response.status_code)
            return spent

        def median_ms(url: str) -> float:
            return round(statistics.median(asyncio.run(timed([url] * (runs + 1)))[1:]), 1)

        first = asyncio.run(timed(["/"]))[0]
        out = {
            "runs": count,
            "fill_s": round(filled_s, 1),
            "list_first_ms": round(first, 1),
            "list_ms": median_ms("/"),
            "search_ms": median_ms(f"/?q=question+{count // 3:05d}"),
            "filter_sorted_ms": median_ms("/?status=done&sort=title&page=3"),
            "run_page_ms": median_ms(f"/runs/{run_id}"),
        }
        store.close()
    return out


def _time(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e6


def _resume(path: Path | None = None, store: SQLiteSnapshotStore | None = None, run_id: str = "") -> None:
    snapshot = AgentSnapshot.from_file(path) if path else store.latest(run_id)  # type: ignore[union-attr]
    Agent(chat_generator=ScriptedChatGenerator(script(1), position=1), tools=[add]).run(snapshot=snapshot)


def markdown(results: dict[str, Any]) -> str:
    """The results as the Markdown tables of RESULTS.md, which the documentation's performance page includes."""
    m = results["machine"]
    lines = [
        f"Measured {m['date']} on {m['machine']} ({m['cpus']} CPUs, pinned to CPU {m.get('pinned_cpu')}), "
        f"Python {m['python']}; "
        f"workload: {results['steps']} steps of (model call -> one `add` tool call) on a zero-latency scripted "
        f"model; the configurations of a table take turns, {results['runs']} timed runs each. "
        f"`import agentfsm`: {results['import_ms']} ms.",
        "",
        "| configuration | median µs/step | min µs/step |",
        "|---|---:|---:|",
        f"| bare `while` loop (the floor) | {results['bare_loop']['median_us']} | {results['bare_loop']['min_us']} |",
        f"| the same, at the end of the benchmark (steadiness of the machine) | "
        f"{results['bare_loop_at_end']['median_us']} | {results['bare_loop_at_end']['min_us']} |",
    ]
    for name, row in results["overhead"].items():
        if isinstance(row, dict):
            lines.append(f"| {name.replace('_', ' ')} | {row['median_us']} | {row['min_us']} |")
    lines += [
        "",
        f"Peak memory of one plain run: {results['overhead']['peak_memory_kib']} KiB (with the scripted model's "
        "record of every call's input, kept for tests; the peers table's agentfsm row runs on a minimal model).",
        "",
        "| history (messages) | plain µs/step | SQLite durable µs/step | one durable snapshot µs, commits included (median / min) |",
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
        "| messages at the end of the run | plain µs/step | with compaction µs/step (a sliding window of two steps past 40 messages) |",
        "|---:|---:|---:|",
    ]
    for size, row in results["compaction"].items():
        lines.append(f"| {size} | {row['plain']['median_us']} | {row['compacted']['median_us']} |")
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
    if results.get("threads"):
        lines += [
            "",
            "| turn of one thread (SQLite) | bytes the turn wrote | its writes µs | the whole turn µs |",
            "|---|---:|---:|---:|",
        ]
        for store, rows in results["threads"].items():
            for turn, row in rows.items():
                lines.append(
                    f"| {turn}, {store.replace('_', ' ')} | {row['bytes']} | {row['store_us']} | {row['turn_us']} |"
                )
    c, inline = results["concurrency"], results["concurrency_inline_tools"]
    lines += [
        "",
        f"Concurrency: {c['agents']} agents with `run_async` on one event loop, {c['steps']} model calls of 10 ms "
        f"each; cross-talk between runs: {c['cross_talk']}. Ideal: {c['ideal_s']} s of model latency; plus "
        f"overhead: {c['ideal_plus_overhead_s']} s, adding {c['agents'] * c['steps']} steps at the plain µs/step "
        f"above, all on one core. The settings take turns, {c['runs']} runs each; the ratios are by median.",
        "",
        "| sync tool calls | wall s (median / min) | x ideal | x (ideal + overhead) | peak KiB per run |",
        "|---|---:|---:|---:|---:|",
    ]
    tuned = "with `gc.set_threshold(50_000, 20, 20)` in the application"
    rows = (
        ("in worker threads (default)", c),
        ("inline on the loop (`sync_tools_in_threads=False`)", inline),
        (f"in worker threads, {tuned}", results["concurrency_gc_tuned"]),
        (f"inline on the loop, {tuned}", results["concurrency_inline_tools_gc_tuned"]),
    )
    for label, row in rows:
        lines.append(
            f"| {label} | {row['wall_s']} / {row['wall_min_s']} | {row['ratio_to_ideal']} | "
            f"{row['ratio_to_ideal_plus_overhead']} | "
            f"{row['peak_kib_per_run']} |"
        )
    lines += durable_table(results["durable"])
    if "checker" in results:
        lines += checker.table(results["checker"])
    peers = results["peers"]
    if "error" in peers:
        lines += ["", f"The peers were not measured: {peers['error']}"]
    elif peers:
        lines += peer_tables(peers)
    return "\n".join([lines[0], *target_table(results), *lines[1:]]) + "\n"


def durable_table(durable: dict[str, Any]) -> list[str]:
    """Durable runs on DBOS against in-process runs, agentfsm and pydantic-ai, per system database."""
    if not durable:
        return []
    databases = {name: m for name, m in durable.items() if name not in ("steps", "throughput_runs")}
    versions = next((m["versions"] for m in databases.values() if "versions" in m), {})
    lines = [
        "",
        f"Durable runs on DBOS {versions.get('dbos', '')} (`agentfsm.durable`), pydantic-ai "
        f"{versions.get('pydantic-ai', 'not installed')}: "
        f"{durable['steps']} steps of the same workload, each model call and each tool call a DBOS step (pydantic-ai's "
        "tool a `DBOS.step`), the four configurations taking turns in one process; runs per second: "
        f"{durable['throughput_runs']} one-tool-call runs from 8 threads at once. Not pinned to a CPU: DBOS "
        "writes from its own threads. SQLite: a file, DBOS's settings; PostgreSQL: Debian's server in a temporary "
        "directory on this machine, its default settings (fsync on).",
        "",
        "| system database | configuration | median µs/step | min µs/step | durable overhead µs/step | runs/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for database, measured in databases.items():
        if "error" in measured:
            lines.append(f"| {database} | {measured['error'][:150]} | | | | |")
            continue
        per_step, throughput = measured["per_step"], measured["runs_per_second"]
        for name, row in per_step.items():
            if "error" in row:
                lines.append(f"| {database} | {name}: {row['error'][:100]} | | | | |")
                continue
            framework = name.split(",")[0]
            plain = per_step.get(f"{framework}, in-process", {})
            extra = row["median_us"] - plain["median_us"] if "in-process" not in name and "median_us" in plain else None
            lines.append(
                f"| {database} | {name} | {row['median_us']} | {row['min_us']} | "
                f"{'' if extra is None else round(extra, 1)} | {throughput.get(name, '')} |"
            )
    return lines


#: The speed budget, as ratios to the peers measured in the same run: (what, agentfsm's row, the peer's row, at least).
BUDGET = (
    ("≥ 10x faster than Haystack's Agent per plain step", "agentfsm", "haystack", 10),
    (
        "≥ 25x faster than LangGraph's SqliteSaver, a checkpoint per step",
        "agentfsm, durable SQLite store in a file",
        "langgraph, SqliteSaver in a file",
        25,
    ),
)


#: The per-step costs bounded by a ratio: (target, row, the row it is a ratio to, at most).
RATIO_BUDGET = (
    ("events to a no-op handler ≤ 1.2x plain", "events to a no-op handler", "plain", 1.2),
    ("OpenTelemetry on, no-op exporter ≤ 2x plain", "OpenTelemetry on, no-op exporter", "plain", 2.0),
    ("logging on ≤ 2x plain", "logging", "plain", 2.0),
    (
        "all usage limits on ≤ 1.3x the same replies (reporting usage) without limits",
        "all limits on",
        "plain, replies reporting usage",
        1.3,
    ),
)


def target_table(results: dict[str, Any]) -> list[str]:
    """The speed budget, and where this run stands against it (by median), then the flatness the durable store promises."""
    growth = results["growth"]
    smallest, largest = growth[min(growth, key=int)], growth[max(growth, key=int)]
    flatness = largest["durable_write"]["median_us"] / smallest["durable_write"]["median_us"]
    runs = results["peers"].get("runs", {})
    rows: list[tuple[str, str, str]] = []
    for target, ours, theirs, at_least in BUDGET:
        if "median_us" in runs.get(ours, {}) and "median_us" in runs.get(theirs, {}):
            times = runs[theirs]["median_us"] / runs[ours]["median_us"]
            rows.append((target, f"{times:.1f}x", "yes" if times >= at_least else "no"))
        else:
            rows.append((target, "", "not measured"))
    compacted = results.get("compaction")
    if compacted:
        short, long = compacted[min(compacted, key=int)], compacted[max(compacted, key=int)]
        growth_with = long["compacted"]["median_us"] / short["compacted"]["median_us"]
        rows.append(
            (
                f"with compaction, a step of a {max(compacted, key=int)}-message run costs what one of a "
                f"{min(compacted, key=int)}-message run does (≤ 1.5x)",
                f"{growth_with:.2f}x",
                "yes" if growth_with <= 1.5 else "no",
            )
        )
    clients = results["peers"].get("clients", {}).get("rows")
    if clients:
        slowest = min(clients[sdk]["median_us"] / clients[ours]["median_us"] for ours, sdk in CLIENT_PAIRS)
        rows.append(
            (
                "model clients no slower than the openai and anthropic SDKs (the closest of 4 pairs)",
                f"{slowest:.1f}x",
                "yes" if slowest >= 1 else "no",
            )
        )
    mcp = results["peers"].get("mcp", {})
    if mcp.get("rows"):
        added = mcp_added_us(mcp)
        ours = added.pop("agentfsm MCPTool")
        rows.append(
            (
                "an MCP tool call adds the least over the mcp SDK's own call (agentfsm, mcp-haystack, pydantic-ai)",
                f"{ours:.0f} µs (others: {', '.join(f'{v:.0f}' for v in added.values())})",
                "yes" if all(ours <= v for v in added.values()) else "no",
            )
        )
    overhead = results["overhead"]
    for target, row, base, at_most in RATIO_BUDGET:
        if row in overhead and base in overhead:  # results written before a row was added lack it
            ratio = overhead[row]["median_us"] / overhead[base]["median_us"]
            rows.append((target, f"{ratio:.2f}x", "yes" if ratio <= at_most else "no"))
    rows.append(
        (
            "a hook firing ≤ 2 µs beyond the hook's own work",
            f"{hook_firing_us(results['overhead'])} µs",
            "yes" if hook_firing_us(results["overhead"]) <= 2 else "no",
        )
    )
    rows.append(
        (
            f"one durable snapshot flat from {min(growth, key=int)} to {max(growth, key=int)} messages "
            "(≤ 2x; a whole snapshot grows with the history)",
            f"{flatness:.2f}x",
            "yes" if flatness <= 2 else "no",
        )
    )
    threads = results.get("threads", {}).get("sqlite")
    if threads:
        first, last = threads[min(threads, key=int)], threads[max(threads, key=int)]
        ratio = last["bytes"] / first["bytes"]
        rows.append(
            (
                f"turn {max(threads, key=int)} of a thread writes what turn {min(threads, key=int)} does (≤ 1.1x bytes)",
                f"{ratio:.2f}x",
                "yes" if ratio <= 1.1 else "no",
            )
        )
    lines = ["", "| target (median) | this run | met |", "|---|---:|---|"]
    lines += [f"| {target} | {measured} | {verdict} |" for target, measured, verdict in rows]
    return lines


def peer_tables(peers: dict[str, Any]) -> list[str]:
    """The frameworks as they come, then the persisting pairs: each row compared with its agentfsm baseline."""
    runs, imports = peers["runs"], peers["import_ms"]

    def ratios(row: dict[str, Any]) -> str:
        baseline = runs[row["baseline"]]
        if "error" in baseline:
            return ""
        return f"{row['median_us'] / baseline['median_us']:.1f}x / {row['min_us'] / baseline['min_us']:.1f}x"

    def cells(name: str, row: dict[str, Any]) -> list[str]:
        if "error" in row:
            return [name, row["error"][:120], "", "", ""]
        return [
            f"{name} ({row['version']})",
            str(row["median_us"]),
            str(row["min_us"]),
            ratios(row),
            str(row["peak_kib"]),
        ]

    lines = [
        "",
        "| framework (same workload, a process each, taking turns run by run) | median µs/step | min µs/step | "
        "slower than agentfsm (by median / by min) | peak KiB of one run | import ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in runs.items():
        if name == row["framework"]:
            imported = imports.get(name)
            lines.append("| " + " | ".join([*cells(name, row), "" if imported is None else str(imported)]) + " |")
    lines += [
        "",
        "| with a checkpoint at every step (a process each, taking turns) | median µs/step | min µs/step | "
        "slower than agentfsm with the same kind of store (by median / by min) | peak KiB of one run |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in runs.items():
        if name != row["framework"]:
            lines.append("| " + " | ".join(cells(name, row)) + " |")
    return lines + client_table(peers.get("clients", {})) + mcp_table(peers.get("mcp", {}))


#: The MCP rows that are libraries around the SDK's client (the others are the floor and the SDK alone).
MCP_LIBRARIES = ("agentfsm MCPTool", "mcp-haystack MCPTool", "pydantic-ai MCPToolset")


def mcp_added_us(mcp: dict[str, Any]) -> dict[str, float]:
    """What each MCP library's call adds to the ``mcp`` SDK's own call in the same protocol revision (median µs)."""
    rows, compared_with = mcp["rows"], mcp.get("compared_with", {})
    return {
        name: rows[name]["median_us"] - rows[compared_with.get(name, "the mcp SDK's client alone")]["median_us"]
        for name in MCP_LIBRARIES
    }


def mcp_table(mcp: dict[str, Any]) -> list[str]:
    """One MCP tool call on a local stdio server, library by library."""
    if "error" in mcp:
        return ["", f"The MCP tools were not measured: {mcp['error']}"]
    if not mcp:
        return []
    rows, versions = mcp["rows"], mcp["versions"]
    added = mcp_added_us(mcp)
    lines = [
        "",
        f"MCP tools: one call of `add` on a local stdio server (the mcp SDK's, a process per row), "
        f"{mcp['calls_per_sample']} calls a sample, the rows taking turns; mcp {versions['mcp']}, "
        f"mcp-haystack {versions['mcp-haystack']}, pydantic-ai {versions['pydantic-ai-slim']}. Each library is "
        "compared with the SDK's own call in the protocol revision it speaks: the SDK's client (2026-07-28) for "
        "agentfsm and pydantic-ai, its session after the initialize handshake (2025-11-25) for mcp-haystack.",
        "",
        "| row | median µs/call | min µs/call | added to the SDK's call (median) |",
        "|---|---:|---:|---:|",
    ]
    for name, row in rows.items():
        extra = f"{added[name]:.0f}" if name in added else ""
        lines.append(f"| {name} | {row['median_us']} | {row['min_us']} | {extra} |")
    return lines


#: The model clients' rows and the SDK rows they are compared with.
CLIENT_PAIRS = tuple(
    (f"agentfsm {ours}{how}", f"{sdk} SDK{how}")
    for ours, sdk in (("OpenAIChatGenerator", "openai"), ("AnthropicChatGenerator", "anthropic"))
    for how in ("", ", streamed")
)


def client_table(clients: dict[str, Any]) -> list[str]:
    """The model clients against the official SDKs, request by request."""
    if "error" in clients:
        return ["", f"The model clients were not measured: {clients['error']}"]
    if not clients:
        return []
    rows, versions = clients["rows"], clients["versions"]
    lines = [
        "",
        f"Model clients: one request to a local keep-alive HTTP server (in the same process) that answers at once "
        f"with a short prepared reply, {clients['requests_per_sample']} requests a sample, the clients taking turns; "
        f"openai {versions['openai']}, anthropic {versions['anthropic']}, httpx {versions['httpx']}.",
        "",
        "| client | median µs/request | min µs/request | the SDK's median / ours |",
        "|---|---:|---:|---:|",
    ]
    for ours, sdk in CLIENT_PAIRS:
        ratio = rows[sdk]["median_us"] / rows[ours]["median_us"]
        lines.append(f"| {ours} | {rows[ours]['median_us']} | {rows[ours]['min_us']} | {ratio:.1f}x |")
        lines.append(f"| {sdk} | {rows[sdk]['median_us']} | {rows[sdk]['min_us']} | |")
    return lines


def pin_to_one_cpu(cpu: int | None) -> int | None:
    """Run this process, and the peers' process it starts, on one CPU.

    Migrations between CPUs of different speed (common on virtual machines) would otherwise mix in their difference.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    chosen = max(os.sched_getaffinity(0)) if cpu is None else cpu
    os.sched_setaffinity(0, {chosen})
    return chosen


#: The rows of agentfsm's own table that ``--only`` can time.
OWN_ROWS: dict[str, Callable[[int], Configuration]] = {
    "plain": lambda steps: Configuration(partial(workload_agent, steps), [ChatMessage.from_user("go")]),
    "hooks": lambda steps: Configuration(
        partial(workload_agent, steps, hooks=NO_OP_HOOKS), [ChatMessage.from_user("go")]
    ),
    "events": lambda steps: Configuration(
        partial(workload_agent, steps), [ChatMessage.from_user("go")], run_options=lambda: {"on_event": ignore_event}
    ),
    "usage": lambda steps: Configuration(
        partial(usage_agent, steps), [ChatMessage.from_user("go")], run_options=cancellable
    ),
    "limits": lambda steps: Configuration(
        partial(limited_agent, steps), [ChatMessage.from_user("go")], run_options=cancellable
    ),
    "logging": lambda steps: Configuration(
        partial(workload_agent, steps), [ChatMessage.from_user("go")], transition_logging
    ),
    "otel": lambda steps: Configuration(
        partial(workload_agent, steps), [ChatMessage.from_user("go")], opentelemetry_no_op_export
    ),
}
#: How many stored runs the review page's row lists.
REVIEW_RUNS = 10_000
#: Some of the rows of ``peers/workloads.py`` (its ``CONFIGURATIONS``), for ``--help``.
PEER_ROWS = ("agentfsm", "haystack", "langgraph", "pydantic-ai")


def only(rows: list[str], steps: int, runs: int) -> dict[str, Any]:
    """Time only ``rows``: agentfsm's own (``OWN_ROWS``) taking turns here, the peers' in their virtualenv.

    With both ``plain`` and ``hooks``, what a hook firing adds; with ``plain`` and ``events``, ``limits``,
    ``logging`` or ``otel``, their ratio to plain; with the peers' ``agentfsm`` and
    ``haystack`` rows, how many times faster agentfsm is.
    """
    own = {name: OWN_ROWS[name](steps) for name in rows if name in OWN_ROWS}
    out: dict[str, Any] = per_step_us(own, steps, runs) if own else {}
    if "plain" in out and "hooks" in out:
        out["hook firing us"] = round((out["hooks"]["median_us"] - out["plain"]["median_us"]) / 2, 2)
    for name in ("events", "logging", "otel"):
        if "plain" in out and name in out:
            out[f"{name} x plain"] = round(out[name]["median_us"] / out["plain"]["median_us"], 2)
    if "usage" in out and "limits" in out:
        out["limits x usage"] = round(out["limits"]["median_us"] / out["usage"]["median_us"], 2)
    if "checker" in rows:
        out["checker"] = checker.speed()
    if "review" in rows:
        out["review"] = review_page(REVIEW_RUNS, runs)
    peer_rows = [name for name in rows if name not in OWN_ROWS and name not in ("checker", "review")]
    if peer_rows:
        python = HERE / ".peers-venv" / "bin" / "python"
        measured = run_script(python, "workloads.py", "the workload", steps, runs, ",".join(peer_rows))
        out["peers"] = measured.get("runs", measured)
        timed = out["peers"]
        if "median_us" in timed.get("agentfsm", {}) and "median_us" in timed.get("haystack", {}):
            out["times faster than haystack"] = round(
                timed["haystack"]["median_us"] / timed["agentfsm"]["median_us"], 2
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny workload, to check that the benchmark runs")
    parser.add_argument("--out", type=Path, default=HERE, help="directory for results.json and RESULTS.md")
    parser.add_argument("--no-peers", action="store_true", help="skip Haystack, LangGraph and pydantic-ai")
    parser.add_argument("--cpu", type=int, help="the CPU to run on (default: the last one this process may use)")
    parser.add_argument(
        "--only",
        help="time only these rows, comma-separated, and print them as JSON (no file is written): "
        f"{', '.join(OWN_ROWS)}, checker (check_agent's speed), review (the review page over {REVIEW_RUNS} runs) and the peers' rows by name ({', '.join(PEER_ROWS)}, ...)",
    )
    args = parser.parse_args(argv)
    cpu = pin_to_one_cpu(args.cpu)
    steps, runs, sizes = (3, 2, [10, 100]) if args.quick else (50, 20, [10, 100, 1000])
    if args.only:
        sys.stdout.write(json.dumps(only(args.only.split(","), steps, runs), indent=2) + "\n")
        return 0
    agents = 20 if args.quick else 1000
    bare = bare_loop_us(steps, runs)
    agentfsm_import_ms = import_ms("agentfsm", max(runs // 4, 3))
    per_step = overhead(steps, runs)
    step_us = per_step["plain"]["median_us"]
    results = {
        "machine": {
            "date": datetime.now(UTC).date().isoformat(),
            "machine": f"{platform.system()} {platform.machine()}",
            "cpus": os.cpu_count(),
            "pinned_cpu": cpu,
            "python": platform.python_version(),
        },
        "steps": steps,
        "runs": runs,
        "bare_loop": bare,
        "import_ms": agentfsm_import_ms,
        "overhead": per_step,
        "growth": growth(sizes, steps, runs),
        "snapshots": snapshot_costs(sizes, runs),
        "compaction": compaction([5, 20] if args.quick else [50, 500], runs),
        "threads": thread_turns([2, 5] if args.quick else [10, 1000]),
        **concurrency_in_a_fresh_process(agents, 10, step_us, 1 if args.quick else 5),
    }
    if not (args.quick or args.no_peers):
        results["peers"] = peers(steps, runs)
    else:
        results["peers"] = {}
    peers_python = HERE / ".peers-venv" / "bin" / "python"
    use_peers = not (args.quick or args.no_peers) and peers_python.exists()
    durable_steps, throughput_runs = (2, 10) if args.quick else (10, 200)
    results["durable"] = {
        "steps": durable_steps,
        "throughput_runs": throughput_runs,
        **durable_runs(peers_python if use_peers else Path(sys.executable), durable_steps, runs, throughput_runs),
    }
    results["checker"] = checker.speed(args.quick)
    results["review"] = review_page(50 if args.quick else REVIEW_RUNS, runs)
    # The same floor measured again at the end: how steady the machine was during the run.
    results["bare_loop_at_end"] = bare_loop_us(steps, runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "RESULTS.md").write_text(markdown(results), encoding="utf-8")
    sys.stdout.write(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
