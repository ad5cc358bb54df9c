"""The core claim: pausing at any transition and resuming elsewhere changes nothing."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    Agent,
    AgentBreakpoint,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    ConfigurationError,
    Phase,
    SnapshotError,
    ToolBreakpoint,
    Toolset,
)
from agentfsm._core.phases import PHASE_WORK, Work
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from agentfsm.pauses import AwaitingDecision, BreakpointHit, OutcomeUnknown
from agentfsm.snapshot import SNAPSHOT_FORMAT_VERSION
from agentfsm.testing import (
    ResumeDivergence,
    assert_resume_equivalent,
    comparable_result,
    scripted_agent_factory,
    scripted_conversations,
)
from tests.helpers import RESUME_SCHEMA, SIDE_EFFECTS, add, call, calls, fail, finish, remember

TOOLS = [add, fail, finish, remember]
USER = [ChatMessage.from_user("go")]
ALLOWED = ["tests"]

resume_settings = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def factory(script: list[ChatMessage], exit_on_finish: bool, max_steps: int) -> Any:
    return scripted_agent_factory(
        script,
        tools=TOOLS,
        state_schema=RESUME_SCHEMA,
        exit_conditions=["text", "finish"] if exit_on_finish else ["text"],
        max_agent_steps=max_steps,
    )


@resume_settings
@given(script=scripted_conversations(TOOLS, max_replies=6), exit_on_finish=st.booleans(), max_steps=st.integers(1, 6))
def test_resume_at_every_transition_is_equivalent(
    script: list[ChatMessage], exit_on_finish: bool, max_steps: int
) -> None:
    checked = assert_resume_equivalent(
        factory(script, exit_on_finish, max_steps),
        USER,
        state={"prefix": "> "},
        side_effects=SIDE_EFFECTS,
        allowed_modules=ALLOWED,
    )
    assert checked >= 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripted_conversations(TOOLS, max_replies=5), exit_on_finish=st.booleans(), max_steps=st.integers(1, 5))
def test_resume_is_equivalent_under_run_async(script: list[ChatMessage], exit_on_finish: bool, max_steps: int) -> None:
    assert_resume_equivalent(
        factory(script, exit_on_finish, max_steps),
        USER,
        side_effects=SIDE_EFFECTS,
        use_async=True,
        allowed_modules=ALLOWED,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripted_conversations(TOOLS, max_replies=6), max_steps=st.integers(1, 6))
def test_two_breaks_in_a_row_are_equivalent(script: list[ChatMessage], max_steps: int) -> None:
    assert_resume_equivalent(
        factory(script, True, max_steps),
        USER,
        side_effects=SIDE_EFFECTS,
        double_breaks=True,
        allowed_modules=ALLOWED,
    )


def test_divergence_is_reported_with_the_transition_and_a_diff() -> None:
    counter = {"n": 0}

    def drifting_agent() -> Agent:
        # Each agent built gets a different answer: resuming cannot match the first run.
        counter["n"] += 1
        return Agent(chat_generator=ScriptedChatGenerator([f"answer {counter['n']}"]))

    with pytest.raises(ResumeDivergence, match=r"transition 0 \(IDLE --start--> LLM_CALL") as info:
        assert_resume_equivalent(drifting_agent, USER)
    assert "-" in str(info.value) and "answer 1" in str(info.value)


# -- breakpoints ------------------------------------------------------------------------------------

SCRIPT = [
    calls(call("add", "a1", a=1, b=2)),
    calls(call("remember", "r1", text="x"), call("add", "a2", a=3, b=4)),
    "done",
]


def agent(**kwargs: Any) -> Agent:
    return Agent(chat_generator=ScriptedChatGenerator(SCRIPT), tools=TOOLS, state_schema=RESUME_SCHEMA, **kwargs)


def pause(a: Agent, break_point: Any, **kwargs: Any) -> BreakpointException:
    with pytest.raises(BreakpointException) as info:
        a.run(USER, break_point=break_point, **kwargs)
    return info.value


def test_chat_generator_breakpoint_counts_model_calls() -> None:
    exc = pause(agent(), AgentBreakpoint("assistant", Breakpoint("chat_generator", visit_count=1)))
    snapshot = exc.snapshot
    assert (snapshot.phase, snapshot.step) == (Phase.LLM_CALL, 1)
    assert snapshot.break_point == {"type": "Breakpoint", "visit_count": 1, "component_name": "chat_generator"}
    assert [m["role"] for m in snapshot.messages] == ["user", "assistant", "tool"]
    assert "paused before LLM_CALL at step 1" in str(exc)


def test_tool_breakpoint_waits_for_its_tool() -> None:
    snapshot = pause(agent(), ToolBreakpoint(visit_count=1, tool_name="remember")).snapshot
    assert (snapshot.phase, snapshot.step) == (Phase.TOOL_RUN, 2)
    assert [c["tool_name"] for c in snapshot.pending_tool_calls] == ["remember", "add"]
    first_visit = pause(agent(), ToolBreakpoint(visit_count=0)).snapshot
    assert first_visit.step == 1
    # The first tool-invoker visit runs only `add`: a breakpoint on `remember` at that visit does not fire.
    assert agent().run(USER, break_point=ToolBreakpoint(tool_name="remember"))["last_message"].text == "done"


def test_phase_breakpoints_reach_every_active_phase() -> None:
    for phase, step in [(Phase.TOOL_PENDING, 1), (Phase.TOOL_RUN, 2), (Phase.EXIT_CHECK, 3), (Phase.LLM_CALL, 0)]:
        snapshot = pause(agent(), Breakpoint(phase=phase, step=step)).snapshot
        assert (snapshot.phase, snapshot.step) == (phase, step)
    snapshot = pause(agent(), Breakpoint(phase=Phase.EXIT_CHECK)).snapshot
    assert snapshot.step == 1, "step=None matches the first time the phase is entered"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (Breakpoint, "needs component_name"),
        (lambda: Breakpoint("llm"), "Unknown component_name"),
        (lambda: Breakpoint("chat_generator", phase=Phase.LLM_CALL), "not both"),
        (lambda: Breakpoint(phase=Phase.DONE), "only pause before an active phase"),
        (lambda: Breakpoint("chat_generator", visit_count=-1), "visit_count"),
        (lambda: ToolBreakpoint(component_name="chat_generator"), "ToolBreakpoint pauses before TOOL_RUN"),
        (lambda: AgentBreakpoint("a", Breakpoint("tool_invoker")), "component_name 'chat_generator'"),
        (lambda: AgentBreakpoint("a", "chat_generator"), "must be a Breakpoint"),
    ],
)
def test_invalid_breakpoints(make: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_snapshot_file_path_writes_a_readable_file(tmp_path: Path) -> None:
    exc = pause(agent(), Breakpoint("tool_invoker", visit_count=1, snapshot_file_path=str(tmp_path)))
    assert exc.snapshot_file_path is not None
    path = Path(exc.snapshot_file_path)
    assert path.parent == tmp_path and path.name.endswith("_0002_TOOL_RUN.json")
    assert path.read_text().startswith(f'{{\n  "format_version": {SNAPSHOT_FORMAT_VERSION},')
    assert AgentSnapshot.from_file(path) == exc.snapshot
    assert str(path) in str(exc)


def test_resume_runs_nothing_twice() -> None:
    SIDE_EFFECTS.clear()
    original = agent()
    snapshot = pause(original, Breakpoint(phase=Phase.TOOL_RUN, step=2)).snapshot
    assert SIDE_EFFECTS == ["add(1,2)"]
    generator = original.chat_generator
    assert isinstance(generator, ScriptedChatGenerator) and generator.position == 2
    result = original.run(snapshot=snapshot)
    assert SIDE_EFFECTS == ["add(1,2)", "remember(x)", "add(3,4)"]
    assert generator.position == 3
    assert result["notes"] == ["x"]
    assert comparable_result(result) == comparable_result(agent().run(USER))


async def test_resume_with_run_async_and_a_dict_snapshot() -> None:
    snapshot = pause(agent(), Breakpoint(phase=Phase.EXIT_CHECK, step=1)).snapshot
    resumed = Agent.from_dict(agent().to_dict(), allowed_modules=ALLOWED)
    resumed.chat_generator.position = 1  # type: ignore[attr-defined]
    result = await resumed.run_async(snapshot=snapshot.to_dict())
    assert comparable_result(result) == comparable_result(agent().run(USER))


class PausesOnRestore(Toolset):
    """A dynamic toolset whose ``restore`` raises a pause: its own bug, no pause of the run it restores."""

    dynamic = True

    def warm_up(self) -> None:
        self.tools = [add]

    def restore(self, messages: list[ChatMessage]) -> None:
        raise BreakpointException("not this run's pause")


def test_a_pause_raised_while_a_run_is_rebuilt_is_a_snapshot_error() -> None:
    def restoring(position: int = 0) -> Agent:
        script = [calls(call("add", "c1", a=1, b=2)), "done"]
        return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=PausesOnRestore())

    with pytest.raises(BreakpointException) as paused:
        restoring().run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=1))
    with pytest.raises(SnapshotError, match=r"Cannot resume snapshot .*not this run's pause"):
        restoring(position=1).run(snapshot=paused.value.snapshot)


def test_resume_refuses_new_state_values() -> None:
    snapshot = pause(agent(), Breakpoint(phase=Phase.LLM_CALL, step=1)).snapshot
    with pytest.raises(ConfigurationError, match="do not pass system_prompt or state values"):
        agent().run(snapshot=snapshot, prefix="x")
    with pytest.raises(ConfigurationError, match="do not pass system_prompt or state values"):
        agent().run(snapshot=snapshot, system_prompt="other")


def test_resume_with_another_agent_configuration(caplog: pytest.LogCaptureFixture) -> None:
    snapshot = pause(agent(), Breakpoint(phase=Phase.LLM_CALL, step=1)).snapshot
    other = Agent(
        chat_generator=ScriptedChatGenerator(SCRIPT[1:]), tools=TOOLS, state_schema=RESUME_SCHEMA, max_agent_steps=9
    )
    with pytest.raises(SnapshotError, match="configured differently"):
        other.run(snapshot=snapshot, strict=True)
    with caplog.at_level(logging.WARNING, logger="agentfsm"):
        result = other.run(snapshot=snapshot)
    assert result["last_message"].text == "done"
    assert any(
        isinstance(r.msg, dict) and r.msg["event"] == "snapshot from another agent configuration"
        for r in caplog.records
    )


def test_snapshots_carry_the_fingerprint_of_their_agent() -> None:
    original = agent()
    snapshot = pause(original, Breakpoint(phase=Phase.TOOL_RUN, step=2)).snapshot
    assert snapshot.agent_fingerprint == original.fingerprint == agent().fingerprint
    original.max_agent_steps += 1
    assert original.fingerprint != snapshot.agent_fingerprint


def test_a_resumed_run_snapshots_under_the_agent_that_resumed_it() -> None:
    snapshot = pause(agent(), Breakpoint(phase=Phase.TOOL_RUN, step=2)).snapshot
    other = Agent(
        chat_generator=ScriptedChatGenerator(SCRIPT[1:]), tools=TOOLS, state_schema=RESUME_SCHEMA, max_agent_steps=9
    )
    with pytest.raises(BreakpointException) as paused:
        other.run(snapshot=snapshot, break_point=Breakpoint(phase=Phase.LLM_CALL, step=3))
    assert paused.value.snapshot.agent_fingerprint == other.fingerprint != snapshot.agent_fingerprint


def test_resume_in_another_process(tmp_path: Path) -> None:
    original = agent()
    snapshot = pause(original, Breakpoint(phase=Phase.TOOL_RUN, step=2)).snapshot
    snapshot.to_file(tmp_path / "snap.json")
    (tmp_path / "agent.json").write_text(json.dumps(original.to_dict()))
    program = """
import json, sys
from agentfsm import Agent, AgentSnapshot
from tests.helpers import SIDE_EFFECTS
agent = Agent.from_dict(json.load(open(sys.argv[1])), allowed_modules=["tests"])
result = agent.run(snapshot=AgentSnapshot.from_file(sys.argv[2]))
print(json.dumps({"messages": [m.to_dict() for m in result["messages"]], "effects": SIDE_EFFECTS, "notes": result["notes"]}))
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "agent.json"), str(tmp_path / "snap.json")],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    expected = agent().run(USER)
    assert out["messages"] == [m.to_dict() for m in expected["messages"]]
    assert out["effects"] == ["remember(x)", "add(3,4)"], "the other process runs only what was left"
    assert out["notes"] == ["x"]


# -- decoding untrusted bytes -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def snapshot_bytes() -> bytes:
    try:
        agent().run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=2))
    except BreakpointException as exc:
        return bytes(exc.snapshot.to_bytes())
    raise AssertionError("no pause")


def test_snapshot_round_trips(snapshot_bytes: bytes) -> None:
    snapshot = AgentSnapshot.from_bytes(snapshot_bytes)
    assert AgentSnapshot.from_bytes(snapshot.to_bytes()) == snapshot
    assert AgentSnapshot.from_dict(snapshot.to_dict()) == snapshot


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format_version=99), "newer than this agentfsm reads"),
        (lambda d: d.update(format_version=0), "does not exist"),
        (lambda d: d.update(phase="DONE"), "resumes into an active phase"),
        (lambda d: d.update(phase="SLEEPING"), "phase"),
        (lambda d: d.update(step=-1), "step"),
        (lambda d: d.pop("messages"), "messages: Field required"),
        (lambda d: d.update(messages="hello"), "messages"),
        (lambda d: d.update(created_at="yesterday"), "created_at"),
        (lambda d: d.update(surprise=1), "surprise: Extra inputs are not permitted"),
    ],
)
def test_tampered_snapshots_are_clear_errors(snapshot_bytes: bytes, change: Any, message: str) -> None:
    data = json.loads(snapshot_bytes)
    change(data)
    with pytest.raises(SnapshotError, match=message):
        AgentSnapshot.from_dict(data)


def test_truncated_and_non_json_bytes(snapshot_bytes: bytes) -> None:
    with pytest.raises(SnapshotError, match="not valid JSON"):
        AgentSnapshot.from_bytes(snapshot_bytes[: len(snapshot_bytes) // 2])
    with pytest.raises(SnapshotError, match="is a JSON object"):
        AgentSnapshot.from_bytes(b"[1, 2]")
    with pytest.raises(SnapshotError, match="Cannot read snapshot file"):
        AgentSnapshot.from_file("/nonexistent/snap.json")


def test_tampered_content_fails_on_resume_not_deep_inside_the_run(snapshot_bytes: bytes) -> None:
    data = json.loads(snapshot_bytes)
    data["messages"][0] = {"role": "robot", "content": []}
    with pytest.raises(SnapshotError, match="Unknown chat role"):
        agent().run(snapshot=data)
    data = json.loads(snapshot_bytes)
    data["state"]["unknown_key"] = 1
    with pytest.raises(SnapshotError, match=r"\['unknown_key'\].*state_schema"):
        agent().run(snapshot=data)
    data = json.loads(snapshot_bytes)
    data["state"]["notes"] = {"__agentfsm__": "object", "type": "os.system", "data": {}}
    with pytest.raises(SnapshotError, match="not in the allow-list"):
        agent().run(snapshot=data)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fuzzed_bytes_only_raise_snapshot_error(snapshot_bytes: bytes, data: st.DataObject) -> None:
    mutated = bytearray(snapshot_bytes)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mutated)))
    candidate = bytes(mutated[:cut]) if data.draw(st.booleans()) else bytes(mutated)
    try:
        snapshot = AgentSnapshot.from_bytes(candidate)
    except SnapshotError:
        return
    with contextlib.suppress(SnapshotError):
        agent().run(snapshot=snapshot)


@given(st.binary(max_size=200))
def test_random_bytes_only_raise_snapshot_error(blob: bytes) -> None:
    with pytest.raises(SnapshotError):
        AgentSnapshot.from_bytes(blob)


# -- snapshots written by earlier versions --------------------------------------------------------------

FIXTURES = Path(__file__).parents[1] / "fixtures" / "snapshots"


@pytest.mark.parametrize(
    ("name", "kind", "decisions"),
    [
        ("format3-breakpoint.json", BreakpointHit, []),
        ("format3-awaiting-decision.json", AwaitingDecision, [ToolExecutionDecision("add", True, "a1")]),
        ("format3-outcome-unknown.json", OutcomeUnknown, [ToolExecutionDecision("add", False, "a1", feedback="3")]),
    ],
)
def test_format_3_snapshots_of_every_pause_load_typed_and_resume(name: str, kind: type, decisions: list[Any]) -> None:
    snapshot = AgentSnapshot.from_file(FIXTURES / name)
    assert snapshot.format_version == SNAPSHOT_FORMAT_VERSION and isinstance(snapshot.pause, kind)
    assert snapshot.pause.to_dict() == snapshot.break_point, "the typed reason serializes as it was stored"
    confirming = {"add": BreakpointConfirmationStrategy(None)} if kind is AwaitingDecision else {}
    agent = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2)), "done"], position=1),
        tools=[add],
        confirmation_strategies=confirming,
    )
    result = agent.run(snapshot=snapshot, decisions=decisions)
    assert result["last_message"].text == "done"
    assert [m.tool_call_result.result for m in result["messages"] if m.tool_call_result] == ["3"]


def test_a_pause_reason_without_its_facts_is_a_snapshot_error() -> None:
    data = AgentSnapshot.from_file(FIXTURES / "format3-outcome-unknown.json").to_dict()
    del data["break_point"]["tool_call_ids"]
    with pytest.raises(SnapshotError, match="break_point"):
        AgentSnapshot.from_dict(data)


#: LLM_CALL's work before version 5 put the input guardrails' item second.
FORMAT_4_LLM_CALL_WORK = (Work.BEFORE_LLM, Work.CALL_MODEL, Work.AFTER_LLM)


@pytest.mark.parametrize("stage", range(len(FORMAT_4_LLM_CALL_WORK) + 1))
def test_a_format_4_snapshot_in_llm_call_resumes_at_the_same_work_item(stage: int) -> None:
    """A stage is a position in ``PHASE_WORK``: read as written, a reply already in would be asked for again."""
    paused = pause(agent(), AgentBreakpoint("assistant", Breakpoint("chat_generator", visit_count=1))).snapshot
    older = AgentSnapshot.from_dict({**paused.to_dict(), "format_version": 4, "phase": "LLM_CALL", "stage": stage})
    work = PHASE_WORK[Phase.LLM_CALL]
    if stage < len(FORMAT_4_LLM_CALL_WORK):
        assert work[older.stage] is FORMAT_4_LLM_CALL_WORK[stage]
    else:
        assert older.stage == len(work), "the phase's work all done"
    assert AgentSnapshot.from_dict(older.to_dict()).stage == older.stage, "written as version 5, read as written"
