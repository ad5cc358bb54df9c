"""What ``check_agent`` explores, pinned: how fast it explores may change, what it explores may not.

A user invariant sees every run the check judges; it takes a digest of each one (its
interruption, segments, transitions, events, model inputs, tool executions, hook firings,
decisions, ending and State, without run ids, times and durations). The counts and the digest of
all of them are pinned for fixed agents: a change that drops, adds or alters a run fails here.
A change to what the checker explores on purpose updates the pins (the failure prints the new ones).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from agentfsm import Agent, GuardrailResult, State, guardrail, hook
from agentfsm.checking import RecordedRun, check_agent, invariant
from agentfsm.checking.scenario import Subject, after_crash, execute
from agentfsm.checking.world import REPLY_KINDS, TOOL_OUTCOMES, Bounds, Key
from agentfsm.demo import demo_agent
from agentfsm.messages import ChatMessage
from agentfsm.snapshot import AgentSnapshot
from tests.checking import agents
from tests.checking.agents import add, confirm, pay

#: Fields that differ between two runs of the same path: when, how long, and under which id.
_VOLATILE = frozenset({"at", "duration_us", "created_at", "updated_at", "run_id", "snapshot_file_path", "path"})
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _plain(value: Any) -> Any:
    """``value`` as JSON-compatible data, without what differs between two runs of the same path."""
    if isinstance(value, ChatMessage):
        return value.to_dict()
    if isinstance(value, AgentSnapshot):
        return _plain(value.to_dict())
    if isinstance(value, BaseException):
        return [type(value).__name__, _ADDRESS.sub("", str(value))]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return _plain(value._asdict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"type": type(value).__name__, **_plain(fields)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return _ADDRESS.sub("", repr(value))


def digest(run: RecordedRun) -> str:
    """A digest of everything a run recorded, the same for two runs of the same path."""
    ids = {e.run_id for segment in run.segments for e in segment.events}
    text = orjson.dumps(_plain(run), option=orjson.OPT_SORT_KEYS).decode()
    for run_id in ids:  # in idempotency keys and messages too
        text = text.replace(run_id, "<run>")
    return hashlib.sha256(text.encode()).hexdigest()


def explored(agent: Agent, **bounds: Any) -> tuple[dict[str, Any], list[str]]:
    """The check's counts, and the digest of each run it judged."""
    runs: list[str] = []

    @invariant
    def seen(run: RecordedRun) -> bool:
        runs.append(digest(run))
        return True

    result = check_agent(agent, invariants=[seen], progress=False, **bounds)
    counts = {"paths": result.paths, "runs": result.runs, "states": result.states, "deduplicated": result.deduplicated}
    return counts, runs


@hook
def noted(state: State) -> None:
    """A hook that does nothing: its firings are what is explored."""


@guardrail("input")
def input_passes(messages: Any) -> GuardrailResult:
    """Let every conversation through."""
    return GuardrailResult.passed()


@guardrail("tool_call")
def call_passes(call: Any) -> GuardrailResult:
    """Let every call through."""
    return GuardrailResult.passed()


def hooked() -> Agent:
    """A hook at every point, guardrails and a confirmed payment: every kind of record a run makes."""
    points = ("before_run", "before_llm", "after_llm", "before_tool", "after_tool", "on_exit", "after_run", "on_error")
    return Agent(
        chat_generator=agents._model(),
        tools=[add, pay],
        hooks={point: [noted] for point in points},
        guardrails=[input_passes, call_passes],
        confirmation_strategies={"pay": confirm()},
    )


def _all(runs: list[str]) -> str:
    return hashlib.sha256("".join(sorted(runs)).encode()).hexdigest()[:16]


#: Each fixed agent, its bounds, and what the check explores there: counts and the digest of every run.
PINNED: dict[str, tuple[Callable[[], Agent], dict[str, Any], dict[str, Any], str]] = {
    "demo": (
        demo_agent,
        {"max_steps": 1},
        {"paths": 12, "runs": 146, "states": 6, "deduplicated": 32},
        "a713e68e2f8f6da5",
    ),
    "shop": (
        lambda: agents.shop,
        {"max_steps": 1},
        {"paths": 22, "runs": 302, "states": 12, "deduplicated": 51},
        "1ab55bcb4df6bc3c",
    ),
    "hooked": (
        hooked,
        {"max_steps": 1},
        {"paths": 175, "runs": 3083, "states": 93, "deduplicated": 104},
        "213c7376c944b52b",
    ),
}


@pytest.mark.parametrize("name", PINNED)
def test_what_is_explored_is_pinned(name: str) -> None:
    make, bounds, counts, runs_digest = PINNED[name]
    found, runs = explored(make(), **bounds)
    assert len(runs) == found["runs"]
    assert (found, _all(runs)) == (counts, runs_digest), f"{name}: now {found}, {_all(runs)!r}"


def test_two_checks_of_one_agent_explore_the_same_runs() -> None:
    # The pins mean something only if a run's digest is the same each time the path is run.
    first, second = explored(demo_agent(), max_steps=1), explored(demo_agent(), max_steps=1)
    assert first == second


@pytest.mark.parametrize("make", [demo_agent, hooked], ids=["demo", "hooked"])
def test_a_crash_made_from_the_uninterrupted_run_is_the_crash_run_again(make: Callable[[], Agent]) -> None:
    # The explorer makes each crash variant from what the uninterrupted run kept at the write
    # (after_crash); running the path again, killed there, records the same run.
    subject = Subject.of(make(), None, None, Bounds(1, REPLY_KINDS, TOOL_OUTCOMES, True, {}))
    try:
        for answers in _paths(subject):
            base = execute(subject, answers, remains=True)
            assert len(base.remains) == len(base.write_points) > 0
            for crash_at in range(len(base.remains)):
                made = after_crash(subject, base, crash_at, base.answers)
                again = execute(subject, base.answers, crash_at=crash_at, fingerprints=False)
                assert digest(made.record) == digest(again.record), (answers, crash_at)
                assert made.answers == again.answers
                assert [(a.key, a.fixed, v) for a, v in made.asked] == [(a.key, a.fixed, v) for a, v in again.asked]
    finally:
        subject.close()


def _paths(subject: Subject) -> list[dict[Key, Any]]:
    """A few paths: the first options everywhere, and each other model reply at the first step."""
    first = execute(subject, {})
    asked, _ = first.asked[0]
    return [{}, *({asked.key: other} for other in asked.options[1:])]
