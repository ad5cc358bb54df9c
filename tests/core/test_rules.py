"""The rule language: ordered rules and choices compile to the flat table the runtime dispatches on.

``FLAT_TABLE`` is the machine as it was written before its rules were ordered and its capabilities
became slices: every guard spelt out in full. The composed rules must take the same edge (trigger,
destination, exit reason) for every combination of every fact; the edges added since
(``ADDED_SINCE_FLAT``: the guardrails', ``loop_stop``, and ``reconciled``, TOOL_RUN into itself,
``slices.reconcile``) are written with the guards the rules give them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from agentfsm._core.rules import compile_rules, specialise_rules, when
from agentfsm.errors import MachineError
from agentfsm.machine import (
    CHOICES,
    DISPATCH,
    FACT_NAMES,
    OTHERWISE,
    RULES,
    TRANSITIONS,
    Choice,
    Facts,
    Phase,
    Rule,
)

#: (trigger, source, dest, guard, exit reason) of every edge out of a phase's work, as first declared.
FLAT_TABLE: list[tuple[str, str, str, dict[str, bool], str | None]] = [
    ("start", "IDLE", "LLM_CALL", {"stop_requested": False, "model_calls_allowed": True}, None),
    ("stop", "IDLE", "DONE", {"stop_requested": True}, "{stop_run}"),
    ("max_steps", "IDLE", "DONE", {"stop_requested": False, "model_calls_allowed": False}, "max_agent_steps"),
    ("stop", "LLM_CALL", "DONE", {"stop_requested": True}, "{stop_run}"),
    ("tool_calls", "LLM_CALL", "TOOL_PENDING", {"stop_requested": False, "has_tool_calls": True}, None),
    ("text_reply", "LLM_CALL", "EXIT_CHECK", {"stop_requested": False, "has_tool_calls": False}, None),
    ("confirm", "TOOL_PENDING", "CONFIRM", {"needs_confirmation": True}, None),
    ("run_tools", "TOOL_PENDING", "TOOL_RUN", {"needs_confirmation": False}, None),
    ("decided", "CONFIRM", "TOOL_RUN", {"strategy_paused": False}, None),
    ("hitl_pause", "CONFIRM", "PAUSED", {"strategy_paused": True}, None),
    ("tools_done", "TOOL_RUN", "EXIT_CHECK", {"calls_in_doubt": False, "calls_retrying": False}, None),
    ("retry", "TOOL_RUN", "TOOL_RUN", {"calls_in_doubt": False, "calls_retrying": True}, None),
    ("in_doubt", "TOOL_RUN", "PAUSED", {"calls_in_doubt": True}, None),
    ("stop", "EXIT_CHECK", "DONE", {"stop_requested": True}, "{stop_run}"),
    (
        "exit",
        "EXIT_CHECK",
        "DONE",
        {"stop_requested": False, "exit_reached": True, "continue_requested": False, "output_invalid": False},
        "{exit_condition}",
    ),
    (
        "output_retry",
        "EXIT_CHECK",
        "LLM_CALL",
        {
            "stop_requested": False,
            "exit_reached": True,
            "continue_requested": False,
            "output_invalid": True,
            "output_retries_left": True,
            "steps_left": True,
            "usage_limit_reached": False,
        },
        None,
    ),
    (
        "output_limited",
        "EXIT_CHECK",
        "FAILED",
        {
            "stop_requested": False,
            "exit_reached": True,
            "continue_requested": False,
            "output_invalid": True,
            "output_retries_left": True,
            "steps_left": True,
            "usage_limit_reached": True,
        },
        None,
    ),
    (
        "output_failed",
        "EXIT_CHECK",
        "FAILED",
        {
            "stop_requested": False,
            "exit_reached": True,
            "continue_requested": False,
            "output_invalid": True,
            "output_retries_left": False,
        },
        None,
    ),
    (
        "output_capped",
        "EXIT_CHECK",
        "FAILED",
        {
            "stop_requested": False,
            "exit_reached": True,
            "continue_requested": False,
            "output_invalid": True,
            "output_retries_left": True,
            "steps_left": False,
        },
        None,
    ),
    (
        "continue_run",
        "EXIT_CHECK",
        "LLM_CALL",
        {
            "stop_requested": False,
            "exit_reached": True,
            "continue_requested": True,
            "steps_left": True,
            "usage_limit_reached": False,
        },
        None,
    ),
    (
        "continue_capped",
        "EXIT_CHECK",
        "DONE",
        {"stop_requested": False, "exit_reached": True, "continue_requested": True, "steps_left": False},
        "max_agent_steps",
    ),
    (
        "max_steps",
        "EXIT_CHECK",
        "DONE",
        {"stop_requested": False, "exit_reached": False, "steps_left": False},
        "max_agent_steps",
    ),
    (
        "continue",
        "EXIT_CHECK",
        "LLM_CALL",
        {"stop_requested": False, "exit_reached": False, "steps_left": True, "usage_limit_reached": False},
        None,
    ),
    (
        "usage_limit",
        "EXIT_CHECK",
        "DONE",
        {"stop_requested": False, "exit_reached": False, "steps_left": True, "usage_limit_reached": True},
        "usage_limit:{usage_limit}",
    ),
    (
        "continue_limited",
        "EXIT_CHECK",
        "DONE",
        {
            "stop_requested": False,
            "exit_reached": True,
            "continue_requested": True,
            "steps_left": True,
            "usage_limit_reached": True,
        },
        "usage_limit:{usage_limit}",
    ),
]


#: The edges slices added since the flat table, (trigger, source, dest, exit reason), each with the
#: facts that take it ahead of the flat table's edge. A slice that adds a rule adds it here.
ADDED_SINCE_FLAT: dict[tuple[str, Phase, Phase, str | None], Callable[[Any], bool]] = {
    # The guardrails' tripwire (agentfsm.slices.guardrails), second only to a hook's stop.
    **{
        ("guardrail_tripped", phase, Phase.DONE, "guardrail:{guardrail}"): lambda f: (
            f.guardrail_tripped and not f.stop_requested
        )
        for phase in (Phase.LLM_CALL, Phase.EXIT_CHECK)
    },
    **{
        ("guardrail_tripped", phase, Phase.DONE, "guardrail:{guardrail}"): lambda f: f.guardrail_tripped
        for phase in (Phase.TOOL_PENDING, Phase.CONFIRM, Phase.TOOL_RUN)
    },
    ("loop_stop", Phase.EXIT_CHECK, Phase.DONE, "loop_detected"): lambda f: f.loop_ends_run and not f.stop_requested,
    # An answer an output guardrail refused goes back to the model while it may go on.
    ("guardrail_capped", Phase.EXIT_CHECK, Phase.DONE, "guardrail:{guardrail}"): lambda f: (
        f.answer_refused and not f.stop_requested and not f.steps_left
    ),
    ("guardrail_limited", Phase.EXIT_CHECK, Phase.DONE, "guardrail:{guardrail}"): lambda f: (
        f.answer_refused and not f.stop_requested and f.usage_limit_reached
    ),
    ("guardrail_retry", Phase.EXIT_CHECK, Phase.LLM_CALL, None): lambda f: f.answer_refused and not f.stop_requested,
    # A call in doubt its tool's reconcile function settled: TOOL_RUN again, after a retry's edge.
    ("reconciled", Phase.TOOL_RUN, Phase.TOOL_RUN, None): lambda f: (
        f.calls_reconciled and not (f.guardrail_tripped or f.calls_in_doubt or f.calls_retrying)
    ),
    # A call asked a person (agentfsm.slices.interrupts): once the step's other calls are settled, the run waits.
    ("input_pause", Phase.TOOL_RUN, Phase.PAUSED, None): lambda f: (
        f.calls_asking and not f.calls_in_doubt and not f.calls_retrying and not f.calls_reconciled
    ),
}


def _expected_edge(phase: Phase, facts: Any) -> tuple[str, Phase, str | None]:
    for (trigger, source, dest, exit_reason), takes in ADDED_SINCE_FLAT.items():
        if source is phase and takes(facts):
            return trigger, dest, exit_reason
    [edge] = [e for e in FLAT_TABLE if e[1] == phase.value and all(getattr(facts, k) is v for k, v in e[3].items())]
    return edge[0], Phase(edge[2]), edge[4]


@pytest.mark.parametrize(
    "phase", [Phase.IDLE, Phase.LLM_CALL, Phase.TOOL_PENDING, Phase.CONFIRM, Phase.TOOL_RUN, Phase.EXIT_CHECK]
)
def test_the_rules_take_the_edges_of_the_flat_table_on_every_combination_of_facts(phase: Phase) -> None:
    read = sorted({name for t in TRANSITIONS if t.source is phase and not t.interrupt for name, _ in t.when})
    checked = 0
    for values in itertools.product((False, True), repeat=len(read)):
        facts = Facts(**dict(zip(read, values, strict=True)))
        edge = DISPATCH.next(phase, facts)
        assert (edge.trigger, edge.dest, edge.exit_reason) == _expected_edge(phase, facts), facts
        checked += 1
    assert checked == 2 ** len(read)


def test_every_edge_of_the_flat_table_is_compiled_from_the_rules() -> None:
    compiled = {(t.trigger, t.source.value, t.dest.value) for t in TRANSITIONS if not t.interrupt}
    added = {(trigger, source.value, dest.value) for trigger, source, dest, _ in ADDED_SINCE_FLAT}
    assert compiled - added == {e[:3] for e in FLAT_TABLE}
    assert added <= compiled, "every added edge is compiled"


def test_each_phase_reads_its_rules_in_order_and_no_label_names_more_than_three_facts() -> None:
    for rule in RULES:
        assert len(rule.when) <= 3, rule.trigger
    exit_check = sorted((r for r in RULES if r.source is Phase.EXIT_CHECK), key=lambda r: r.order)
    assert [r.trigger for r in exit_check] == [
        "stop",
        "guardrail_tripped",
        "loop_stop",
        "guardrail_retry",
        "continue_run",
        "output_failed",
        "output_retry",
        "exit",
        "continue",
    ]
    assert {c.name for c in CHOICES} == {"go_on", "ending"}


def _rules(*extra: Rule) -> list[Rule]:
    return [
        Rule(Phase.EXIT_CHECK, 10, "exit", Phase.DONE, when(exit_reached=True), exit_reason="x"),
        Rule(Phase.EXIT_CHECK, OTHERWISE, "continue", Phase.LLM_CALL),
        *extra,
    ]


def test_a_rule_that_earlier_rules_shadow_is_refused_with_a_fix() -> None:
    shadowed = Rule(Phase.EXIT_CHECK, 20, "again", Phase.DONE, when(exit_reached=True), exit_reason="y")
    with pytest.raises(MachineError, match=r"'again' out of EXIT_CHECK is never taken.*Move it before them"):
        compile_rules(_rules(shadowed), [], FACT_NAMES)


def test_a_source_without_its_last_rule_or_with_two_at_one_place_is_refused() -> None:
    with pytest.raises(MachineError, match="must have order=OTHERWISE and no guard"):
        compile_rules(_rules()[:1], [], FACT_NAMES)
    twice = Rule(Phase.EXIT_CHECK, 10, "twice", Phase.DONE, when(steps_left=False), exit_reason="z")
    with pytest.raises(MachineError, match=r"share the order \[10\]"):
        compile_rules(_rules(twice), [], FACT_NAMES)
    loose = Rule(Phase.EXIT_CHECK, 20, "loose", Phase.DONE, exit_reason="z")
    with pytest.raises(MachineError, match="have no guard but are not its last"):
        compile_rules(_rules(loose), [], FACT_NAMES)


def test_unknown_facts_and_choices_and_edges_that_do_not_say_what_they_do_are_refused() -> None:
    with pytest.raises(MachineError, match="unknown facts"):
        compile_rules(_rules(Rule(Phase.IDLE, 10, "a", Phase.DONE, when(sunny=True))), [], FACT_NAMES)
    with pytest.raises(MachineError, match="no phase and no declared choice"):
        compile_rules(_rules(Rule(Phase.IDLE, OTHERWISE, "a", "nowhere")), [], FACT_NAMES)
    with pytest.raises(MachineError, match="does not say its exit_reason"):
        compile_rules([Rule(Phase.IDLE, OTHERWISE, "end", Phase.DONE)], [], FACT_NAMES)
    with pytest.raises(MachineError, match="does not say its error"):
        compile_rules([Rule(Phase.IDLE, OTHERWISE, "end", Phase.FAILED)], [], FACT_NAMES)


def test_a_way_out_of_a_choice_without_a_trigger_for_it_is_named_after_the_rule() -> None:
    may = Choice("may", "may it?")
    rules = [
        Rule(Phase.EXIT_CHECK, OTHERWISE, "go", may.name),
        Rule(may.name, 10, "capped", Phase.DONE, when(steps_left=False), exit_reason="capped"),
        Rule(may.name, OTHERWISE, "yes", Phase.LLM_CALL),
    ]
    compiled = {t.trigger: t for t in compile_rules(rules, [may], FACT_NAMES)}
    assert set(compiled) == {"go", "go_capped"}
    assert compiled["go_capped"].when == (("steps_left", False),)
    assert [r.trigger for r in compiled["go_capped"].rules] == ["go", "capped"]


def test_an_agents_rules_leave_out_what_its_constants_rule_out_and_pass_through_a_choice_left_with_one_way() -> None:
    constants = frozenset(
        {
            ("stop_requested", False),
            ("continue_requested", False),
            ("loop_ends_run", False),
            ("output_invalid", False),
            ("output_retries_left", False),
            ("usage_limit_reached", False),
            ("guardrail_tripped", False),
            ("answer_refused", False),
        }
    )
    kept = specialise_rules(RULES, constants)
    exit_check = [(r.trigger, r.dest) for r in kept if r.source is Phase.EXIT_CHECK]
    assert exit_check == [("exit", Phase.DONE), ("continue", "go_on")]
    go_on = [(r.trigger, r.dest, r.exit_reason) for r in kept if r.source == "go_on"]
    assert go_on == [("capped", Phase.DONE, "max_agent_steps"), ("go", Phase.LLM_CALL, None)], "ending passed through"
    assert not [r for r in kept if r.source == "ending"]
