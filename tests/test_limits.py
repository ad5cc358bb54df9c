"""Usage limits: each ends the run through the declared ``usage_limit`` edge, with counts that survive resumes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, Breakpoint, BreakpointException, ChatMessage, Phase, UsageLimits, tool
from agentfsm.errors import ConfigurationError, ConfigurationTypeError, UsageNotCountedError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.machine import specialise
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import SIDE_EFFECTS, add, always_continue, call

USER = [ChatMessage.from_user("go")]
ROOT = Path(__file__).resolve().parents[1]


def reply(*tool_calls: Any, text: str | None = None, model: str = "small", i: int = 100, o: int = 20) -> ChatMessage:
    """A reply as the HTTP clients give it: the model's name and its token usage in ``meta``."""
    usage = {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}
    return ChatMessage.from_assistant(text, tool_calls=list(tool_calls), meta={"model": model, "usage": usage})


def two_adds(step: int) -> ChatMessage:
    return reply(call("add", f"c{step}a", a=step, b=1), call("add", f"c{step}b", a=step, b=2))


#: Three steps of two tool calls each, then the answer.
SCRIPT = [two_adds(1), two_adds(2), two_adds(3), reply(text="done")]


def limited(limits: UsageLimits | None, script: list[Any] | None = None, position: int = 0, **kwargs: Any) -> Agent:
    model = ScriptedChatGenerator(SCRIPT if script is None else script, position=position)
    return Agent(chat_generator=model, tools=[add], usage_limits=limits, **kwargs)


def answered(result: dict[str, Any]) -> bool:
    """Every tool call of the conversation has its result: the transcript can be sent to a model again."""
    asked = {c.id for m in result["messages"] for c in m.tool_calls}
    answers = {m.tool_call_result.origin.id for m in result["messages"] if m.tool_call_result is not None}
    return asked == answers


@pytest.mark.parametrize(
    ("limits", "reason", "model_calls"),
    [
        (UsageLimits(requests=2), "usage_limit:requests", 2),
        (UsageLimits(input_tokens=200), "usage_limit:input_tokens", 2),
        (UsageLimits(output_tokens=50), "usage_limit:output_tokens", 3),
        (UsageLimits(total_tokens=120), "usage_limit:total_tokens", 1),
        # Each call: 100 input and 20 output tokens at 1000 and 5000 per million, 0.1 + 0.1.
        (UsageLimits(cost=0.5, prices={"small": (1000, 5000)}), "usage_limit:cost", 3),
    ],
)
def test_a_limit_ends_the_run_before_the_next_model_call(limits: UsageLimits, reason: str, model_calls: int) -> None:
    result = limited(limits).run(USER)
    assert result.exit_reason == reason
    assert result["step_count"] == model_calls
    assert [r.trigger for r in result.trace][-2:] == ["tools_done", "usage_limit"]
    assert answered(result) and result["messages"][-1].role.value == "tool"


def test_the_cost_is_counted_from_the_price_table() -> None:
    result = limited(UsageLimits(prices={"small": (1000, 5000)})).run(USER)
    assert result.exit_reason == "text", "prices alone count without bounding"
    assert result["run_usage"]["cost"] == pytest.approx(4 * (0.1 + 0.1))


def test_tool_calls_past_the_limit_are_answered_not_run_and_the_run_ends() -> None:
    SIDE_EFFECTS.clear()
    result = limited(UsageLimits(tool_calls=3)).run(USER)
    assert result.exit_reason == "usage_limit:tool_calls"
    assert SIDE_EFFECTS == ["add(1,1)", "add(1,2)", "add(2,1)"], "the call past the limit never ran"
    refused = result["messages"][-1].tool_call_result
    assert refused.error and refused.origin.id == "c2b" and "limit of 3 tool calls" in refused.result
    assert answered(result)
    assert result["tool_call_counts"] == {"add": 3} and result["run_usage"]["refused_tool_calls"] == 1
    assert result["step_count"] == 2, "the model never sees the refusal"


def test_a_run_within_its_limits_ends_as_without_them() -> None:
    free = limited(None).run(USER)
    within = limited(UsageLimits(requests=4, tool_calls=6, total_tokens=10_000, wall_clock=60)).run(USER)
    assert within.exit_reason == free.exit_reason == "text"
    assert [m.to_dict() for m in within["messages"]] == [m.to_dict() for m in free["messages"]]


def test_a_hook_that_keeps_the_run_going_is_bounded_by_the_limits() -> None:
    script = [reply(text="done"), reply(text="again"), reply(text="more")]
    agent = limited(UsageLimits(requests=2), script, hooks={"on_exit": [always_continue]})
    result = agent.run(USER)
    assert result.exit_reason == "usage_limit:requests"
    assert [r.trigger for r in result.trace][-1] == "continue_limited"


def test_the_run_limits_override_the_agents() -> None:
    agent = limited(UsageLimits(requests=1))
    assert agent.run(USER).exit_reason == "usage_limit:requests"
    assert limited(UsageLimits(requests=1)).run(USER, usage_limits=UsageLimits()).exit_reason == "text"
    assert limited(UsageLimits(requests=1)).run(USER, usage_limits=UsageLimits(requests=3)).exit_reason == (
        "usage_limit:requests"
    )
    assert limited(None).run(USER, usage_limits=UsageLimits(requests=2))["step_count"] == 2


async def test_run_async_takes_the_same_edges() -> None:
    for limits in (UsageLimits(requests=2), UsageLimits(tool_calls=3), UsageLimits(total_tokens=120)):
        in_thread, on_loop = limited(limits).run(USER), await limited(limits).run_async(USER)
        assert on_loop.exit_reason == in_thread.exit_reason
        assert [r[:4] for r in on_loop.trace] == [r[:4] for r in in_thread.trace]


@tool
def slow(label: str) -> str:
    """Take a while."""
    time.sleep(0.05)
    return label


def test_the_wall_clock_ends_a_slow_run() -> None:
    script = [reply(call("slow", "s1", label="a")), reply(call("slow", "s2", label="b")), reply(text="done")]
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[slow], usage_limits=UsageLimits(wall_clock=0.01))
    result = agent.run(USER)
    assert result.exit_reason == "usage_limit:wall_clock"
    assert result["step_count"] == 1 and answered(result)


def test_counts_survive_a_pause_and_the_wall_clock_leaves_the_pause_out() -> None:
    limits = UsageLimits(tool_calls=3, wall_clock=3600, prices={"small": (1000, 5000)})
    with pytest.raises(BreakpointException) as paused:
        limited(limits).run(USER, break_point=Breakpoint(phase=Phase.TOOL_PENDING, step=2))
    snapshot = paused.value.snapshot
    assert snapshot.state["run_usage"]["cost"] == pytest.approx(0.4)
    time.sleep(0.05)
    result = limited(limits, position=2).run(snapshot=snapshot)
    assert result.exit_reason == "usage_limit:tool_calls" and result["tool_call_counts"] == {"add": 3}
    assert result["run_usage"]["cost"] == pytest.approx(0.4)
    assert result["run_usage"]["paused_seconds"] >= 0.05
    assert result["run_usage"]["started_at"] == snapshot.state["run_usage"]["started_at"]


def test_a_run_paused_near_its_limit_ends_at_it_when_resumed_in_another_process(tmp_path: Path) -> None:
    agent = limited(UsageLimits(requests=2))
    with pytest.raises(BreakpointException) as paused:
        agent.run(USER, break_point=Breakpoint(phase=Phase.EXIT_CHECK, step=1))
    paused.value.snapshot.to_file(tmp_path / "snap.json")
    (tmp_path / "agent.json").write_text(json.dumps(limited(UsageLimits(requests=2), position=1).to_dict()))
    program = """
import json, sys
from agentfsm import Agent, AgentSnapshot
agent = Agent.from_dict(json.load(open(sys.argv[1])), allowed_modules=["tests"])
result = agent.run(snapshot=AgentSnapshot.from_file(sys.argv[2]))
print(json.dumps({"exit_reason": result.exit_reason, "steps": result["step_count"]}))
"""
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "agent.json"), str(tmp_path / "snap.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"exit_reason": "usage_limit:requests", "steps": 2}


def test_a_stored_run_keeps_its_counts(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    try:
        result = limited(UsageLimits(cost=0.5, prices={"small": (1000, 5000)}), snapshot_store=store).run(USER)
        final = store.latest(store.runs()[0].run_id)
        assert final.state["run_usage"]["cost"] == pytest.approx(0.6)
        assert result.exit_reason == "usage_limit:cost"
    finally:
        store.close()


def test_a_reply_that_cannot_be_counted_fails_the_run() -> None:
    with pytest.raises(UsageNotCountedError, match="'large'"):
        limited(UsageLimits(cost=1, prices={"small": (1, 1)}), [reply(text="hi", model="large")]).run(USER)
    with pytest.raises(UsageNotCountedError, match="usage"):
        limited(UsageLimits(total_tokens=10), ["no usage reported"]).run(USER)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"requests": 0}, ConfigurationError),
        ({"tool_calls": True}, ConfigurationError),
        ({"cost": -1, "prices": {"m": (1, 1)}}, ConfigurationError),
        ({"wall_clock": float("inf")}, ConfigurationError),
        ({"cost": 1}, ConfigurationError),
        ({"prices": {"m": (1,)}}, ConfigurationTypeError),
        ({"prices": {"m": (1, -1)}}, ConfigurationError),
        ({"prices": [("m", 1, 1)]}, ConfigurationTypeError),
    ],
)
def test_bad_limits_are_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        UsageLimits(**kwargs)


def test_usage_limits_must_be_usage_limits() -> None:
    with pytest.raises(ConfigurationTypeError, match="UsageLimits"):
        limited({"requests": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationTypeError, match="UsageLimits"):
        limited(None).run(USER, usage_limits={"requests": 1})  # type: ignore[arg-type]


def test_limits_serialize_with_the_agent() -> None:
    limits = UsageLimits(requests=3, cost=0.25, wall_clock=30.0, prices={"small": (0.15, 0.6)})
    again = Agent.from_dict(limited(limits).to_dict(), allowed_modules=["tests"])
    assert again.usage_limits == limits


def test_limit_edges_exist_only_for_agents_with_limits() -> None:
    plain, bounded = limited(None), limited(UsageLimits(requests=5))
    assert "usage_limit" not in str(plain.draw())
    drawing = str(bounded.draw())
    assert "go_on --> DONE : 2 limited [a usage limit reached - requests=5]" in drawing

    assert ("usage_limit_reached", False) in plain.outline().constants
    assert not any(t.trigger == "usage_limit" for t in specialise(plain.outline().constants))
    assert ("usage_limit_reached", False) not in bounded.outline().constants
    priced = limited(UsageLimits(prices={"small": (1, 1)}))
    assert ("usage_limit_reached", False) in priced.outline().constants, "prices alone bound nothing"


def test_calls_refused_for_the_limit_end_in_events_with_the_error_the_model_reads() -> None:
    events: list[Any] = []
    result = limited(UsageLimits(tool_calls=3)).run(USER, on_event=events.append)
    ended = {e.call_id: e for e in events if e.kind == "tool_ended"}
    started = [e.call_id for e in events if e.kind == "tool_started"]
    assert started == ["c1a", "c1b", "c2a"] and sorted(ended) == ["c1a", "c1b", "c2a", "c2b"]
    refused = result["messages"][-1].tool_call_result
    assert ended["c2b"].result is None and ended["c2b"].error.startswith("ToolCallLimitError")
    assert refused.result in ended["c2b"].error and ended["c2b"].duration_us == 0
    entering_done = [e for e in events if e.kind == "transition" and e.dest is Phase.DONE]
    assert [(e.trigger, e.exit_reason) for e in entering_done] == [("usage_limit", "usage_limit:tool_calls")]


def test_a_run_resumed_into_a_model_call_past_its_limit_ends_without_calling_the_model() -> None:
    with pytest.raises(BreakpointException) as paused:
        limited(UsageLimits(requests=5)).run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=2))
    snapshot = paused.value.snapshot
    assert (snapshot.phase, snapshot.step) == (Phase.LLM_CALL, 2)
    model = ScriptedChatGenerator(SCRIPT, position=2)
    resumed = Agent(chat_generator=model, tools=[add], usage_limits=UsageLimits(requests=1))
    result = resumed.run(snapshot=snapshot)
    assert result.exit_reason == "usage_limit:requests" and model.calls == []
    assert [(r.source, r.trigger, r.dest) for r in result.trace][-1] == (Phase.LLM_CALL, "usage_limit", Phase.DONE)
    assert answered(result)


def test_calls_refused_before_a_confirmation_pause_are_counted_once(tmp_path: Path) -> None:
    from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision

    def confirming(position: int = 0) -> Agent:
        strategies = {"add": BreakpointConfirmationStrategy(str(tmp_path))}
        return limited(UsageLimits(tool_calls=1), position=position, confirmation_strategies=strategies)

    with pytest.raises(BreakpointException) as waiting:
        confirming().run(USER)
    snapshot = waiting.value.snapshot
    assert snapshot.state["run_usage"]["refused_tool_calls"] == 1
    approve = ToolExecutionDecision("add", True, "c1a")
    result = confirming(position=1).run(snapshot=snapshot, decisions=[approve])
    assert result.exit_reason == "usage_limit:tool_calls"
    assert result["run_usage"]["refused_tool_calls"] == 1 and result["tool_call_counts"] == {"add": 1}


def test_usage_reported_as_any_mapping_is_counted() -> None:
    from types import MappingProxyType

    def proxied(message: ChatMessage) -> ChatMessage:
        meta = {**message.meta, "usage": MappingProxyType(dict(message.meta["usage"]))}
        return ChatMessage.from_assistant(message.text, tool_calls=message.tool_calls, meta=meta)

    result = limited(UsageLimits(total_tokens=120), [proxied(m) for m in SCRIPT]).run(USER)
    assert result.exit_reason == "usage_limit:total_tokens" and result["step_count"] == 1
    assert result["token_usage"]["prompt_tokens"] == 100
