"""The benchmark workload on peer frameworks: run inside the peers virtualenv made by ``bench/run.py --peers``.

For each peer: a zero-latency scripted model (replies built before the run, as agentfsm's
ScriptedChatGenerator does), STEPS steps of (model call -> one ``add(a, b)`` tool call), then a text
answer; one warm-up run, then RUNS timed runs. As for agentfsm, the agent is built before the clock
starts and only the run is timed. Prints one JSON object:
``{peer: {"median_us": ..., "min_us": ..., "version": ...} or {"error": "..."}}``.
"""

from __future__ import annotations

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


def timed(setup: Callable[[], Callable[[], None]]) -> dict[str, float]:
    """Median and min µs per step of the runs ``setup()`` returns (one warm-up, then RUNS timed)."""
    setup()()
    samples = []
    for _ in range(RUNS):
        run_once = setup()
        started = time.perf_counter()
        run_once()
        samples.append((time.perf_counter() - started) / (STEPS + 1) * 1e6)
    return {"median_us": round(statistics.median(samples), 1), "min_us": round(min(samples), 1)}


def haystack() -> dict[str, Any]:
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

    return {**timed(setup), "version": version("haystack-ai")}


def langgraph() -> dict[str, Any]:
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

    return {**timed(setup), "version": version("langgraph")}


def pydantic_ai() -> dict[str, Any]:
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

    return {**timed(setup), "version": version("pydantic-ai-slim")}


def main() -> None:
    warnings.simplefilter("ignore")  # deprecation notices of the peers are not results
    results: dict[str, Any] = {}
    for name, workload in (("haystack", haystack), ("langgraph", langgraph), ("pydantic-ai", pydantic_ai)):
        try:
            results[name] = workload()
        except Exception as exc:  # a peer that cannot run is reported, not fatal
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
