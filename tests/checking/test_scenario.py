"""Scenarios: a path's answers as data, replayed to the same path; the docs list every invariant."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent
from agentfsm.checking.invariants import BUILTIN_INVARIANTS
from agentfsm.checking.scenario import Scenario, Subject, execute
from agentfsm.checking.world import REPLY_KINDS, TOOL_OUTCOMES, Bounds, Key
from tests.checking import agents

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checking.md"


@pytest.mark.parametrize("agent", [agents.shop, agents.single_charge], ids=["shop", "single_charge"])
def test_every_path_replays_from_its_scenario(agent: Agent) -> None:
    subject = Subject.of(agent, None, None, Bounds(1, REPLY_KINDS, TOOL_OUTCOMES, True, {}))
    queue: deque[dict[Key, Any]] = deque([{}])
    seen = 0
    try:
        while queue and seen < 25:
            world = execute(subject, queue.popleft(), fingerprints=False)
            seen += 1
            path = [(asked.key, answer) for asked, answer in world.asked]
            for i, (asked, _) in enumerate(world.asked):
                if not asked.fixed:
                    queue.extend({**dict(path[:i]), asked.key: other} for other in asked.options[1:])
            for crash_at in range(len(world.write_points)):
                crashed = execute(subject, world.answers, crash_at=crash_at, fingerprints=False)
                scenario = Scenario.from_answers(crashed.answers, crash_at=crash_at)
                again = execute(subject, scenario.answers(), crash_at=crash_at, fingerprints=False)
                assert again.answers == crashed.answers
    finally:
        subject.close()
    assert seen > 5


def test_the_docs_list_every_builtin_invariant() -> None:
    table = DOCS.read_text(encoding="utf-8")
    for builtin in BUILTIN_INVARIANTS:
        assert f"| `{builtin.name}` |" in table, builtin.name
