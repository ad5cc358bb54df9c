"""The run as a sans-I/O machine: driven by hand, action by action, as the drivers do."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentfsm import ChatMessage, Phase, State, ToolInvoker
from agentfsm._core.actions import CallModel, Finish, Pause, RunTools
from agentfsm._core.runtime import AgentRun, RunConfig
from agentfsm.errors import MachineError
from agentfsm.machine import PHASE_WORK, Facts, Work
from agentfsm.slices.loop import exit_condition
from agentfsm.tools.invoker import CallStatus
from tests.helpers import add, call, calls, finish


def new_run(tool_exits: frozenset[str] = frozenset()) -> AgentRun:
    config = RunConfig(
        tools={"add": add, "finish": finish},
        tool_exits=tool_exits,
        max_agent_steps=5,
        invoker=ToolInvoker([add, finish]),
        fingerprint=lambda: "test",
    )
    schema = {"step_count": {"type": int}, "tool_call_counts": {"type": dict[str, int]}}
    state = State(schema, {"messages": [ChatMessage.from_user("go")]})
    return AgentRun(config, state)


def test_a_run_says_what_to_do_next_as_data() -> None:
    run = new_run()
    first = run.next_action()
    assert isinstance(first, CallModel)
    assert first.messages == run.state.data["messages"] and [t.name for t in first.tools] == ["add", "finish"]

    run.model_replied({"replies": [calls(call("add", "c1", a=1, b=2))]})
    action = run.next_action()
    assert isinstance(action, RunTools) and run.phase is Phase.TOOL_RUN
    [prepared] = action.calls
    assert prepared.status is CallStatus.READY and prepared.arguments == {"a": 1, "b": 2}
    run.config.invoker.execute_sync(action.calls, None, run.tool_completed)
    assert prepared.status is CallStatus.DONE and prepared.outcome is not None and prepared.outcome.value == 3
    [message] = run.tools_ran()
    assert message.tool_call_result is not None and message.tool_call_result.result == "3"

    second = run.next_action()
    assert isinstance(second, CallModel)
    assert [m.role.value for m in second.messages] == ["user", "assistant", "tool"]

    run.model_replied({"replies": [ChatMessage.from_assistant("3")]})
    done = run.next_action()
    assert isinstance(done, Finish)
    assert done.result["exit_reason"] == "text" and done.result["tool_call_counts"] == {"add": 1}
    assert done.result["step_count"] == 2
    assert [(r.source, r.dest) for r in done.result["trace"]][-2:] == [
        (Phase.LLM_CALL, Phase.EXIT_CHECK),
        (Phase.EXIT_CHECK, Phase.DONE),
    ]


def test_reports_record_and_only_next_action_moves_the_run() -> None:
    run = new_run()
    run.next_action()
    run.model_replied({"replies": [calls(call("add", "c1", a=1, b=2))]})
    call_model_done = PHASE_WORK[Phase.LLM_CALL].index(Work.CALL_MODEL) + 1
    assert run.phase is Phase.LLM_CALL and run.stage == call_model_done, "the reply is recorded; no edge taken yet"
    assert run.facts() == Facts(has_tool_calls=True, steps_left=True, model_calls_allowed=True)
    action = run.next_action()
    assert isinstance(action, RunTools)
    run.config.invoker.execute_sync(action.calls, None, run.tool_completed)
    run.tools_ran()
    assert run.phase is Phase.TOOL_RUN and run.stage == PHASE_WORK[Phase.TOOL_RUN].index(Work.RUN_TOOLS) + 1


def test_facts_are_computed_from_the_run_data_state_included() -> None:
    run = new_run(tool_exits=frozenset({"finish"}))
    run.next_action()
    run.model_replied({"replies": [calls(call("finish", "f1", answer="42"))]})
    action = run.next_action()
    assert isinstance(action, RunTools)
    run.config.invoker.execute_sync(action.calls, None, run.tool_completed)
    run.tools_ran()
    assert exit_condition(run) == "tool:finish" and run.facts().exit_reached
    # A message written through State after the tools ran: the end of the conversation is no exit any more.
    run.state.set("messages", [ChatMessage.from_user("Check the answer before you finish.")])
    assert exit_condition(run) is None and not run.facts().exit_reached
    action = run.next_action()
    assert isinstance(action, CallModel) and run.phase is Phase.LLM_CALL, "the run went on"


def test_results_are_refused_outside_their_phase() -> None:
    run = new_run()
    run.next_action()
    with pytest.raises(MachineError, match=r"tools_ran.*TOOL_RUN.*LLM_CALL"):
        run.tools_ran()
    run.model_replied({"replies": [ChatMessage.from_assistant("hi")]})
    with pytest.raises(MachineError, match="the run is in LLM_CALL with call_model done"):
        run.model_replied({"replies": [ChatMessage.from_assistant("again")]})


def test_a_run_let_go_in_a_phase_has_one_status_for_it() -> None:
    from agentfsm.pauses import RunStatus

    assert RunStatus.ended_in(Phase.DONE) is RunStatus.DONE
    assert RunStatus.ended_in(Phase.PAUSED) is RunStatus.PAUSED
    assert {RunStatus.ended_in(p) for p in Phase if p not in (Phase.DONE, Phase.PAUSED)} == {RunStatus.FAILED}


def test_a_snapshot_knows_its_calls_by_the_keys_the_invoker_gives_them() -> None:
    from agentfsm.tools.invoker import call_key

    run = new_run()
    run.next_action()
    run.model_replied({"replies": [calls(call("add", "c1", a=1, b=2), call("add", None, a=3, b=4))]})
    keys = [call_key(c, i) for i, c in enumerate(run.calls)]
    assert list(run.make_snapshot().pending_calls_by_key()) == keys


class CancelledByFact(AgentRun):
    """A run whose ``cancel_requested`` fact holds later than its handle was cancelled: the table's guard decides."""

    @property
    def cancel_requested(self) -> bool:
        return self.step >= 1


def test_the_cancel_interrupt_is_taken_when_its_fact_holds() -> None:
    from agentfsm import RunHandle
    from agentfsm.machine import GUARDED_INTERRUPTS, TRANSITIONS, Phase
    from agentfsm.pauses import Cancelled

    assert {p: [t.trigger for t in ts] for p, ts in GUARDED_INTERRUPTS.items()} == {
        p: ["cancel", "usage_limit", "hook_input"]
        if p is Phase.LLM_CALL
        else ["cancel"]
        if p is Phase.CONFIRM
        else ["cancel", "hook_input"]
        for p in GUARDED_INTERRUPTS
    }
    assert all(t in TRANSITIONS for ts in GUARDED_INTERRUPTS.values() for t in ts)
    base = new_run()
    handle = RunHandle()
    handle.cancel()  # the run reads the fact at its transitions once its handle is cancelled
    run = CancelledByFact(replace(base.config, cancel=handle), base.state)
    assert isinstance(run.next_action(), CallModel), "the fact does not hold yet"
    run.model_replied({"replies": [calls(call("add", "c1", a=1, b=2))]})
    action = run.next_action()
    assert run.phase is Phase.PAUSED and run.trace[-1].trigger == "cancel"
    assert run.trace[-1].source is Phase.TOOL_PENDING and isinstance(action.snapshot.pause, Cancelled)


def test_a_run_reads_only_the_guarded_interrupts_that_can_hold_after_the_edge_it_took() -> None:
    from agentfsm.machine import Phase, watched_interrupts

    def read(phase: Phase, trigger: str | None, **given: bool) -> list[str]:
        # A handle not cancelled, no usage limits: facts the run holds constant (its watch leaves them out).
        constants = {("cancel_requested", False)} if not given.get("cancel") else set()
        constants |= {("usage_limit_reached", False)} if not given.get("limits") else set()
        constants.add(("hook_asking", False))  # no hook asks a person
        watched = watched_interrupts(frozenset(constants))
        after = watched.get(phase)
        return [] if after is None else [t.trigger for t in after.get(trigger, after[None])]

    assert read(Phase.LLM_CALL, "continue") == [], "without a handle or limits nothing is read"
    # EXIT_CHECK's continue holds only while no limit is reached: at the same boundary none can be.
    assert read(Phase.LLM_CALL, "continue", limits=True) == []
    assert read(Phase.LLM_CALL, "start", limits=True) == ["usage_limit"]
    assert read(Phase.LLM_CALL, "resume", limits=True) == ["usage_limit"]
    assert read(Phase.LLM_CALL, "continue", cancel=True, limits=True) == ["cancel"]
    assert read(Phase.TOOL_RUN, "run_tools", cancel=True) == ["cancel"]


def test_a_handle_tells_its_watchers_once_cancelled_and_at_once_when_it_was() -> None:
    from agentfsm import RunHandle

    told: list[str] = []
    first, second = (lambda: told.append("first")), (lambda: told.append("second"))
    handle = RunHandle()
    handle.on_cancel(first)
    assert told == []
    handle.cancel()
    handle.on_cancel(second)
    assert told == ["first", "second"] and handle.cancelled


def test_a_handle_given_to_many_runs_keeps_none_of_them_alive() -> None:
    import gc
    import weakref

    from agentfsm import RunHandle

    handle = RunHandle()
    base = new_run()
    runs = [AgentRun(replace(base.config, cancel=handle), base.state) for _ in range(3)]
    gone = [weakref.ref(r) for r in runs]
    del runs
    gc.collect()
    assert all(ref() is None for ref in gone), "the handle held its runs"
    kept = AgentRun(replace(base.config, cancel=handle), base.state)
    handle.cancel()
    assert isinstance(kept.next_action(), Pause) and kept.phase is Phase.PAUSED
