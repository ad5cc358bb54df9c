"""check_agent plays each guardrail's answers (pass, rewrite, tripwire) and proves every path guarded."""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm import Agent, GuardrailResult, guardrail, tool
from agentfsm._core import runtime
from agentfsm.errors import ConfigurationError
from agentfsm.events import GuardrailChecked
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, SimpleConsoleUI
from agentfsm.machine import Work
from agentfsm.testing import RecordedRun, check_agent, invariant, replay

CALLED: list[str] = []


@tool
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _passes(point: Any) -> Any:
    @guardrail(point, name=f"{point}_passes")
    def check(value: Any) -> GuardrailResult:
        CALLED.append(point)
        return GuardrailResult.passed()

    return check


def _agent(points: tuple[str, ...] = ("input", "tool_call", "tool_result", "output"), **options: Any) -> Agent:
    return Agent(
        chat_generator=ScriptedChatGenerator(["unused: the checker answers"]),
        tools=[pay],
        guardrails=[_passes(p) for p in points],
        **options,
    )


def _answers(run: RecordedRun) -> set[tuple[str, str]]:
    return {
        (e.point, "tripwire" if e.tripped else "rewrite" if e.rewrites else "pass")
        for e in run.events
        if isinstance(e, GuardrailChecked)
    }


def test_each_guardrail_passes_rewrites_and_trips_on_paths_of_its_own() -> None:
    seen: set[tuple[str, str]] = set()

    @invariant("records the guardrails' answers")
    def record(run: RecordedRun) -> bool:
        seen.update(_answers(run))
        return True

    CALLED.clear()
    result = check_agent(
        _agent(), max_steps=1, replies=["text", "tool"], tool_outcomes=["returns"], crashes=False, invariants=[record]
    )
    assert result.ok, result.text()
    points = ("input", "tool_call", "tool_result", "output")
    assert seen == {(p, kind) for p in points for kind in ("pass", "rewrite", "tripwire")}
    assert CALLED == [], "the answers are played: the guardrails' own checks are not called"


def test_a_counterexample_names_the_guardrail_answer_and_replays() -> None:
    @invariant("never refused")
    def never_refused(run: RecordedRun) -> bool:
        return not (run.result or {}).get("exit_reason", "").startswith("guardrail:")

    agent = _agent(("output",))
    result = check_agent(
        agent, max_steps=1, replies=["text"], crashes=False, breakpoints=False, invariants=[never_refused]
    )
    [violation] = result.violations
    assert violation.scenario.guardrails == {"1/output:output_passes": "tripwire"}
    assert "guardrails={'1/output:output_passes': 'tripwire'}" in violation.regression_test
    again = replay(agent, violation.scenario, invariants=[never_refused], builtin_invariants=False)
    assert [v.invariant for v in again.violations] == ["never refused"]


def test_guardrail_answers_bound_what_is_played() -> None:
    seen: set[tuple[str, str]] = set()

    @invariant("records the guardrails' answers")
    def record(run: RecordedRun) -> bool:
        seen.update(_answers(run))
        return True

    check_agent(
        _agent(),
        max_steps=1,
        replies=["tool"],
        crashes=False,
        breakpoints=False,
        invariants=[record],
        guardrail_answers=["pass"],
    )
    assert {kind for _, kind in seen} == {"pass"}
    with pytest.raises(ConfigurationError, match=r"guardrail answers \['block'\]"):
        check_agent(_agent(), guardrail_answers=["block"])


def test_a_call_a_decision_changed_that_runs_unguarded_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def skipped(run: runtime.AgentRun, work: Work) -> None:
        """The changed call goes to TOOL_RUN as the decision left it."""

    monkeypatch.setitem(runtime._DO, Work.GUARD_DECIDED, skipped)
    strategy = BlockingConfirmationStrategy(AlwaysAskPolicy(), SimpleConsoleUI())
    agent = _agent(("tool_call",), confirmation_strategies={"pay": strategy})
    result = check_agent(agent, max_steps=1, replies=["tool"], crashes=False, breakpoints=False, stop_on_violation=True)
    [violation] = result.violations
    assert violation.invariant == "guarded"
    assert "with the arguments a decision gave it, which no tool-call guardrail passed" in violation.message
    assert violation.scenario.decisions == {"1/call_1_0": "modify"}
