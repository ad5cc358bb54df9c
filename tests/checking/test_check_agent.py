"""check_agent: exploration, the built-in invariants, counterexamples that replay."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, ToolCall, hook
from agentfsm._core import runtime
from agentfsm.checking.invariants import transcript_problem
from agentfsm.errors import AgentCheckFailed, ConfigurationError, ConfigurationTypeError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.machine import Work
from agentfsm.slices import doubt
from agentfsm.testing import RecordedRun, Scenario, check_agent, invariant, replay
from tests.checking import agents


def test_a_correct_agent_passes_every_path() -> None:
    result = check_agent(agents.shop, max_steps=1)
    assert result.ok, result.text()
    assert result.exhaustive and result.paths > 10
    assert result.runs > result.paths, "crash and breakpoint variants ran"
    assert result.deduplicated > 0 and result.states > 0
    assert set(result.invariants) >= {"ends_within_bound", "hooks_once", "resume_equivalent", "no_double_effect"}


def test_an_on_exit_hook_that_keeps_going_is_found() -> None:
    result = check_agent(agents.endless, max_steps=1, crashes=False, breakpoints=False)
    [violation] = [v for v in result.violations if v.invariant == "ends_within_bound"]
    assert "did not end" in violation.message
    assert violation.run.ending == "cut"
    # The shortest path: the model answers text at once, and the hook keeps the run going.
    assert violation.scenario.script[0].text == "final answer"
    assert re.search(r"EXIT_CHECK --> go_on : \d continue_run", violation.diagram) and "\u27e8" in violation.diagram
    # Drawn and traced as cut by the checker, not as a failure; the hook's firings are in the trace.
    assert "cut here by the checker" in violation.diagram and "ended here" not in violation.diagram
    assert "FAILED" not in violation.trace and "cut here by the checker" in violation.trace
    assert "hook keep_going at on_exit" in violation.trace
    assert "continue_run" in violation.message and "max_steps plus 2" in violation.message


def test_the_regression_test_replays_the_counterexample() -> None:
    result = check_agent(agents.endless, max_steps=1, crashes=False, breakpoints=False, stop_on_violation=True)
    source = result.violations[0].regression_test
    assert "def test_ends_within_bound_regression" in source and "Scenario(" in source
    namespace: dict[str, Any] = {"agents": agents}
    exec(source.replace("AGENT = ...", "AGENT = agents.endless"), namespace)
    with pytest.raises(AssertionError, match="ends_within_bound"):
        namespace["test_ends_within_bound_regression"]()


def test_a_payment_wrongly_marked_idempotent_charges_twice_after_a_crash() -> None:
    @invariant("charged once per call")
    def charged_once(run: RecordedRun) -> bool | str:
        charged = [e.call_key for e in run.tool_executions if e.outcome == "returns"]
        return len(charged) == len(set(charged)) or f"charged {charged}"

    result = check_agent(
        agents.double_charge, max_steps=1, replies=["text", "tool"], invariants=[charged_once], stop_on_violation=True
    )
    [violation] = result.violations
    assert violation.invariant == "charged once per call"
    assert violation.scenario.crash_at is not None, "only a crash shows it"
    assert violation.run.crashed
    assert f"the process died here, before write {violation.scenario.crash_at} to the store, which records" in (
        violation.trace
    )
    again = replay(agents.double_charge, violation.scenario, invariants=[charged_once])
    assert not again.ok


def test_each_reconcile_answer_is_explored_and_a_charge_found_done_never_runs_again() -> None:
    said: set[str] = set()

    @invariant("charged once per call")
    def charged_once(run: RecordedRun) -> bool | str:
        said.update(d.verb for d in run.decisions)
        charged = [e.call_key for e in run.tool_executions if e.outcome == "returns"]
        reruns = [d.call_key for d in run.decisions if d.verb == "rerun"]
        return len(charged) <= len(set(charged)) + len(reruns) or f"charged {charged}"

    result = check_agent(agents.reconciling, max_steps=1, invariants=[charged_once])
    assert result.ok, result.text()
    # What the lookup found (happened, did not), that it cannot tell, that it failed: then a person decides.
    assert {"happened", "not_happened", "unknown", "raises", "rerun"} <= said
    unknown = Scenario(
        script=[ChatMessage.from_assistant(tool_calls=[ToolCall("pay_looked_up", {"amount": 1}, id="c")]), "done"],
        reconciles={"1/c": "unknown"},
        in_doubt={"1/c": "settle"},
        crash_at=3,
    )
    replayed = replay(agents.reconciling, unknown, invariants=[charged_once])
    assert replayed.ok, replayed.text()


def test_the_regression_test_of_a_user_invariant_fails_until_the_bug_is_fixed() -> None:
    result = check_agent(
        agents.double_charge,
        max_steps=1,
        replies=["text", "tool"],
        invariants=[agents.charged_once],
        agent_ref="tests.checking.agents:double_charge",
        stop_on_violation=True,
    )
    [violation] = result.violations
    source = violation.regression_test
    assert "from tests.checking.agents import charged_once" in source
    broken: dict[str, Any] = {}
    exec(source, broken)
    with pytest.raises(AssertionError, match="charges once"):
        broken["test_each_payment_call_charges_once_regression"]()
    fixed: dict[str, Any] = {}
    exec(source.replace("double_charge", "single_charge"), fixed)
    fixed["test_each_payment_call_charges_once_regression"]()


def test_the_regression_test_starts_from_the_checked_state() -> None:
    def starts_low(run: RecordedRun) -> bool:
        return (run.state.get("llm_calls") or 0) < 5

    result = check_agent(
        agents.shop, max_steps=1, crashes=False, breakpoints=False, invariants=[starts_low], state={"llm_calls": 5}
    )
    [violation] = result.violations
    source = violation.regression_test.replace("AGENT = ...", "AGENT = agents.shop")
    assert "state={'llm_calls': 5}" in source and "INVARIANT = ..." in source
    namespace: dict[str, Any] = {"agents": agents, "starts_low": starts_low}
    exec(source.replace("INVARIANT = ...", "INVARIANT = starts_low"), namespace)
    with pytest.raises(AssertionError, match="starts_low"):
        namespace["test_starts_low_regression"]()


def test_a_runtime_that_forgets_the_in_doubt_rule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doubt, "runs_again_after_crash", lambda call: True)
    result = check_agent(agents.shop, max_steps=1, replies=["tool"], breakpoints=False, stop_on_violation=True)
    assert [v.invariant for v in result.violations] == ["no_double_effect"]
    assert "is not idempotent and ran 2 times" in result.violations[0].message


def test_a_runtime_that_skips_after_run_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    @hook
    def after(state: Any) -> None:
        """Nothing."""

    agent = Agent(chat_generator=ScriptedChatGenerator(["x"]), hooks={"after_run": [after]})

    def skip_after_run(run: runtime.AgentRun, item: Work) -> None:
        """The hooks' work is "done" without running them."""

    monkeypatch.setitem(runtime._DO, Work.AFTER_RUN, skip_after_run)
    result = check_agent(agent, max_steps=1, crashes=False, breakpoints=False)
    [violation] = result.violations
    assert violation.invariant == "hooks_once" and "after_run" in violation.message


def test_a_failed_runs_error_is_in_the_trace() -> None:
    @hook
    def failing(state: Any) -> None:
        """Fail."""
        raise RuntimeError("after_run failed")

    agent = Agent(chat_generator=ScriptedChatGenerator(["x"]), hooks={"after_run": [failing]})
    result = check_agent(agent, max_steps=1, crashes=False, breakpoints=False, stop_on_violation=True)
    trace = result.violations[0].trace
    assert "hook failing at after_run, raised RuntimeError: after_run failed" in trace
    assert "the run failed with RuntimeError: after_run failed" in trace


def test_user_invariants_are_plain_predicates() -> None:
    def never_calls_search(run: RecordedRun) -> bool:
        return all(e.tool_name != "search" for e in run.tool_executions)

    result = check_agent(agents.plain, max_steps=1, crashes=False, breakpoints=False, invariants=[never_calls_search])
    [violation] = result.violations
    assert violation.invariant == "never_calls_search"
    assert violation.scenario.script[0].tool_calls[0].tool_name == "search"
    with pytest.raises(AgentCheckFailed, match="never_calls_search") as failed:
        result.raise_for_violations()
    assert failed.value.result is result


def test_a_crash_at_every_write_resumes_to_the_same_result() -> None:
    scenario = Scenario(
        script=[
            ChatMessage.from_assistant(tool_calls=[ToolCall("pay", {"amount": 1}, id="call_1_0")]),
            ChatMessage.from_assistant("final answer"),
        ]
    )
    for crash_at in range(12):
        crashed = Scenario(script=scenario.script, crash_at=crash_at)
        report = replay(agents.shop, crashed)
        assert report.ok, report.text()


def test_user_invariants_see_the_runs_events() -> None:
    from agentfsm.events import CallChanged, HookRan, PhaseChanged

    seen: list[str] = []

    def reads_events(run: RecordedRun) -> bool:
        seen.extend(type(e).__name__ for e in run.events)
        return True

    result = check_agent(agents.shop, max_steps=1, replies=["tool"], invariants=[reads_events], breakpoints=False)
    assert result.ok, result.text()
    assert {PhaseChanged.__name__, CallChanged.__name__, HookRan.__name__} <= set(seen)


def test_the_transcript_check() -> None:
    call = ToolCall("add", {"a": 1, "b": 2}, id="c1")
    answer = ChatMessage.from_tool("3", call)
    asked = ChatMessage.from_assistant(tool_calls=[call])
    assert transcript_problem([ChatMessage.from_user("hi"), asked, answer]) is None
    assert "not answered" in (transcript_problem([asked, ChatMessage.from_user("hi")]) or "")
    assert "no assistant message" in (transcript_problem([answer]) or "")


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_steps"):
        check_agent(agents.plain, max_steps=0)
    with pytest.raises(ConfigurationError, match="telepathy"):
        check_agent(agents.plain, replies=["telepathy"])

    @hook
    async def later(state: Any) -> None:
        """An async hook."""

    with pytest.raises(ConfigurationError, match="later"):
        check_agent(Agent(chat_generator=ScriptedChatGenerator(["x"]), hooks={"before_llm": [later]}))


def test_larger_bounds_fall_back_to_sampling() -> None:
    result = check_agent(agents.plain, max_steps=3, max_paths=5, samples=10, breakpoints=False)
    assert not result.exhaustive and result.paths == 5 and result.sampled == 10
    assert result.ok, result.text()


def test_the_result_as_json() -> None:
    result = check_agent(agents.endless, max_steps=1, crashes=False, breakpoints=False)
    data = result.to_dict()
    assert data["ok"] is False and data["violations"][0]["invariant"] == "ends_within_bound"
    assert "regression_test" in data["violations"][0]


def test_a_hook_that_rewrites_the_conversation_keeps_the_trace_across_a_crash() -> None:
    # The crash comes after the hook rewrote the conversation: the store resumes from that
    # snapshot, which once held the trace since the previous write only.
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["x"]),
        hooks={"before_llm": [rewrite_conversation]},
    )
    for crash_at in range(4):
        report = replay(agent, Scenario(script=[ChatMessage.from_assistant("final answer")], crash_at=crash_at))
        assert report.ok, report.text()


@hook
def rewrite_conversation(state: Any) -> None:
    """Replace the conversation by a copy of itself (as compaction hooks do)."""
    state.set("messages", list(state.get("messages")), handler_override=lambda old, new: new)


def test_a_progress_bar_on_request() -> None:
    result = check_agent(agents.plain, max_steps=1, crashes=False, breakpoints=False, progress=True)
    assert result.ok and result.paths > 0


def test_a_path_is_drawn_with_its_edges_in_order() -> None:
    from agentfsm.diagrams import machine_diagram

    trace = agents.plain.run([ChatMessage.from_user("hi")])["trace"]
    mermaid = str(machine_diagram("mermaid", agent=agents.plain, trace=trace, path=True))
    lines = {line.split(" : ")[0].strip(): line for line in mermaid.splitlines() if " : " in line}
    assert lines["IDLE --> LLM_CALL"].endswith("\u27e81\u27e9")
    assert lines["LLM_CALL --> EXIT_CHECK"].endswith("\u27e82\u27e9")
    assert [line for line in mermaid.splitlines() if "\u27e83\u27e9" in line] == [
        "    EXIT_CHECK --> DONE : 1 exit [text reply] \u27e83\u27e9"
    ]
    dot = str(machine_diagram("dot", agent=agents.plain, trace=trace, path=True))
    assert "\u27e82\u27e9" in dot
    counted = str(machine_diagram("mermaid", agent=agents.plain, trace=trace))
    assert "\u00d71" in counted and "\u27e8" not in counted


def test_hook_alternatives_are_each_tried() -> None:
    def leave_it(state: Any) -> None:
        """Let the run end."""

    def go_on(state: Any) -> None:
        """Keep the run going."""
        state.set("continue_run", True)

    result = check_agent(
        agents.plain, max_steps=1, crashes=False, breakpoints=False, hook_choices={"on_exit": [leave_it, go_on]}
    )
    [violation] = result.violations
    assert violation.invariant == "ends_within_bound"
    assert set(violation.scenario.hook_choices.values()) == {1}, "the second alternative keeps it going"
    assert "hook_choices=HOOK_CHOICES" in violation.regression_test
    again = replay(agents.plain, violation.scenario, hook_choices={"on_exit": [leave_it, go_on]})
    assert [v.invariant for v in again.violations] == ["ends_within_bound"]


#: The calls of ``flaky``: it fails on every other call, in process memory.
FLAKY_CALLS: list[int] = []


def test_a_crash_that_heals_a_failed_run_is_caught() -> None:
    from agentfsm import tool

    @tool(idempotent=True)
    def flaky() -> str:
        """Fail on every other call."""
        FLAKY_CALLS.append(1)
        if len(FLAKY_CALLS) % 2:
            raise RuntimeError("flaky failed")
        return "ok"

    agent = Agent(chat_generator=ScriptedChatGenerator(["x"]), tools=[flaky], raise_on_tool_invocation_failure=True)
    script: list[ChatMessage | Exception] = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("flaky", {}, id="call_1_0")]),
        ChatMessage.from_assistant("final answer"),
    ]
    messages = []
    for crash_at in range(8):
        FLAKY_CALLS.clear()
        report = replay(agent, Scenario(script=script, crash_at=crash_at))
        messages += [v.message for v in report.violations if v.invariant == "resume_equivalent"]
    assert any("ending: uninterrupted 'FAILED', resumed 'DONE'" in m for m in messages), messages


def test_invariant_is_used_bare_or_named() -> None:
    @invariant
    def ends(run: RecordedRun) -> bool:
        """The run ends."""
        return run.ending in ("DONE", "PAUSED", "FAILED")

    assert ends.name == "ends" and ends.description == "The run ends."
    result = check_agent(agents.plain, max_steps=1, crashes=False, breakpoints=False, invariants=[ends])
    assert result.ok, result.text()


def test_a_verdict_is_read_as_a_truth_value_and_a_string_is_a_violation() -> None:
    def holds(verdict: Any) -> bool:
        result = check_agent(
            agents.plain, max_steps=1, crashes=False, breakpoints=False, invariants=[lambda run: verdict]
        )
        return result.ok

    assert all(holds(verdict) for verdict in (1, [0], None, True))
    assert not any(holds(verdict) for verdict in (0, [], False, "", "went wrong"))
    with pytest.raises(ConfigurationTypeError, match="applied twice"):
        check_agent(agents.plain, max_steps=1, invariants=[lambda run: invariant(lambda r: True)])


def test_sampling_keeps_going_and_keeps_the_shortest_violation() -> None:
    def one_execution_at_most(run: RecordedRun) -> bool | str:
        return len(run.tool_executions) < 2 or "two executions"

    result = check_agent(
        agents.plain, max_paths=1, samples=60, crashes=False, breakpoints=False, invariants=[one_execution_at_most]
    )
    assert result.sampled >= 60, "a violation does not stop the sampling"
    [violation] = result.violations
    exhaustive = check_agent(
        agents.plain, crashes=False, breakpoints=False, invariants=[one_execution_at_most], stop_on_violation=True
    )
    assert len(violation.scenario.script) == len(exhaustive.violations[0].scenario.script)


def test_sampling_draws_crashes_with_their_in_doubt_answers_and_breakpoints() -> None:
    settled: list[str] = []
    paused: list[str] = []

    def notes(run: RecordedRun) -> bool:
        settled.extend(d.verb for d in run.decisions if d.verb == "settle")
        paused.extend(s.started for s in run.segments if s.started == "resume after pause")
        return True

    check_agent(agents.single_charge, max_steps=1, max_paths=1, samples=80, replies=["tool"], invariants=[notes])
    assert settled and paused


def test_a_typed_agent_is_checked_on_answers_that_fit_its_output_type() -> None:
    """The world offers an answer that fits ``output_type``: the ``exit`` edge with an output is explored."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    typed = Agent(chat_generator=ScriptedChatGenerator(["unused"]), output_type=schema)

    @invariant
    def never_answers_in_shape(run: RecordedRun) -> bool:
        return run.result is None or run.result.get("output") is None

    result = check_agent(typed, max_steps=1, crashes=False, breakpoints=False, invariants=[never_answers_in_shape])
    [violation] = result.violations
    assert violation.invariant == "never_answers_in_shape"
