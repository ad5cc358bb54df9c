"""The seeds of the fault sweeps: a fixed few in the default run, more with ``make chaos SEEDS=N``.

``AGENTFSM_FAULT_SEEDS=N`` runs seeds 0 to N-1; ``AGENTFSM_FAULT_SEED=K`` (``make chaos SEED=K``)
runs seed K alone, the way a failure's message says to reproduce it. A seed decides everything a
sweep varies (the store, which writes fail and how, where a worker is stopped): the same seed is
the same schedule, on any machine.
"""

from __future__ import annotations

import os

import pytest

SEEDS = "AGENTFSM_FAULT_SEEDS"
SEED = "AGENTFSM_FAULT_SEED"


def seeds(default: int) -> list[int]:
    """The seeds to sweep: ``default`` of them unless the environment names others."""
    one = os.environ.get(SEED)
    if one:
        return [int(one)]
    return list(range(int(os.environ.get(SEEDS, default))))


def seeded(default: int) -> pytest.MarkDecorator:
    """Parametrize a test's ``seed`` argument with ``seeds(default)``, each case named ``seed-K``."""
    return pytest.mark.parametrize("seed", seeds(default), ids=lambda seed: f"seed-{seed}")


def reproduce(seed: int, schedule: str) -> str:
    """What a failure says: the seed, the schedule it made, and the command that runs it again."""
    return f"seed {seed}, schedule: {schedule}; run it again with `make chaos SEED={seed}`"
