"""The benchmark workload on agentfsm and its peers, side by side, in the peers virtualenv made by ``bench/run.py``.

For each configuration: a zero-latency scripted model (replies built before the run), STEPS steps
of (model call -> one ``add(a, b)`` tool call), then a text answer. The agent is built before the
clock starts and only the run is timed.

Each configuration runs in a process of its own, which loads its framework only (an application
runs one), and the processes take turns, RUNS times (``timed_turns``; STEPS, RUNS and ONLY reach
them in ``sys.argv``, which the ``spawn`` start method copies): in its turn, a configuration's
process collects the garbage left before its turn, makes an untimed run (its code and data back in
the CPU caches) and a timed one. A slow spell of the machine thus falls on all of them alike, and
no configuration runs in a heap and caches that another's runs left behind (in one process,
LangGraph's and pydantic-ai's runs made agentfsm's ~6% slower and Haystack's ~2%). A process that
fails or dies gives its row an error; the others are timed. After the turns, one more run of each
is traced with ``tracemalloc`` (its peak), and each framework's import is timed in fresh
interpreters.

Besides the four frameworks as they come, two pairs persist the run at every step: agentfsm's
durable SQLite store and LangGraph's checkpointers, in memory and in an SQLite file (both files in
WAL mode with ``synchronous=NORMAL``; LangGraph with ``durability="sync"``, which, like agentfsm's
durable store, writes a step's checkpoint before the next step starts).

Prints one JSON object: ``{"runs": {configuration: {"framework", "baseline", and "median_us",
"min_us", "peak_kib", "version" or "error"}}, "import_ms": {framework: ms, or None if it cannot
be imported}}``; ``baseline`` is the agentfsm configuration a row is compared with.
"""

from __future__ import annotations

import gc
import itertools
import json
import multiprocessing
import sqlite3
import statistics
import sys
import tempfile
import traceback
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: timing.py, which imports no framework
from timing import Setup, import_ms, timed_run

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
#: The configurations to time (comma-separated names of ``CONFIGURATIONS``; all when not given).
ONLY = sys.argv[3].split(",") if len(sys.argv) > 3 else None
#: Where the SQLite files of the persisting configurations go (removed at exit).
FILES = tempfile.TemporaryDirectory()
#: None: no persistence; "memory" or "file": a checkpoint at every step, kept in memory or in an SQLite file.
Store = Literal["memory", "file"] | None


def peak_kib(setup: Setup) -> float:
    """Peak memory of one run (the Python allocations ``tracemalloc`` sees), the agent built before."""
    gc.collect()
    run_once = setup()
    tracemalloc.start()
    try:
        run_once()
        return round(tracemalloc.get_traced_memory()[1] / 1024, 1)
    finally:
        tracemalloc.stop()


def sqlite_file(name: str) -> str:
    """Where the persisting configuration ``name`` keeps its SQLite file."""
    return str(Path(FILES.name) / f"{name}.sqlite")


def agentfsm(store: Store = None) -> tuple[Setup, str]:
    """The workload on agentfsm (with a durable SQLite store when ``store`` names one), and its version."""
    from agentfsm import Agent, ChatMessage, ToolCall, tool
    from agentfsm.stores import SQLiteSnapshotStore

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    class ScriptedGenerator:
        """The same minimal scripted model as the peers'.

        agentfsm's ScriptedChatGenerator also records every call's input for tests, which the peers' models do not do.
        """

        def __init__(self) -> None:
            calls = [ToolCall("add", {"a": i, "b": 1}, id=f"c{i}") for i in range(STEPS)]
            self.replies = [ChatMessage.from_assistant(tool_calls=[call]) for call in calls]
            self.replies.append(ChatMessage.from_assistant("done"))
            self.calls = 0

        def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
            self.calls += 1
            return {"replies": [self.replies[self.calls - 1]]}

    # One database for every run, as an application keeps it (each run is a new run id in it).
    snapshot_store = None
    if store is not None:
        path = ":memory:" if store == "memory" else sqlite_file("agentfsm")
        snapshot_store = SQLiteSnapshotStore(path, durable=True, synchronous="NORMAL")

    def setup() -> Callable[[], None]:
        agent = Agent(
            chat_generator=ScriptedGenerator(), tools=[add], max_agent_steps=STEPS + 1, snapshot_store=snapshot_store
        )
        agent.warm_up()  # outside the timed run, as Haystack's agent is warmed up

        def once() -> None:
            result = agent.run([ChatMessage.from_user("go")])
            assert result["last_message"].text == "done"

        return once

    return setup, version("agentfsm")


def haystack() -> tuple[Setup, str]:
    """The workload on Haystack's Agent, and its version."""
    from haystack import component
    from haystack.components.agents import Agent
    from haystack.dataclasses import ChatMessage, ToolCall
    from haystack.tools import Tool

    @component
    class ScriptedGenerator:
        def __init__(self) -> None:
            calls = [ToolCall(tool_name="add", arguments={"a": i, "b": 1}, id=f"c{i}") for i in range(STEPS)]
            self.replies = [ChatMessage.from_assistant(tool_calls=[call]) for call in calls]
            self.replies.append(ChatMessage.from_assistant("done"))
            self.calls = 0

        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
            self.calls += 1
            return {"replies": [self.replies[self.calls - 1]]}

    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    add = Tool(name="add", description="Add two integers.", parameters=schema, function=lambda a, b: a + b)

    def setup() -> Callable[[], None]:
        agent = Agent(chat_generator=ScriptedGenerator(), tools=[add], max_agent_steps=STEPS + 5)
        agent.warm_up()

        def once() -> None:
            result = agent.run(messages=[ChatMessage.from_user("go")])
            assert result["last_message"].text == "done"

        return once

    return setup, version("haystack-ai")


def langgraph(store: Store = None) -> tuple[Setup, str]:
    """The workload on LangGraph's prebuilt ReAct agent (with a checkpointer when ``store`` names one), and its version."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    class ScriptedModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    def script() -> Any:
        replies = [
            AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": i, "b": 1}, "id": f"c{i}"}])
            for i in range(STEPS)
        ]
        return iter([*replies, AIMessage(content="done")])

    checkpointer: Any = None
    if store == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        checkpointer = InMemorySaver()
    elif store == "file":
        from langgraph.checkpoint.sqlite import SqliteSaver

        connection = sqlite3.connect(sqlite_file("langgraph"), check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")  # as agentfsm's store (SQLite's default is FULL)
        checkpointer = SqliteSaver(connection)
    threads = itertools.count()

    def setup() -> Callable[[], None]:
        agent = create_react_agent(ScriptedModel(messages=script()), [add], checkpointer=checkpointer)
        # Each run is a new conversation (thread), as each agentfsm run is a new run id.
        config = {"recursion_limit": 4 * STEPS + 10, "configurable": {"thread_id": f"t{next(threads)}"}}
        durability = "sync" if checkpointer is not None else None

        def once() -> None:
            result = agent.invoke({"messages": [("user", "go")]}, config, durability=durability)
            assert result["messages"][-1].content == "done"

        return once

    return setup, version("langgraph")


def pydantic_ai() -> tuple[Setup, str]:
    """The workload on pydantic-ai's Agent, and its version."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    def setup() -> Callable[[], None]:
        replies = [
            ModelResponse(parts=[ToolCallPart(tool_name="add", args={"a": i, "b": 1}, tool_call_id=f"c{i}")])
            for i in range(STEPS)
        ]
        replies.append(ModelResponse(parts=[TextPart("done")]))
        script = iter(replies)

        def model(messages: Any, info: AgentInfo) -> ModelResponse:
            return next(script)

        agent = Agent(FunctionModel(model))

        @agent.tool_plain
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        def once() -> None:
            result = agent.run_sync("go", usage_limits=UsageLimits(request_limit=STEPS + 5))
            assert result.output == "done"

        return once

    return setup, version("pydantic-ai-slim")


#: What ``import`` each framework's row times.
FRAMEWORKS = {
    "agentfsm": "agentfsm",
    "haystack": "haystack.components.agents",
    "langgraph": "langgraph.prebuilt",
    "pydantic-ai": "pydantic_ai",
}


@dataclass(frozen=True)
class Configuration:
    """One timed row: the framework, how to build its workload, and the agentfsm row it is compared with."""

    framework: str
    workload: Callable[[], tuple[Setup, str]]
    baseline: str


#: The frameworks as they come, then the persisting pairs (each compared with agentfsm's same kind of store).
CONFIGURATIONS = {
    "agentfsm": Configuration("agentfsm", agentfsm, "agentfsm"),
    "haystack": Configuration("haystack", haystack, "agentfsm"),
    "langgraph": Configuration("langgraph", langgraph, "agentfsm"),
    "pydantic-ai": Configuration("pydantic-ai", pydantic_ai, "agentfsm"),
    "agentfsm, durable SQLite store in memory": Configuration(
        "agentfsm", partial(agentfsm, "memory"), "agentfsm, durable SQLite store in memory"
    ),
    "langgraph, InMemorySaver": Configuration(
        "langgraph", partial(langgraph, "memory"), "agentfsm, durable SQLite store in memory"
    ),
    "agentfsm, durable SQLite store in a file": Configuration(
        "agentfsm", partial(agentfsm, "file"), "agentfsm, durable SQLite store in a file"
    ),
    "langgraph, SqliteSaver in a file": Configuration(
        "langgraph", partial(langgraph, "file"), "agentfsm, durable SQLite store in a file"
    ),
}


def serve(name: str, connection: Any) -> None:
    """One configuration's process: build its workload, then time a run of it whenever asked.

    Sends its version once built (or ``{"error": ...}``); then, for each ``True`` received, the
    seconds of one timed run (or ``{"error": ...}``); for ``None``, the peak memory of one run.
    """
    warnings.simplefilter("ignore")  # deprecation notices of the peers are not results
    try:
        setup, version = CONFIGURATIONS[name].workload()
        setup()()  # a configuration that cannot run the workload is reported, not timed
    except Exception as exc:
        connection.send({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)})
        return
    connection.send(version)
    while connection.recv() is not None:
        try:
            connection.send(timed_run(setup))
        except Exception as exc:
            connection.send({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)})
            return
    connection.send(peak_kib(setup))


def _answer(connection: Any) -> Any:
    """What a configuration's process sends next, or an error saying it ended without an answer."""
    try:
        return connection.recv()
    except EOFError:
        return {"error": "its process ended without an answer"}


def timed_turns(chosen: dict[str, Configuration]) -> dict[str, dict[str, Any]]:
    """Each configuration's median and min µs per step and peak memory (or its error), a process each.

    One process is asked at a time (the others wait for their turn), each inheriting this one's CPU.
    """
    context = multiprocessing.get_context("spawn")
    workers: dict[str, tuple[Any, Any]] = {}
    results: dict[str, dict[str, Any]] = {}
    versions: dict[str, str] = {}
    try:
        for name in chosen:
            ours, theirs = context.Pipe()
            process = context.Process(target=serve, args=(name, theirs), daemon=True)
            process.start()
            theirs.close()  # this process keeps only its own end: a worker that dies ends the pipe
            workers[name] = (process, ours)
            built = _answer(ours)
            if isinstance(built, dict):
                results[name] = built
            else:
                versions[name] = built
        samples: dict[str, list[float]] = {name: [] for name in versions}
        for _ in range(RUNS):
            for name in [n for n in samples if n not in results]:
                connection = workers[name][1]
                connection.send(True)
                answer = _answer(connection)
                if isinstance(answer, dict):
                    results[name] = answer
                else:
                    samples[name].append(answer / (STEPS + 1) * 1e6)
        for name, taken in samples.items():
            if name in results:
                continue
            connection = workers[name][1]
            connection.send(None)
            results[name] = {
                "median_us": round(statistics.median(taken), 1),
                "min_us": round(min(taken), 1),
                "peak_kib": _answer(connection),
                "version": versions[name],
            }
    finally:
        for process, connection in workers.values():
            connection.close()
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
    return results


def main() -> None:
    """Time every configuration taking turns, a process each, and print the figures as JSON."""
    chosen = {name: c for name, c in CONFIGURATIONS.items() if ONLY is None or name in ONLY}
    results = timed_turns(chosen)
    runs = {name: {"framework": c.framework, "baseline": c.baseline, **results[name]} for name, c in chosen.items()}
    imports = {name: import_ms(module, 3) for name, module in FRAMEWORKS.items() if ONLY is None}
    print(json.dumps({"runs": runs, "import_ms": imports}))


if __name__ == "__main__":
    main()
