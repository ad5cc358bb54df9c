"""Durable runs on DBOS: agentfsm's DurableAgent and pydantic-ai's DBOSAgent, in-process and durable, one process.

Usage: ``durable.py SYSTEM_DATABASE_URL STEPS RUNS THROUGHPUT_RUNS`` (``bench/run.py`` runs it once on
a SQLite file and once on a PostgreSQL server, in the peers virtualenv when there is one).

The workload is the benchmark's: STEPS steps of (model call -> one ``add(a, b)`` tool call), then a
text answer, from a zero-latency model that answers from the conversation (a durable run's model
must: a recovered run asks again where it stopped). Durable, each model call and each tool call is a
DBOS step on both sides (pydantic-ai's tool is a ``DBOS.step``, as its documentation asks for
tools with side effects). The four configurations take turns (``run.take_turns``). Then the runs
per second: THROUGHPUT_RUNS one-tool-call runs started at once from 8 threads, over the wall time.

Prints one JSON object: ``{"per_step": {configuration: {"median_us", "min_us"} or {"error"}},
"runs_per_second": {configuration: float or {"error"}}, "versions": {...}}``.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: run.py times runs
from run import Setup, take_turns

URL, STEPS, RUNS, THROUGHPUT_RUNS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def agentfsm_agents(steps: int) -> tuple[Any, Any]:
    """The workload's Agent and its DurableAgent (registered with DBOS: call before it launches)."""
    from agentfsm import Agent, ChatMessage, ToolCall, tool
    from agentfsm.durable import DurableAgent

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    class Model:
        def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> Any:
            done = sum(1 for m in messages if m.tool_call_result is not None)
            if done < steps:
                call = ToolCall("add", {"a": done, "b": 1}, id=f"c{done}")
                return {"replies": [ChatMessage.from_assistant(tool_calls=[call])]}
            return {"replies": [ChatMessage.from_assistant("done")]}

    agent = Agent(chat_generator=Model(), tools=[add], max_agent_steps=steps + 5)
    return agent, DurableAgent(agent, f"bench{steps}")


def pydantic_ai_agents(steps: int) -> tuple[Any, Any]:
    """The workload on pydantic-ai, and its DBOSAgent (registered with DBOS: call before it launches)."""
    from dbos import DBOS
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSAgent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    def model(messages: Any, info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages for p in m.parts if isinstance(p, ToolReturnPart))
        if done < steps:
            return ModelResponse(
                parts=[ToolCallPart(tool_name="add", args={"a": done, "b": 1}, tool_call_id=f"c{done}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), name=f"bench{steps}")

    @agent.tool_plain
    @DBOS.step(name=f"bench{steps}.add")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    limits = UsageLimits(request_limit=steps + 5)
    durable = DBOSAgent(agent)
    return (lambda: agent.run_sync("go", usage_limits=limits)), (lambda: durable.run_sync("go", usage_limits=limits))


def main() -> None:
    """Build both frameworks' agents, launch DBOS, time them, print JSON."""
    warnings.simplefilter("ignore")
    from dbos import DBOS

    from agentfsm import ChatMessage
    from agentfsm.durable import launch

    errors: dict[str, str] = {}
    runners: dict[str, dict[int, Callable[[], object]]] = {}
    for steps in (STEPS, 1):
        agent, durable = agentfsm_agents(steps)
        messages = [ChatMessage.from_user("go")]
        runners.setdefault("agentfsm, in-process", {})[steps] = lambda a=agent, m=messages: a.run(m)
        runners.setdefault("agentfsm, durable", {})[steps] = lambda d=durable, m=messages: d.run(
            m, run_id=uuid.uuid4().hex
        )
        try:
            plain, durable_pydantic = pydantic_ai_agents(steps)
            runners.setdefault("pydantic-ai, in-process", {})[steps] = plain
            runners.setdefault("pydantic-ai, DBOSAgent", {})[steps] = durable_pydantic
        except Exception as exc:
            errors["pydantic-ai, in-process"] = errors["pydantic-ai, DBOSAgent"] = f"{type(exc).__name__}: {exc}"
    launch(URL, executor_id="bench", queues={})
    try:
        setups: dict[str, Setup] = {}
        for name, by_steps in runners.items():
            try:
                by_steps[STEPS]()  # a configuration that cannot run the workload is reported, not timed
                setups[name] = lambda run=by_steps[STEPS]: run
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc} {traceback.format_exc(limit=2)}"
        per_step: dict[str, Any] = {name: {"error": why} for name, why in errors.items()}
        per_step.update(take_turns(setups, STEPS, RUNS))
        throughput: dict[str, Any] = {name: {"error": why} for name, why in errors.items()}
        for name in setups:
            run_one = runners[name][1]
            with ThreadPoolExecutor(8) as pool:
                started = time.perf_counter()
                for future in [pool.submit(run_one) for _ in range(THROUGHPUT_RUNS)]:
                    future.result()
                throughput[name] = round(THROUGHPUT_RUNS / (time.perf_counter() - started), 1)
    finally:
        DBOS.destroy()
    versions = {"dbos": version("dbos"), "agentfsm": version("agentfsm")}
    try:
        versions["pydantic-ai"] = version("pydantic-ai-slim")
    except Exception:
        versions["pydantic-ai"] = "not installed"
    print(json.dumps({"per_step": per_step, "runs_per_second": throughput, "versions": versions}))


if __name__ == "__main__":
    main()
