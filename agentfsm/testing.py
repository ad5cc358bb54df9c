"""Testing utilities for your own agents: scripted conversations and the resume-equivalence check.

Needs ``hypothesis`` (``pip install agentfsm[testing]``)::

    from hypothesis import given
    from agentfsm.testing import assert_resume_equivalent, scripted_conversations

    @given(scripted_conversations(make_agent().tools))
    def test_my_agent_resumes_anywhere(script):
        assert_resume_equivalent(lambda: make_agent(script), [ChatMessage.from_user("hi")])

``check_agent`` explores an agent's paths itself, up to bounds: every kind of model reply, tool
outcome, human decision, and a crash or a breakpoint at every transition, checking invariants on
each and reporting the shortest counterexample as a regression test (see ``docs/checking.md``)::

    from agentfsm.testing import check_agent

    def test_my_agent_on_every_path():
        check_agent(make_agent()).raise_for_violations()

``check_journal`` checks what runs left in a store (or DBOS) against the effects their tools had,
by the rules durable engines are tested by (``JOURNAL_RULES``: no effect repeated unasked, one
result per call, no call dropped, every decision bound and applied once, one timeline per run;
see ``docs/checking.md``)::

    from agentfsm.testing import EffectLog, check_journal

    check_journal(store, EffectLog(path), idempotent={"lookup"}, finished=True).raise_for_problems()

``assert_resume_equivalent`` runs the agent once without interruption, then once per transition k:
break at k, encode the snapshot to bytes, decode it, build a fresh agent with
``Agent.from_dict(agent.to_dict())``, resume, and compare. The first transition where the resumed
run differs is reported with a readable diff.
"""

from __future__ import annotations

import asyncio
import difflib
import pprint
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentfsm._extras import extra_needed
from agentfsm.agent import Agent
from agentfsm.breakpoints import Breakpoint
from agentfsm.checking import (
    BUILTIN_INVARIANTS,
    CheckResult,
    Effect,
    EffectLog,
    Invariant,
    JournalProblem,
    JournalReport,
    RecordedRun,
    Scenario,
    Violation,
    check_agent,
    check_journal,
    invariant,
    replay,
)
from agentfsm.checking.journal import RULES as JOURNAL_RULES
from agentfsm.errors import AgentCheckFailed, BreakpointException, ResumeDivergence
from agentfsm.generators.scripted import ScriptedChatGenerator
from agentfsm.hooks import HOOK_POINT_NAMES
from agentfsm.machine import ACTIVE_PHASES
from agentfsm.messages import RAW_ARGUMENTS_KEY, ChatMessage, ToolCall
from agentfsm.result import AgentResult
from agentfsm.snapshot import AgentSnapshot
from agentfsm.state import State
from agentfsm.tools.tool import Tool
from agentfsm.tools.toolset import Toolset, flatten_tools

# check_agent itself needs no hypothesis (agentfsm.checking); the strategies below do.
with extra_needed("agentfsm.testing", "testing"):
    from hypothesis import strategies as st

__all__ = [
    "BUILTIN_INVARIANTS",
    "HOOK_CALLS",
    "JOURNAL_RULES",
    "AgentCheckFailed",
    "CheckResult",
    "Effect",
    "EffectLog",
    "Invariant",
    "JournalProblem",
    "JournalReport",
    "RecordedRun",
    "RecordingHook",
    "ResumeDivergence",
    "Scenario",
    "Violation",
    "arguments_for",
    "assert_resume_equivalent",
    "check_agent",
    "check_journal",
    "comparable_result",
    "hook_sets",
    "invariant",
    "replay",
    "scripted_agent_factory",
    "scripted_conversations",
]


# -- strategies -------------------------------------------------------------------------------------

_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=8),
    "integer": st.integers(-1000, 1000),
    "number": st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
    "null": st.none(),
}


def _from_schema(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "$ref" in schema:
        return _from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([_from_schema(s, defs) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_from_schema({**schema, "type": k}, defs) for k in kind])
    if kind == "array":
        return st.lists(_from_schema(schema.get("items", {}), defs), max_size=3)
    if kind == "object" or "properties" in schema:
        return _object(schema, defs)
    if kind in _SCALARS:
        return _SCALARS[kind]
    return st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=4)


def _object(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {name: _from_schema(p, defs) for name, p in properties.items() if name in required},
        optional={name: _from_schema(p, defs) for name, p in properties.items() if name not in required},
    )


def arguments_for(tool: Tool) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments that conform to ``tool``'s parameter schema."""
    return _object(tool.parameters, tool.parameters.get("$defs", {}))


def _calls_of(tool: Tool) -> st.SearchStrategy[ToolCall]:
    return arguments_for(tool).map(lambda arguments: ToolCall(tool.name, arguments))


def _invalid_call(tools: Sequence[Tool]) -> st.SearchStrategy[ToolCall]:
    """Calls a model may get wrong: an unknown tool, arguments that are not JSON, unexpected arguments."""
    names = st.sampled_from([t.name for t in tools])
    return st.one_of(
        st.just(ToolCall("no_such_tool", {})),
        names.map(lambda name: ToolCall(name, {RAW_ARGUMENTS_KEY: "{not json"})),
        names.map(lambda name: ToolCall(name, {"unexpected_argument": [1, None]})),
    )


def scripted_conversations(
    tools: Iterable[Tool | Toolset] | Toolset | None,
    *,
    min_replies: int = 1,
    max_replies: int = 6,
    max_parallel_calls: int = 3,
    invalid_calls: bool = True,
) -> st.SearchStrategy[list[ChatMessage]]:
    """Scripts for a ``ScriptedChatGenerator``: text replies and (parallel) calls of ``tools``.

    Arguments conform to each tool's schema; with ``invalid_calls`` some calls name unknown tools or
    carry arguments that are not JSON or break the schema. Scripts end with a text reply so a run
    can always finish.
    """
    flat = flatten_tools(tools if isinstance(tools, Toolset) or tools is None else list(tools))
    text = st.text(max_size=12).map(ChatMessage.from_assistant)
    if not flat:
        replies: st.SearchStrategy[ChatMessage] = text
    else:
        valid = st.one_of([_calls_of(t) for t in flat])
        one_call = st.one_of(valid, _invalid_call(flat)) if invalid_calls else valid
        replies = st.one_of(
            text,
            st.lists(one_call, min_size=1, max_size=max_parallel_calls).map(
                lambda calls: ChatMessage.from_assistant(tool_calls=calls)
            ),
        )
    return st.lists(replies, min_size=min_replies - 1 if min_replies else 0, max_size=max_replies - 1).map(
        lambda script: [*script, ChatMessage.from_assistant("final answer")]
    )


#: Where every ``RecordingHook`` writes ``"<name>@<step>"`` each time it runs: pass it as
#: ``assert_resume_equivalent(side_effects=HOOK_CALLS)`` to check that each hook ran exactly once.
HOOK_CALLS: list[str] = []


class RecordingHook:
    """A hook that records each time it runs (in ``HOOK_CALLS``); it serializes by its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, state: State) -> None:
        """Record ``<name>@<step>``."""
        HOOK_CALLS.append(f"{self.name}@{state.get('step_count')}")

    def to_dict(self) -> dict[str, Any]:
        """Serialize (the name)."""
        return {"name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordingHook:
        """Invert ``to_dict``."""
        return cls(data["name"])


def hook_sets(points: Sequence[str] = HOOK_POINT_NAMES, max_per_point: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    """``Agent(hooks=...)`` values of ``RecordingHook``s at some of ``points``, named ``<point>.<n>``."""
    per_point = st.integers(0, max_per_point)
    return st.fixed_dictionaries(dict.fromkeys(points, per_point)).map(
        lambda counts: {
            point: [RecordingHook(f"{point}.{n}") for n in range(count)] for point, count in counts.items() if count
        }
    )


# -- the equivalence check ----------------------------------------------------------------------


def comparable_result(result: dict[str, Any]) -> dict[str, Any]:
    """A run's result without what legitimately differs between runs (timings, pause/resume edges).

    ``trace`` is the run's edges (``AgentResult.trace``), also when the State has a key of that name.
    """
    records = result.trace if isinstance(result, AgentResult) else result["trace"]
    trace = [(r.step, r.source.value, r.dest.value, r.trigger) for r in records if r.trigger not in ("pause", "resume")]
    return {**{k: v for k, v in result.items() if k != "trace"}, "trace": trace}


def _run(agent: Agent, use_async: bool, **kwargs: Any) -> dict[str, Any]:
    if use_async:
        return asyncio.run(agent.run_async(**kwargs))
    return agent.run(**kwargs)


def _pause(agent: Agent, use_async: bool, break_point: Breakpoint, **kwargs: Any) -> AgentSnapshot | None:
    try:
        _run(agent, use_async, break_point=break_point, **kwargs)
    except BreakpointException as exc:
        return AgentSnapshot.from_bytes(exc.snapshot.to_bytes())
    return None


def _diff(expected: Any, actual: Any) -> str:
    lines = difflib.unified_diff(
        pprint.pformat(expected, width=100).splitlines(),
        pprint.pformat(actual, width=100).splitlines(),
        "uninterrupted",
        "resumed",
        lineterm="",
    )
    return "\n".join(lines)


def assert_resume_equivalent(
    agent_factory: Callable[[], Agent],
    messages: list[ChatMessage],
    *,
    state: dict[str, Any] | None = None,
    side_effects: list[Any] | None = None,
    use_async: bool = False,
    double_breaks: bool = False,
    allowed_modules: Iterable[str] | None = None,
) -> int:
    """Check that pausing at any transition and resuming elsewhere changes nothing.

    ``agent_factory`` builds a fresh agent (with a fresh scripted model). ``side_effects``, if given,
    is a list your tools append to: it must hold the same entries, in the same order, after pause
    + resume as after the uninterrupted run (each tool call ran exactly once). With
    ``double_breaks`` every resumed run is paused once more at the next transition before it
    finishes. Returns the number of pause points checked; raises ``ResumeDivergence`` naming the
    first transition where the runs differ.
    """
    inputs = {"messages": messages, **(state or {})}
    if side_effects is not None:
        side_effects.clear()
    baseline = comparable_result(_run(agent_factory(), use_async, **inputs))
    expected_effects = list(side_effects or [])
    points = [(i, r) for i, r in enumerate(baseline["trace"]) if r[2] in {p.value for p in ACTIVE_PHASES}]
    for index, (step, source, dest, trigger) in points:
        if side_effects is not None:
            side_effects.clear()
        first = agent_factory()
        break_point = Breakpoint(phase=dest, step=step)
        snapshot = _pause(first, use_async, break_point, **inputs)
        where = f"transition {index} ({source} --{trigger}--> {dest}, step {step})"
        if snapshot is None:
            raise ResumeDivergence(f"The breakpoint at {where} did not pause the run.")
        resumed_agent = Agent.from_dict(first.to_dict(), allowed_modules=allowed_modules)
        later = [p for p in points if p[0] > index]
        if double_breaks and later:
            _, (step2, _, dest2, _) = later[0]
            second = _pause(resumed_agent, use_async, Breakpoint(phase=dest2, step=step2), snapshot=snapshot)
            if second is None:
                raise ResumeDivergence(f"After resuming at {where}, the second breakpoint did not pause the run.")
            snapshot, resumed_agent = second, Agent.from_dict(resumed_agent.to_dict(), allowed_modules=allowed_modules)
        result = comparable_result(_run(resumed_agent, use_async, snapshot=snapshot))
        if result != baseline:
            raise ResumeDivergence(f"Resuming at {where} changed the result:\n{_diff(baseline, result)}")
        if side_effects is not None and side_effects != expected_effects:
            raise ResumeDivergence(
                f"Resuming at {where} changed the tool side effects:\n{_diff(expected_effects, list(side_effects))}"
            )
    return len(points)


def scripted_agent_factory(script: Sequence[ChatMessage], **agent_kwargs: Any) -> Callable[[], Agent]:
    """A factory of agents on a fresh ``ScriptedChatGenerator(script)`` each time."""
    return lambda: Agent(chat_generator=ScriptedChatGenerator(list(script)), **agent_kwargs)
