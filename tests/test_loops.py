"""Loop detection: the fact "the model repeats itself" and the consequence the agent picks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, Breakpoint, BreakpointException, ChatMessage, LoopDetection, Phase, State, hook
from agentfsm.errors import ConfigurationError, ConfigurationTypeError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.loops import repeated_call
from tests.helpers import add, call, calls

USER = [ChatMessage.from_user("go")]
ROOT = Path(__file__).resolve().parents[1]
#: The same call six times, then an answer.
SAME = [calls(call("add", f"c{i}", a=1, b=2)) for i in range(6)] + ["done"]


def looping(detection: LoopDetection | None, script: list[Any] = SAME, position: int = 0, **kwargs: Any) -> Agent:
    model = ScriptedChatGenerator(script, position=position)
    return Agent(chat_generator=model, tools=[add], loop_detection=detection, **kwargs)


def test_stop_ends_the_run_at_the_repeated_call() -> None:
    result = looping(LoopDetection(repeats=3)).run(USER)
    assert result.exit_reason == "loop_detected"
    assert result["step_count"] == 3 and result["messages"][-1].role.value == "tool"
    assert [r.trigger for r in result.trace][-1] == "loop_stop"


def test_tell_adds_a_message_once_per_row_and_the_run_goes_on() -> None:
    result = looping(LoopDetection(repeats=3, then="tell")).run(USER)
    assert result.exit_reason == "text" and result["step_count"] == 7
    told = [m.text for m in result["messages"] if m.role.value == "user"][1:]
    assert len(told) == 2 and "You called add with the same arguments 3 times" in told[0]


@hook
def stop_with_my_reason(state: State) -> None:
    """Decide what a loop means."""
    state.set("stop_run", f"looped after {state.get('step_count')} calls")


def test_hooks_decide_what_a_loop_means() -> None:
    agent = looping(LoopDetection(repeats=4, then="hooks"), hooks={"on_loop": [stop_with_my_reason]})
    assert agent.run(USER).exit_reason == "looped after 4 calls"


def test_calls_with_other_arguments_or_results_are_no_loop() -> None:
    varied = [calls(call("add", f"c{i}", a=i, b=2)) for i in range(6)] + ["done"]
    assert looping(LoopDetection(repeats=2), varied).run(USER).exit_reason == "text"
    messages = looping(None).run(USER)["messages"]
    assert repeated_call(messages[:-1], 6) == "add" and repeated_call(messages[:-1], 7) is None
    assert repeated_call(messages, 2) is None, "a text reply ends the row"


def test_off_by_default_and_then_nothing_is_read() -> None:
    agent = looping(None)
    assert agent.run(USER).exit_reason == "text"
    assert ("loop_detected", False) in agent.outline().constants
    assert ("loop_detected", False) not in looping(LoopDetection()).outline().constants


async def test_run_async_detects_the_same_loop() -> None:
    result = await looping(LoopDetection(repeats=3)).run_async(USER)
    assert result.exit_reason == "loop_detected" and result["step_count"] == 3


def test_a_run_paused_inside_a_row_detects_it_when_resumed_in_another_process(tmp_path: Path) -> None:
    with pytest.raises(BreakpointException) as paused:
        looping(LoopDetection(repeats=3)).run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=2))
    paused.value.snapshot.to_file(tmp_path / "snap.json")
    (tmp_path / "agent.json").write_text(json.dumps(looping(LoopDetection(repeats=3), position=2).to_dict()))
    program = """
import json, sys
from agentfsm import Agent, AgentSnapshot
agent = Agent.from_dict(json.load(open(sys.argv[1])), allowed_modules=["tests"])
result = agent.run(snapshot=AgentSnapshot.from_file(sys.argv[2]))
print(json.dumps({"exit_reason": result.exit_reason, "steps": result["step_count"]}))
"""
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "agent.json"), str(tmp_path / "snap.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"exit_reason": "loop_detected", "steps": 3}


def test_the_consequence_is_drawn_on_the_agents_diagram() -> None:
    drawing = str(looping(LoopDetection(then="tell")).draw())
    assert "on_loop - TellModel" in drawing
    assert "on_loop" not in str(looping(None).draw())


def test_loop_detection_serializes_with_the_agent() -> None:
    detection = LoopDetection(repeats=5, then="tell", message="Stop repeating {tool}.")
    assert Agent.from_dict(looping(detection).to_dict(), allowed_modules=["tests"]).loop_detection == detection


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"repeats": 1}, ConfigurationError),
        ({"then": "ignore"}, ConfigurationError),
        ({"message": 3}, ConfigurationError),
    ],
)
def test_bad_loop_detection_is_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        LoopDetection(**kwargs)
    with pytest.raises(ConfigurationTypeError):
        looping({"repeats": 3})  # type: ignore[arg-type]


def test_a_loop_stopped_by_detection_shows_in_the_events() -> None:
    events: list[Any] = []
    looping(LoopDetection(repeats=3)).run(USER, on_event=events.append)
    [entering_done] = [e for e in events if e.kind == "transition" and e.dest is Phase.DONE]
    assert (entering_done.trigger, entering_done.exit_reason) == ("loop_stop", "loop_detected")
    assert [e for e in events if e.kind == "hook"] == [], "the loop_stop edge, not a library hook, ends the run"
    assert events[-1].kind == "run_ended" and events[-1].exit_reason == "loop_detected"


def test_identical_parallel_calls_of_one_reply_count_as_one_repeat() -> None:
    fan_out = [calls(*(call("add", f"p{step}{i}", a=1, b=2) for i in range(3))) for step in range(4)] + ["done"]
    result = looping(LoopDetection(repeats=3), fan_out).run(USER)
    assert result.exit_reason == "loop_detected" and result["step_count"] == 3, "three replies, not three calls"
    assert repeated_call(result["messages"], 3) == "add" and repeated_call(result["messages"], 4) is None
    once = looping(LoopDetection(repeats=2), [fan_out[0], "done"]).run(USER)
    assert once.exit_reason == "text", "one reply fanning out is no loop"
