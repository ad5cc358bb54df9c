"""A few of bench/mutations.py's mutants, caught (the whole set runs with ``python bench/mutations.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutations() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_mutations", ROOT / "bench" / "mutations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["R6", "R9", "R15", "A2"])
def test_a_seeded_fault_is_caught(mutations: ModuleType, name: str) -> None:
    outcome = mutations.run([name])[0]
    assert outcome.caught_by, f"{name} ({outcome.description}) was not caught"


@pytest.mark.parametrize(
    ("name", "invariant"),
    [
        ("R17", "hooks_fire"),
        ("R18", "hooks_fire"),
        ("R19", "hooks_fire"),
        ("R20", "hooks_fire"),
        ("R21", "hooks_fire"),
        ("R22", "hooks_fire"),
        ("R23", "declared_edges"),
        ("R24", "guarded"),
        ("R25", "no_double_effect"),
        ("R26", "guarded"),
    ],
)
def test_a_skipped_hook_point_or_call_edge_is_caught(mutations: ModuleType, name: str, invariant: str) -> None:
    outcome = mutations.run([name])[0]
    assert outcome.caught_by is not None and outcome.caught_by.startswith(invariant), outcome


def test_the_runtime_is_restored_after_a_mutant(mutations: ModuleType) -> None:
    from agentfsm.slices import doubt

    before = doubt.runs_again_after_crash
    with mutations.mutated(mutations.RUNTIME_MUTANTS["R8"][1]):
        assert doubt.runs_again_after_crash is not before
    assert doubt.runs_again_after_crash is before


def test_the_retrying_agent_passes_unmutated(mutations: ModuleType) -> None:
    assert mutations._check(mutations.runtime_agents()["charges"]) is None


def test_the_reconciling_agent_passes_unmutated_and_catches_an_ignored_reconcile_answer(mutations: ModuleType) -> None:
    agent = mutations.runtime_agents()["reconciled"]
    assert mutations._check(agent) is None
    with mutations.mutated(mutations.RUNTIME_MUTANTS["R27"][1]):  # the agent R27 is caught on, alone
        assert mutations._check(agent) == "no_double_effect"


def test_an_answer_applied_to_the_wrong_question_is_caught(mutations: ModuleType) -> None:
    asking = mutations.runtime_agents()["asking"]
    assert mutations._check(asking) is None, "the asking agent passes unmutated"
    with mutations.mutated(mutations.RUNTIME_MUTANTS["R28"][1]):
        assert mutations._check(asking) == "answers_checked"
