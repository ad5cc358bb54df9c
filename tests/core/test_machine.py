from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transitions.core import MachineError as TransitionsMachineError

from agentfsm import (
    Agent,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    GuardrailResult,
    LoopDetection,
    Phase,
    State,
    ToolInvocationError,
    UsageLimits,
    guardrail,
    hook,
    tool,
)
from agentfsm.errors import InputBreakpointException, MachineError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import (
    AlwaysAskPolicy,
    BlockingConfirmationStrategy,
    BreakpointConfirmationStrategy,
    ConfirmationUI,
    ConfirmationUIResult,
    HITLBreakpointException,
    NeverAskPolicy,
    SimpleConsoleUI,
    ToolExecutionDecision,
)
from agentfsm.interrupts import AskUser, InputAnswer
from agentfsm.machine import (
    ACTIVE_PHASES,
    CALL_TRANSITIONS,
    DISPATCH,
    TERMINAL_PHASES,
    TRANSITIONS,
    CallStatus,
    Facts,
    build_machine,
)
from agentfsm.reconcile import Happened, InDoubtCall
from agentfsm.retries import Retry
from tests.helpers import (
    add,
    always_continue,
    call,
    calls,
    cancel_from_hook,
    continue_once,
    fail,
    raise_in_hook,
    stop_at_once,
)

FixedFacts = Facts


def every_combination(phase: Phase, also: Iterable[str] = ()) -> Iterator[Facts]:
    """Every combination of the facts the guards out of ``phase`` read (and ``also``), the others all false, then all true.

    A guard is a conjunction of fact values (``Transition.when``): a fact no guard of the phase
    names cannot change which edge holds, and both fillings show it. All 2^23 combinations of
    every fact would be millions of runs of the same guards.
    """
    read = sorted({name for t in TRANSITIONS if t.source is phase for name, _ in t.when} | set(also))
    for rest in (False, True):
        for values in itertools.product((False, True), repeat=len(read)):
            yield Facts(**{**dict.fromkeys(Facts._fields, rest), **dict(zip(read, values, strict=True))})


facts_strategy = st.builds(Facts, *[st.booleans() for _ in Facts._fields])


def test_table_shape() -> None:
    sources = {t.source for t in TRANSITIONS}
    assert not sources & TERMINAL_PHASES, "terminal phases have no way out"
    assert {t.trigger for t in TRANSITIONS if t.source is Phase.IDLE} == {"start", "stop", "max_steps"}
    reachable, frontier = {Phase.IDLE}, [Phase.IDLE]
    while frontier:
        phase = frontier.pop()
        for t in TRANSITIONS:
            if t.source is phase and t.dest not in reachable:
                reachable.add(t.dest)
                frontier.append(t.dest)
    assert reachable == set(Phase)
    assert len({(t.source, t.trigger, t.dest) for t in TRANSITIONS}) == len(TRANSITIONS), "no duplicated edge"


@pytest.mark.parametrize("phase", [p for p in Phase if p not in TERMINAL_PHASES and p is not Phase.PAUSED])
def test_exactly_one_guarded_edge_holds_for_every_combination_of_facts(phase: Phase) -> None:
    edges = [t for t in TRANSITIONS if t.source is phase and not t.interrupt]
    for facts in every_combination(phase):
        holding = [t for t in edges if t.guard is None or t.guard(facts)]
        assert len(holding) == 1, (phase, facts, holding)
        assert DISPATCH.next(phase, facts) == holding[0]


def test_undeclared_edges_raise() -> None:
    with pytest.raises(MachineError, match="Undeclared transition IDLE --pause--> PAUSED"):
        DISPATCH.check(Phase.IDLE, "pause", Phase.PAUSED)
    with pytest.raises(MachineError):
        DISPATCH.check(Phase.LLM_CALL, "tools_done", Phase.EXIT_CHECK)
    with pytest.raises(MachineError, match="No declared transition leaves DONE"):
        DISPATCH.next(Phase.DONE, FixedFacts())
    for t in TRANSITIONS:
        DISPATCH.check(t.source, t.trigger, t.dest)


USER = [ChatMessage.from_user("go")]


class Refuses(BlockingConfirmationStrategy):
    """A strategy whose UI is broken: it raises."""

    def __init__(self) -> None:
        super().__init__(NeverAskPolicy(), SimpleConsoleUI())

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the confirmation UI is down")


class Model:
    state: str


# A step of a random walk: either the facts the guards see, or an interrupt the runtime fires.
walk_steps = st.lists(
    st.one_of(
        facts_strategy,
        st.sampled_from(["pause", "fail"]),
        st.tuples(st.just("resume"), st.sampled_from(list(Phase))),
    ),
    max_size=30,
)


@given(walk_steps)
def test_dispatch_agrees_with_the_transitions_machine(steps: list[Any]) -> None:
    """The compiled hot-path dispatch and the transitions.Machine built from the same table agree."""
    model = Model()
    build_machine(model)
    phase = Phase.IDLE
    for step in steps:
        assert model.state == phase.value
        if isinstance(step, FixedFacts):
            if phase in TERMINAL_PHASES or phase is Phase.PAUSED:
                continue
            expected = DISPATCH.next(phase, step)
            triggers = {e.trigger for e in TRANSITIONS if e.source is phase and not e.interrupt}
            fired = next(t for t in sorted(triggers) if model.trigger(t, facts=step))
            assert fired == expected.trigger
            assert model.state == expected.dest.value
            phase = expected.dest
        else:
            trigger, dest = (step, Phase.PAUSED if step == "pause" else Phase.FAILED) if isinstance(step, str) else step
            try:
                DISPATCH.check(phase, trigger, dest)
                declared = True
            except MachineError:
                declared = False
            try:
                moved = model.trigger(trigger, to=dest)
            except TransitionsMachineError:
                moved = False
            assert moved == declared, (phase, trigger, dest)
            if declared:
                phase = dest


# -- every declared edge is taken by a real run (or, for features that fire them from outside the
#    agent loop, by the machine itself) ---------------------------------------------------------------


def _edges_of(result: dict[str, Any]) -> set[tuple[Phase, str, Phase]]:
    return {(r.source, r.trigger, r.dest) for r in result["trace"]}


def _failed_edges(agent: Agent) -> set[tuple[Phase, str, Phase]]:
    from agentfsm._core.drivers import drive_sync
    from agentfsm.agent import RunRequest

    run = agent.new_run(RunRequest(messages=[ChatMessage.from_user("go")]))
    with pytest.raises(Exception):  # each scenario raises its own error
        drive_sync(run, agent.chat_generator, None)
    assert run.phase is Phase.FAILED
    return {(r.source, r.trigger, r.dest) for r in run.trace}


def _logged_edges(caplog: pytest.LogCaptureFixture) -> set[tuple[Phase, str, Phase]]:
    events = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "transition"]
    return {(Phase(e["source"]), e["trigger"], Phase(e["dest"])) for e in events}


def agent_runs_edges(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> set[tuple[Phase, str, Phase]]:
    edges: set[tuple[Phase, str, Phase]] = set()
    tools_then_text = ScriptedChatGenerator([calls(call("add", a=1, b=2)), "done"])
    edges |= _edges_of(Agent(chat_generator=tools_then_text, tools=[add]).run([ChatMessage.from_user("go")]))
    capped = ScriptedChatGenerator([calls(call("add", a=1, b=2))])
    edges |= _edges_of(Agent(chat_generator=capped, tools=[add], max_agent_steps=1).run([ChatMessage.from_user("go")]))
    edges |= _edges_of(Agent(chat_generator=ScriptedChatGenerator([]), max_agent_steps=0).run(USER))
    # A usage limit ends the run where it would call the model again, and when a hook keeps it going.
    limited = ScriptedChatGenerator([calls(call("add", a=1, b=2)), "done"])
    edges |= _edges_of(Agent(chat_generator=limited, tools=[add], usage_limits=UsageLimits(requests=1)).run(USER))
    edges |= _edges_of(
        Agent(
            chat_generator=ScriptedChatGenerator(["done", "again"]),
            hooks={"on_exit": [always_continue]},
            usage_limits=UsageLimits(requests=1),
        ).run(USER)
    )
    # Resumed into LLM_CALL with a smaller limit than it paused with: it ends before the model call.
    two_steps = [calls(call("add", a=1, b=2)), "done"]
    with pytest.raises(BreakpointException) as before_call:
        Agent(chat_generator=ScriptedChatGenerator(two_steps), tools=[add]).run(
            USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=1)
        )
    edges |= _edges_of(
        Agent(chat_generator=ScriptedChatGenerator([]), tools=[add], usage_limits=UsageLimits(requests=1)).run(
            snapshot=before_call.value.snapshot
        )
    )
    edges |= _failed_edges(Agent(chat_generator=ScriptedChatGenerator([]), tools=[add]))
    edges |= _failed_edges(
        Agent(
            chat_generator=ScriptedChatGenerator([calls(call("fail", reason="x"))]),
            tools=[fail],
            raise_on_tool_invocation_failure=True,
        )
    )
    edges |= _failed_edges(
        Agent(
            chat_generator=ScriptedChatGenerator([calls(call("add", a="x", b=1))]),
            tools=[add],
            raise_on_tool_invocation_failure=True,
        )
    )
    hooked = {
        "before_run": {"before_run": [stop_at_once]},
        "before_llm": {"before_llm": [stop_at_once]},
        "after_tool": {"after_tool": [stop_at_once]},
        "continue once": {"on_exit": [continue_once]},
        "always continue": {"on_exit": [always_continue]},
    }
    for hooks in hooked.values():
        script = ScriptedChatGenerator([calls(call("add", a=1, b=2)), "done", "again"])
        edges |= _edges_of(Agent(chat_generator=script, tools=[add], hooks=hooks, max_agent_steps=3).run(USER))
    edges |= _failed_edges(
        Agent(chat_generator=ScriptedChatGenerator(["done"]), hooks={"on_exit": [raise_in_hook]}),
    )
    # CONFIRM: decided at once, paused for a decision and decided on resume, failed by a strategy that raises.
    script = [calls(call("add", "a1", a=1, b=2)), "done"]
    decide_now = BlockingConfirmationStrategy(NeverAskPolicy(), SimpleConsoleUI())

    def confirming(strategy: Any, position: int = 0) -> Agent:
        model = ScriptedChatGenerator(script, position=position)
        return Agent(chat_generator=model, tools=[add], confirmation_strategies={"add": strategy})

    edges |= _edges_of(confirming(decide_now).run(USER))
    with caplog.at_level(logging.DEBUG, logger="agentfsm"), pytest.raises(HITLBreakpointException) as waiting:
        confirming(BreakpointConfirmationStrategy(str(tmp_path))).run(USER)
    edges |= _logged_edges(caplog)
    edges |= _edges_of(confirming(decide_now, position=1).run(snapshot=waiting.value.snapshot))
    with caplog.at_level(logging.DEBUG, logger="agentfsm"), pytest.raises(BreakpointException) as paused:
        confirming(decide_now).run(USER, break_point=Breakpoint(phase=Phase.CONFIRM, step=1))
    edges |= _logged_edges(caplog)
    edges |= _edges_of(confirming(decide_now, position=1).run(snapshot=paused.value.snapshot))
    edges |= _failed_edges(confirming(Refuses()))
    for phase, step in [(Phase.LLM_CALL, 0), (Phase.TOOL_PENDING, 1), (Phase.TOOL_RUN, 1), (Phase.EXIT_CHECK, 1)]:
        agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("add", a=1, b=2)), "done"]), tools=[add])
        with caplog.at_level(logging.DEBUG, logger="agentfsm"), pytest.raises(BreakpointException) as paused:
            agent.run([ChatMessage.from_user("go")], break_point=Breakpoint(phase=phase, step=step))
        edges |= _logged_edges(caplog)  # the pause edge is taken after the snapshot, so it is not in its trace
        edges |= _edges_of(agent.run(snapshot=paused.value.snapshot))
    # An output type: an answer that does not fit is sent back, then fails on spent retries or steps.
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    retried = Agent(chat_generator=ScriptedChatGenerator(["{}", '{"n": 1}']), output_type=schema)
    edges |= _edges_of(retried.run(USER))
    edges |= _failed_edges(Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type=schema, output_retries=0))
    edges |= _failed_edges(Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type=schema, max_agent_steps=1))
    limited = UsageLimits(requests=1)
    edges |= _failed_edges(
        Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type=schema, usage_limits=limited)
    )
    # A model that repeats itself, stopped by LoopDetection(then="stop") through its own edge.
    repeating = ScriptedChatGenerator([calls(call("add", a=1, b=2))] * 3)
    looped = Agent(chat_generator=repeating, tools=[add], loop_detection=LoopDetection(repeats=3, then="stop"))
    edges |= _edges_of(looped.run(USER))
    return edges


def _trips(point: Any, on_trip: Any = "end", rewrite: Any = None) -> Any:
    from agentfsm.guardrails import GuardrailResult, guardrail

    @guardrail(point, on_trip=on_trip, name=f"no_{point}")
    def check(value: Any) -> GuardrailResult:
        if rewrite is not None:
            return GuardrailResult.rewrite(rewrite, "rewritten")
        return GuardrailResult.tripwire("refused")

    return check


def guardrail_runs() -> set[tuple[Phase, str, Phase]]:
    """Runs a guardrail's tripwire ends at each point, and runs whose refused answer goes back to the model."""
    edges: set[tuple[Phase, str, Phase]] = set()
    script = [calls(call("add", "a1", a=1, b=2)), "done", "again"]
    for point in ("input", "tool_call", "tool_result", "output"):
        agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[add], guardrails=[_trips(point)])
        result = agent.run(USER)
        assert result.exit_reason == f"guardrail:no_{point}"
        edges |= _edges_of(result)

    # A call a person gave new arguments is guarded again in CONFIRM, and trips there.
    @guardrail("tool_call")
    def no_five(call: Any) -> GuardrailResult:
        return GuardrailResult.tripwire("five") if call.arguments["a"] == 5 else GuardrailResult.passed()

    modifying = BlockingConfirmationStrategy(AlwaysAskPolicy(), _Modifies({"a": 5, "b": 2}))
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[add],
        guardrails=[no_five],
        confirmation_strategies={"add": modifying},
    )
    result = agent.run(USER)
    assert result.exit_reason == "guardrail:no_five" and result.trace[-1].source is Phase.CONFIRM
    edges |= _edges_of(result)
    refusing = [_trips("output", "model")]
    for options in ({"max_agent_steps": 2}, {"usage_limits": UsageLimits(requests=1)}):
        agent = Agent(chat_generator=ScriptedChatGenerator(["no", "no"]), guardrails=refusing, **options)
        edges |= _edges_of(agent.run(USER))
    return edges


def guardrail_call_runs() -> None:
    """Calls a guardrail refuses (ready, or waiting for a decision), and calls it rewrites with arguments that do not fit."""
    for strategies in (None, {"add": BreakpointConfirmationStrategy(None)}):
        for guard in (_trips("tool_call", "model"), _trips("tool_call", rewrite={"a": "x", "b": 1})):
            model = ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2)), "done"])
            agent = Agent(chat_generator=model, tools=[add], guardrails=[guard], confirmation_strategies=strategies)
            assert agent.run(USER)["last_message"].text == "done"
        # A tripwire that ends the run: the other call of the batch gets a result, never run.
        model = ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2), call("add", "a2", a=3, b=4))])
        agent = Agent(
            chat_generator=model, tools=[add], guardrails=[_trips("tool_call")], confirmation_strategies=strategies
        )
        assert agent.run(USER).exit_reason == "guardrail:no_tool_call"


class _Modifies(ConfirmationUI):
    """A person who confirms each call with ``arguments`` instead of its own."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    def get_user_confirmation(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> Any:
        return ConfirmationUIResult(action="modify", new_tool_params=dict(self.arguments))


def cancelled_runs() -> None:
    """Runs cancelled as they enter each active phase, by a hook of the phase before (or before they start)."""
    from agentfsm import RunCancelled, RunHandle

    script = [calls(call("add", "a1", a=1, b=2)), "done"]
    decide_now = BlockingConfirmationStrategy(NeverAskPolicy(), SimpleConsoleUI())
    cases = [
        (None, {}),
        ("before_llm", {}),
        ("before_tool", {}),
        ("before_tool", {"add": decide_now}),
        ("after_tool", {}),
    ]
    for point, strategies in cases:
        handle = RunHandle()
        if point is None:
            handle.cancel()
        hooks = {point: [cancel_from_hook]} if point else None
        agent = Agent(
            chat_generator=ScriptedChatGenerator(script), tools=[add], hooks=hooks, confirmation_strategies=strategies
        )
        with pytest.raises(RunCancelled):
            agent.run(USER, cancel=handle, hook_context={"handle": handle})


def retried_runs() -> None:
    """A run whose call fails once with an error its tool's ``Retry`` covers, then succeeds."""
    failed: list[int] = []

    @tool(retry=Retry(attempts=2, on=(ConnectionError,)))
    def flaky() -> str:
        """Fails on its first attempt."""
        if not failed:
            failed.append(1)
            raise ConnectionError("down")
        return "up"

    agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("flaky", "f1")), "done"]), tools=[flaky])
    assert agent.run(USER)["last_message"].text == "done"


def reconciled_runs() -> None:
    """A run resumed with a call in doubt whose tool's reconcile function finds it done."""

    def found(call: InDoubtCall) -> Happened:
        return Happened(3)

    @tool(reconcile=found)
    def charge(a: int, b: int) -> int:
        """Not idempotent: a call in doubt is looked up."""
        return a + b

    def agent(position: int = 0) -> Agent:
        script = [calls(call("charge", "c1", a=1, b=2)), "done"]
        return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=[charge])

    crashed = _tool_run_snapshot(agent(), started_tool_calls=["c1"])
    assert agent(1).run(snapshot=crashed)["messages"][-2].tool_call_result.result == "3"


def asked_runs() -> None:
    """Runs whose tool asks a person, and whose hooks ask at each point of a phase a run can pause from."""

    @tool
    def which(ask_user: AskUser) -> str:
        """Asks which account."""
        return str(ask_user("Which account?", {"type": "string"}))

    agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("which", "w1")), "done"]), tools=[which])
    with pytest.raises(InputBreakpointException) as asked:
        agent.run(USER)
    resumed = agent.run(snapshot=asked.value.snapshot, decisions=[InputAnswer("w1.0", "savings")])
    assert resumed["messages"][-2].tool_call_result.result == "savings"

    for point in ("before_llm", "before_tool", "after_tool", "on_exit"):

        @hook
        def confirm(state: State, ask_user: AskUser) -> None:
            """Asks whether to go on."""
            ask_user("Go on?", {"type": "boolean"})

        script = ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2)), "done"])
        hooked = Agent(chat_generator=script, tools=[add], hooks={point: [confirm]})
        with pytest.raises(InputBreakpointException) as paused:
            hooked.run(USER)
        answers = [InputAnswer(q.id, True) for q in paused.value.questions]
        with contextlib.suppress(InputBreakpointException):  # a hook that fires again asks again
            hooked.run(snapshot=paused.value.snapshot, decisions=answers)


def test_every_declared_edge_is_taken(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    declared = {(t.source, t.trigger, t.dest) for t in TRANSITIONS}
    taken = agent_runs_edges(caplog, tmp_path) | guardrail_runs()
    with caplog.at_level(logging.DEBUG, logger="agentfsm"):
        in_doubt_runs(caplog)
        cancelled_runs()
        retried_runs()
        reconciled_runs()
        asked_runs()
    taken |= _logged_edges(caplog)
    assert taken == declared


# -- every declared edge of a tool call is taken by a real run -------------------------------------------


@tool(idempotent=True)
def look_up(key: str) -> str:
    """Read a value; running it twice does no harm."""
    return key.upper()


def _tool_run_snapshot(agent: Agent, **update: Any) -> AgentSnapshot:
    """The run paused in TOOL_RUN before its tools ran, as a crash there would have left it (``update``)."""
    with pytest.raises(BreakpointException) as paused:
        agent.run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    return paused.value.snapshot.model_copy(update={"break_point": None, **update})


def in_doubt_runs(caplog: pytest.LogCaptureFixture) -> None:
    """Runs whose calls were in doubt after a crash, settled every way; and one whose call finished before it."""

    def agent(tools: list[Any], position: int = 0) -> Agent:
        script = [calls(call(tools[0].name, "c1", **{"a": 1, "b": 2} if tools[0] is add else {"key": "k"})), "done"]
        return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=tools)

    crashed = _tool_run_snapshot(agent([add]), started_tool_calls=["c1"])
    with pytest.raises(BreakpointException) as in_doubt:
        agent([add], 1).run(snapshot=crashed)
    waiting = in_doubt.value.snapshot
    assert waiting.awaited_decisions() == ["c1"] and waiting.phase is Phase.TOOL_RUN
    decisions = [
        ToolExecutionDecision("add", True, "c1"),
        ToolExecutionDecision("add", False, "c1", feedback="3"),
        ToolExecutionDecision("add", True, "c1", final_tool_params={"a": 2, "b": 2}),
        ToolExecutionDecision("add", True, "c1", final_tool_params={"a": "x", "b": 2}),
    ]
    for decision in decisions:
        assert agent([add], 1).run(snapshot=waiting, decisions=[decision])["last_message"].text == "done"
    assert agent([look_up], 1).run(snapshot=_tool_run_snapshot(agent([look_up]), started_tool_calls=["c1"]))
    finished = _tool_run_snapshot(agent([add]), completed_tool_results={"c1": {"value": 3}})
    assert agent([add], 1).run(snapshot=finished)["messages"][-2].tool_call_result.result == "3"


def confirmed_runs() -> None:
    """Runs whose calls waited for a decision, decided every way; and one whose arguments do not fit."""
    script = [calls(call("add", "a1", a=1, b=2)), "done"]

    def agent(position: int = 0, strategy: Any = None) -> Agent:
        return Agent(
            chat_generator=ScriptedChatGenerator(script, position=position),
            tools=[add],
            confirmation_strategies={"add": strategy or BreakpointConfirmationStrategy(None)},
        )

    with pytest.raises(HITLBreakpointException) as waiting:
        agent().run(USER)
    for decision in [
        ToolExecutionDecision("add", True, "a1"),
        ToolExecutionDecision("add", False, "a1", feedback="no"),
        ToolExecutionDecision("add", True, "a1", final_tool_params={"a": 2, "b": 2}),
        ToolExecutionDecision("add", True, "a1", final_tool_params={"a": "x", "b": 2}),
    ]:
        assert agent(1).run(snapshot=waiting.value.snapshot, decisions=[decision])["last_message"].text == "done"
    bad = Agent(chat_generator=ScriptedChatGenerator([calls(call("add", a="x", b=1)), "done"]), tools=[add])
    assert bad.run(USER)["last_message"].text == "done"
    over = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("add", a=1, b=2), call("add", a=2, b=2))]),
        tools=[add],
        usage_limits=UsageLimits(tool_calls=1),
    )
    assert over.run(USER).exit_reason == "usage_limit:tool_calls"


def test_every_declared_call_edge_is_taken(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentfsm._core.runtime import AgentRun

    # The moves the runs make, seen where they happen (not in what the runs log about them).
    taken: set[tuple[CallStatus, str, CallStatus]] = set()
    move_call = AgentRun.move_call

    def recording(run: AgentRun, pending: Any, trigger: str) -> None:
        source = pending.status
        move_call(run, pending, trigger)
        taken.add((source, trigger, pending.status))

    monkeypatch.setattr(AgentRun, "move_call", recording)
    in_doubt_runs(caplog)
    confirmed_runs()
    guardrail_call_runs()
    retried_runs()
    asked_runs()
    released = threading.Event()

    @tool(timeout=0.05)
    def stalls() -> str:
        """Waits until released: past its timeout."""
        released.wait(5)
        return "late"

    stalled = Agent(chat_generator=ScriptedChatGenerator([calls(call("stalls")), "done"]), tools=[stalls])
    assert stalled.run(USER)["last_message"].text == "done"
    released.set()
    declared = {(t.source, t.trigger, t.dest) for t in CALL_TRANSITIONS}
    assert taken == declared


def test_a_call_moves_only_along_declared_edges() -> None:
    from agentfsm._core.runtime import RunTools
    from agentfsm.agent import RunRequest

    agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("add", "c1", a=1, b=2)), "done"]), tools=[add])
    run = agent.new_run(RunRequest(messages=USER))
    action = run.next_action()
    while not isinstance(action, RunTools):
        run.model_replied(agent.chat_generator.run(messages=action.messages))  # type: ignore[union-attr]
        action = run.next_action()
    [pending] = action.calls
    with pytest.raises(MachineError, match="ready --approve-->"):
        run.move_call(pending, "approve")
    with pytest.raises(MachineError, match="CALL_TRANSITIONS"):
        run.move_call(pending, "no such trigger")
    assert pending.status is CallStatus.READY, "a refused move changes nothing"


def test_the_call_table_is_checked_when_it_is_built() -> None:
    from agentfsm.machine import CallDispatch, CallTransition

    C = CallStatus
    with pytest.raises(MachineError, match="Two call edges leave ready on 'finish'"):
        CallDispatch([*CALL_TRANSITIONS, CallTransition("finish", C.READY, C.FAILED, "twice")])
    with pytest.raises(MachineError, match="terminal"):
        CallDispatch([*CALL_TRANSITIONS, CallTransition("undo", C.DONE, C.READY, "from a terminal status")])
    with pytest.raises(MachineError, match="never reached"):
        CallDispatch([t for t in CALL_TRANSITIONS if t.dest is not C.REJECTED])
    with pytest.raises(MachineError, match="no way out"):
        CallDispatch([t for t in CALL_TRANSITIONS if t.source is not C.UNKNOWN])


def test_fail_edges_raise_the_original_error() -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("fail", reason="boom"))]),
        tools=[fail],
        raise_on_tool_invocation_failure=True,
    )
    with pytest.raises(ToolInvocationError, match="boom"):
        agent.run([ChatMessage.from_user("go")])


def test_active_phases_can_pause_and_fail() -> None:
    for phase in ACTIVE_PHASES:
        DISPATCH.check(phase, "pause", Phase.PAUSED)
        DISPATCH.check(phase, "fail", Phase.FAILED)
        DISPATCH.check(Phase.PAUSED, "resume", phase)


def test_dispatch_refuses_guards_that_leave_a_case_open_or_overlap() -> None:
    from agentfsm.machine import Dispatch, Transition

    open_case = [Transition("go", Phase.EXIT_CHECK, Phase.DONE, when=(("exit_reached", True),))]
    with pytest.raises(MachineError, match="0 edges hold"):
        Dispatch(open_case)
    overlap = [
        Transition("a", Phase.EXIT_CHECK, Phase.DONE, when=(("exit_reached", True),)),
        Transition("b", Phase.EXIT_CHECK, Phase.DONE, when=(("exit_reached", False),)),
        Transition("c", Phase.EXIT_CHECK, Phase.LLM_CALL, when=(("steps_left", True),)),
    ]
    with pytest.raises(MachineError, match="2 edges hold"):
        Dispatch(overlap)
    with pytest.raises(MachineError, match="unknown facts"):
        Dispatch([Transition("a", Phase.EXIT_CHECK, Phase.DONE, when=(("sunny", True),))])


def test_edge_labels_are_written_from_their_guards() -> None:
    from agentfsm.machine import FACT_WORDS as words
    from agentfsm.machine import Facts

    for t in TRANSITIONS:
        if t.when:
            assert t.condition == ", ".join(words[name][value] for name, value in t.when)
        else:
            assert t.condition == t.note
    assert DISPATCH.next(Phase.EXIT_CHECK, Facts(steps_left=False)).label == (
        # loop_stop (LoopDetection(then="stop")) and the guardrails' rules come first: the edges after them read their facts.
        "max_steps [no stop asked, no guardrail tripped, no loop to stop, no answer refused, max_agent_steps reached, "
        "no exit condition met]"
    )


def test_fact_names_are_the_fields_of_facts() -> None:
    from agentfsm.machine import FACT_NAMES, Facts

    declared = list(Facts._fields)
    assert list(FACT_NAMES) == declared
    assert {name for t in TRANSITIONS for name, _ in t.when} <= set(declared)


def test_edges_into_done_say_the_exit_reason() -> None:
    into_done = {t.trigger: t.exit_reason for t in TRANSITIONS if t.dest is Phase.DONE}
    assert into_done == {
        "stop": "{stop_run}",
        "loop_stop": "loop_detected",
        "exit": "{exit_condition}",
        "continue_capped": "max_agent_steps",
        "max_steps": "max_agent_steps",
        "usage_limit": "usage_limit:{usage_limit}",
        "continue_limited": "usage_limit:{usage_limit}",
        "guardrail_tripped": "guardrail:{guardrail}",
        "guardrail_capped": "guardrail:{guardrail}",
        "guardrail_limited": "guardrail:{guardrail}",
    }


CONSTANT_SETS = [
    frozenset({("stop_requested", False), ("continue_requested", False), ("guardrail_tripped", False)}),
    frozenset({("needs_confirmation", False), ("strategy_paused", False)}),
    frozenset(
        {
            ("stop_requested", False),
            ("continue_requested", False),
            ("needs_confirmation", False),
            ("strategy_paused", False),
        }
    ),
]


@pytest.mark.parametrize("constants", CONSTANT_SETS)
def test_a_table_compiled_with_constant_facts_takes_the_same_edges(constants: frozenset[tuple[str, bool]]) -> None:
    from agentfsm.machine import dispatch_for

    compiled = dispatch_for(constants)
    for phase in Phase:
        if phase in TERMINAL_PHASES or phase is Phase.PAUSED:
            continue
        for facts in every_combination(phase, also=[name for name, _ in constants]):
            if all(getattr(facts, name) is value for name, value in constants):
                specialised, declared = compiled.next(phase, facts), DISPATCH.next(phase, facts)
                assert (specialised.trigger, specialised.dest, specialised.exit_reason) == (
                    declared.trigger,
                    declared.dest,
                    declared.exit_reason,
                ), (phase, facts)


def test_a_plan_leaves_out_work_a_constant_always_skips() -> None:
    from agentfsm.machine import Work, work_plan

    def items(plan: dict[Phase, tuple[object, ...]]) -> set[object]:
        return {entry[1] for entries in plan.values() for entry in entries if entry is not None}  # type: ignore[index]

    hookless = work_plan(frozenset(), CONSTANT_SETS[0])
    assert Work.CLEAR_CONTINUE not in items(hookless), "nothing can set continue_run: nothing to clear"
    assert all(e is None or e[2] is None for e in hookless[Phase.LLM_CALL]), "nothing can ask to stop"  # type: ignore[index]
    assert Work.CLEAR_CONTINUE in items(work_plan(frozenset({Work.ON_EXIT})))


def test_the_tables_are_checked_against_what_the_run_works_out() -> None:
    from agentfsm._core.runtime import AgentRun
    from agentfsm.machine import SKIP_WORK, Transition, Work, check_exit_reasons, check_facts_readable, check_skip_work

    check_facts_readable(AgentRun)
    check_skip_work(SKIP_WORK)
    check_exit_reasons(TRANSITIONS)

    class Forgetful:
        has_tool_calls = True

    with pytest.raises(MachineError, match="calls_in_doubt"):
        check_facts_readable(Forgetful)
    with pytest.raises(MachineError, match="stop_asked"):
        check_skip_work({Work.CALL_MODEL: (("stop_asked", True),)})
    with pytest.raises(MachineError, match="why"):
        check_exit_reasons([Transition("stop", Phase.IDLE, Phase.DONE, exit_reason="{why}")])
