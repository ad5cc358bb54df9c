"""The benchmark workload on agentfsm and its peers, side by side, in the peers virtualenv made by ``bench/run.py``.

For each framework: a zero-latency scripted model (replies built before the run), STEPS steps of
(model call -> one ``add(a, b)`` tool call), then a text answer. The agent is built before the
clock starts and only the run is timed. The frameworks take turns, RUNS times: in its turn, each
collects the garbage left before its turn, makes an untimed run (its code and data back in the CPU
caches) and a timed one; a slow spell of the machine thus falls on all of them alike. Prints one JSON
object: ``{framework: {"median_us": ..., "min_us": ..., "version": ...} or {"error": "..."}}``.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 20


#: ``setup()`` builds an agent and returns the run to time.
Setup = Callable[[], Callable[[], None]]


def take_turns(setups: dict[str, Setup]) -> dict[str, dict[str, float]]:
    """Median and min µs per step of each framework, over RUNS turns of (untimed run, timed run) each."""
    samples: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(RUNS):
        for name, setup in setups.items():
            gc.collect()  # each run pays for its own garbage, not for what the one before left
            setup()()
            run_once = setup()
            started = time.perf_counter()
            run_once()
            samples[name].append((time.perf_counter() - started) / (STEPS + 1) * 1e6)
    return {
        name: {"median_us": round(statistics.median(s), 1), "min_us": round(min(s), 1)} for name, s in samples.items()
    }


def agentfsm() -> tuple[Setup, str]:
    from agentfsm import Agent, ChatMessage, ToolCall, tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    class ScriptedGenerator:
        """The same minimal scripted model as the peers' (agentfsm's ScriptedChatGenerator also
        records every call's input for tests, which the peers' models do not do)."""

        def __init__(self) -> None:
            calls = [ToolCall("add", {"a": i, "b": 1}, id=f"c{i}") for i in range(STEPS)]
            self.replies = [ChatMessage.from_assistant(tool_calls=[call]) for call in calls]
            self.replies.append(ChatMessage.from_assistant("done"))
            self.calls = 0

        def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
            self.calls += 1
            return {"replies": [self.replies[self.calls - 1]]}

    def setup() -> Callable[[], None]:
        agent = Agent(chat_generator=ScriptedGenerator(), tools=[add], max_agent_steps=STEPS + 1)

        def once() -> None:
            result = agent.run([ChatMessage.from_user("go")])
            assert result["last_message"].text == "done"

        return once

    return setup, version("agentfsm")


def haystack() -> tuple[Setup, str]:
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


def langgraph() -> tuple[Setup, str]:
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

    def setup() -> Callable[[], None]:
        agent = create_react_agent(ScriptedModel(messages=script()), [add])

        def once() -> None:
            result = agent.invoke({"messages": [("user", "go")]}, {"recursion_limit": 4 * STEPS + 10})
            assert result["messages"][-1].content == "done"

        return once

    return setup, version("langgraph")


def pydantic_ai() -> tuple[Setup, str]:
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


FRAMEWORKS = {"agentfsm": agentfsm, "haystack": haystack, "langgraph": langgraph, "pydantic-ai": pydantic_ai}


def main() -> None:
    warnings.simplefilter("ignore")  # deprecation notices of the peers are not results
    results: dict[str, Any] = {}
    setups: dict[str, Setup] = {}
    versions: dict[str, str] = {}
    for name, workload in FRAMEWORKS.items():
        try:
            setups[name], versions[name] = workload()
            setups[name]()()  # a framework that cannot run the workload is reported, not timed
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)}
            setups.pop(name, None)
    for name, timing in take_turns(setups).items():
        results[name] = {**timing, "version": versions[name]}
    print(json.dumps({name: results[name] for name in FRAMEWORKS}))


if __name__ == "__main__":
    main()
