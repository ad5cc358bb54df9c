"""The run as a sans-I/O machine: driven by hand, action by action, as the drivers do."""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm import ChatMessage, MachineError, Phase, State, ToolInvoker, merge_lists
from agentfsm.runtime import AgentRun, CallModel, Finish, RunConfig, RunTools
from tests.helpers import add, call, calls


def new_run(messages_handler: Any = merge_lists) -> AgentRun:
    config = RunConfig(
        tools={"add": add},
        tool_exits=frozenset(),
        max_agent_steps=5,
        invoker=ToolInvoker([add]),
        fingerprint=lambda: "test",
    )
    schema = {
        "messages": {"type": list[ChatMessage], "handler": messages_handler},
        "tool_call_counts": {"type": dict[str, int]},
    }
    state = State(schema, {"messages": [ChatMessage.from_user("go")]})
    return AgentRun(config, state)


def test_a_run_says_what_to_do_next_as_data() -> None:
    run = new_run()
    first = run.next_action()
    assert isinstance(first, CallModel)
    assert first.messages is run.state.data["messages"] and [t.name for t in first.tools] == ["add"]

    run.model_replied({"replies": [calls(call("add", "c1", a=1, b=2))]})
    action = run.next_action()
    assert isinstance(action, RunTools) and run.phase is Phase.TOOL_RUN
    [prepared] = action.calls
    assert prepared is not None and prepared.arguments == {"a": 1, "b": 2}
    outcomes = run.config.invoker.execute_sync(action.calls, None, run.tool_completed)
    assert run.completed == {"c1": outcomes[0]}
    [message] = run.tools_ran()
    assert message.tool_call_result is not None and message.tool_call_result.result == "3"

    second = run.next_action()
    # The same history list, and the same action: a run without dynamic toolsets reuses it.
    assert second is first and [m.role.value for m in second.messages] == ["user", "assistant", "tool"]

    run.model_replied({"replies": [ChatMessage.from_assistant("3")]})
    done = run.next_action()
    assert isinstance(done, Finish)
    assert done.result["exit_reason"] == "text" and done.result["tool_call_counts"] == {"add": 1}
    assert [(r.source, r.dest) for r in done.result["trace"]][-2:] == [
        (Phase.LLM_CALL, Phase.EXIT_CHECK),
        (Phase.EXIT_CHECK, Phase.DONE),
    ]


def appended_copy(current: list[ChatMessage] | None, new: list[ChatMessage]) -> list[ChatMessage]:
    """A messages handler that returns a new list at every update."""
    return [*(current or []), *new]


def test_a_new_history_list_gets_a_new_model_call() -> None:
    run = new_run(messages_handler=appended_copy)
    first = run.next_action()
    run.model_replied({"replies": [calls(call("add", "c1", a=1, b=2))]})
    action = run.next_action()
    assert isinstance(action, RunTools)
    run.config.invoker.execute_sync(action.calls, None, run.tool_completed)
    run.tools_ran()
    second = run.next_action()
    assert isinstance(first, CallModel) and isinstance(second, CallModel) and second is not first
    assert len(first.messages) == 1 and second.messages is run.state.data["messages"] and len(second.messages) == 3


def test_results_are_refused_outside_their_phase() -> None:
    run = new_run()
    run.next_action()
    with pytest.raises(MachineError, match="tools_ran is only valid in TOOL_RUN, but the run is in LLM_CALL"):
        run.tools_ran()
    run.model_replied({"replies": [ChatMessage.from_assistant("hi")]})
    with pytest.raises(MachineError, match="model_replied is only valid in LLM_CALL"):
        run.model_replied({"replies": [ChatMessage.from_assistant("again")]})
