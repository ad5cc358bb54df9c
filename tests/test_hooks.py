"""Lifecycle hooks: the seed's examples, flow control, errors, lifecycle, serialization, exactly once."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    Agent,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    ConfigurationError,
    Phase,
    State,
    ToolInvocationError,
    hook,
    replace_values,
    tool,
)
from agentfsm.errors import SerializationError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hooks import HOOK_POINT_NAMES
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.testing import HOOK_CALLS, RecordingHook, assert_resume_equivalent, hook_sets, scripted_conversations
from tests.helpers import (
    add,
    always_continue,
    call,
    calls,
    continue_once,
    fail,
    finish,
    raise_in_hook,
    stop_at_once,
)

USER = [ChatMessage.from_user("What are the latest developments in fusion energy?")]
SEARCHES: list[str] = []


@tool
def search(query: Annotated[str, "The search query"]) -> str:
    """Search the web."""
    SEARCHES.append(query)
    return "Fusion startups reported net-energy-gain milestones this year."


# -- the seed's examples, unchanged but for imports and the model ------------------------------------


@hook
def build_context(state: State) -> None:
    # before_llm: build run-time system context once, before the first model call.
    if state.get("step_count") == 0:
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        system = ChatMessage.from_system(f"You are a research assistant. The current time is {now}.")
        state.set("messages", [system, *state.data["messages"]], handler_override=replace_values)


AUDITED: list[list[str]] = []


@hook
def audit_tool_calls(state: State) -> None:
    # before_tool: see which tools the model is about to run.
    pending = state.data["messages"][-1].tool_calls
    AUDITED.append([tc.tool_name for tc in pending])


@hook
def require_search(state: State) -> None:
    # on_exit: keep going until the agent has actually searched.
    if state.get("tool_call_counts", {}).get("search", 0) == 0:
        state.set("messages", [ChatMessage.from_system("Search before answering.")])


def seed_agent(model: ScriptedChatGenerator) -> Agent:
    return Agent(
        chat_generator=model,
        tools=[search],
        hooks={"before_llm": [build_context], "before_tool": [audit_tool_calls], "on_exit": [require_search]},
    )


def seed_script() -> ScriptedChatGenerator:
    return ScriptedChatGenerator(
        [
            "Fusion is making progress.",  # answers without searching: require_search sends it back
            calls(call("search", "s1", query="fusion energy 2026")),
            "Startups reported net-energy-gain milestones this year.",
        ]
    )


@pytest.mark.parametrize("use_async", [False, True])
def test_the_seed_example_runs_each_hook_at_its_point(use_async: bool) -> None:
    AUDITED.clear()
    model = seed_script()
    agent = seed_agent(model)
    result = asyncio.run(agent.run_async(USER)) if use_async else agent.run(USER)
    assert result["last_message"].text == "Startups reported net-energy-gain milestones this year."
    # before_llm: the model saw the run-time system context first, at its first call only.
    first_call = model.calls[0]["messages"]
    assert first_call[0].is_from("system") and "The current time is" in (first_call[0].text or "")
    assert sum(m.is_from("system") and "current time" in (m.text or "") for m in result["messages"]) == 1
    # on_exit: the first answer was no exit, because the hook appended a message after it.
    assert model.calls[1]["messages"][-1].text == "Search before answering."
    # before_tool: the hook saw the pending call.
    assert AUDITED == [["search"]]
    assert result["tool_call_counts"] == {"search": 1} and result["step_count"] == 3
    assert result["exit_reason"] == "text"


class GradeFinalAnswer:
    """Grade the Agent's answer with an LLM and ask it to improve a weak answer before finishing."""

    def __init__(self, verdicts: list[str]) -> None:
        self._judge = ScriptedChatGenerator(verdicts)
        self.warmed = self.closed = False

    def warm_up(self) -> None:
        self.warmed = True

    def close(self) -> None:
        self.closed = True

    def run(self, state: State) -> None:
        answer = state.data["messages"][-1].text or ""
        verdict = (
            self._judge.run(
                messages=[ChatMessage.from_user(f"Reply with only PASS or FAIL. Is this answer complete?\n\n{answer}")]
            )["replies"][0].text
            or ""
        )
        if "FAIL" in verdict.upper():
            state.set("messages", [ChatMessage.from_user("Your answer was incomplete. Please improve it.")])


@pytest.mark.parametrize("use_async", [False, True])
def test_an_on_exit_judge_sends_a_weak_answer_back_and_warms_up_with_the_agent(use_async: bool) -> None:
    grader = GradeFinalAnswer(["FAIL", "PASS"])
    model = ScriptedChatGenerator(["Vaccines help.", "Vaccines train the immune system to recognise a pathogen."])

    async def run_async(agent: Agent) -> dict[str, Any]:
        async with agent:
            return await agent.run_async([ChatMessage.from_user("Explain how vaccines work.")])

    agent = Agent(chat_generator=model, hooks={"on_exit": [grader]})
    if use_async:
        result = asyncio.run(run_async(agent))
    else:
        with agent:
            assert grader.warmed
            result = agent.run([ChatMessage.from_user("Explain how vaccines work.")])
    assert grader.warmed and grader.closed
    assert result["last_message"].text == "Vaccines train the immune system to recognise a pathogen."
    assert [m.text for m in result["messages"]][2] == "Your answer was incomplete. Please improve it."


# -- flow control ---------------------------------------------------------------------------------------


def test_continue_run_keeps_going_past_an_exit_and_is_reset_at_each_attempt() -> None:
    model = ScriptedChatGenerator(["first", "second", "third"])
    result = Agent(chat_generator=model, hooks={"on_exit": [continue_once]}).run(USER)
    assert [m.text for m in result["messages"][1:]] == ["first", "second"]
    assert result["exit_reason"] == "text" and result["continue_run"] is False
    assert [r.trigger for r in result["trace"] if r.source is Phase.EXIT_CHECK] == ["continue_run", "exit"]


def test_max_agent_steps_bounds_a_hook_that_never_lets_go() -> None:
    result = Agent(
        chat_generator=ScriptedChatGenerator(["a", "b", "c"]), hooks={"on_exit": [always_continue]}, max_agent_steps=2
    ).run(USER)
    assert result["exit_reason"] == "max_agent_steps" and result["step_count"] == 2
    assert result["trace"][-1].trigger == "continue_capped"


@pytest.mark.parametrize(
    ("point", "model_calls", "tools_run"),
    [("before_run", 0, 0), ("before_llm", 0, 0), ("after_llm", 1, 1), ("before_tool", 1, 1), ("after_tool", 1, 1)],
)
def test_stop_run_ends_the_run_before_its_next_model_call(point: str, model_calls: int, tools_run: int) -> None:
    model = ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2)), "never asked"])
    result = Agent(chat_generator=model, tools=[add], hooks={point: [stop_at_once]}).run(USER)
    assert result["exit_reason"] == "stopped by a hook" and result["stop_run"] == "stopped by a hook"
    assert len(model.calls) == model_calls
    assert result.get("tool_call_counts", {}).get("add", 0) == tools_run, "a pending call still gets its result"
    assert result["trace"][-1].trigger == "stop"


@hook
def stop_and_continue(state: State) -> None:
    state.set("continue_run", True)
    state.set("stop_run", "budget spent")


def test_stop_beats_continue() -> None:
    result = Agent(chat_generator=ScriptedChatGenerator(["a", "b"]), hooks={"on_exit": [stop_and_continue]}).run(USER)
    assert result["exit_reason"] == "budget spent" and result["step_count"] == 1


def test_an_after_llm_hook_changes_the_pending_calls_before_they_are_checked_and_run() -> None:
    @hook
    def redirect(state: State) -> None:
        reply = state.data["messages"][-1]
        if not reply.tool_calls:
            return
        swapped = ChatMessage.from_assistant(tool_calls=[call("add", reply.tool_calls[0].id, a=40, b=2)])
        state.set("messages", [*state.data["messages"][:-1], swapped], handler_override=replace_values)

    model = ScriptedChatGenerator([calls(call("add", "a1", a="not a number", b=1)), "done"])
    result = Agent(chat_generator=model, tools=[add], hooks={"after_llm": [redirect]}).run(USER)
    tool_result = result["messages"][2].tool_call_result
    assert tool_result is not None and tool_result.result == "42" and not tool_result.error


# -- errors ----------------------------------------------------------------------------------------------

ERRORS_SEEN: list[BaseException] = []


class RecordError:
    """An on_error hook that takes the error."""

    def run(self, state: State, error: BaseException | None = None) -> None:
        assert error is not None
        ERRORS_SEEN.append(error)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_hook_that_raises_fails_the_run_and_on_error_hooks_see_the_original_error(use_async: bool) -> None:
    ERRORS_SEEN.clear()
    HOOK_CALLS.clear()
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["hi"]),
        hooks={"before_llm": [raise_in_hook], "on_error": [RecordError(), RecordingHook("on_error"), raise_in_hook]},
    )
    with pytest.raises(RuntimeError, match="the hook failed") as raised:
        asyncio.run(agent.run_async(USER)) if use_async else agent.run(USER)
    assert [raised.value] == ERRORS_SEEN, "on_error hooks ran once, with the error that reached the caller"
    assert HOOK_CALLS == ["on_error@0"]


def test_bad_hook_configurations_are_refused_with_the_valid_points() -> None:
    with pytest.raises(ValueError, match=r"'before_everything'.*before_run"):
        Agent(chat_generator=ScriptedChatGenerator([]), hooks={"before_everything": [build_context]})
    with pytest.raises(ValueError, match=r"class GradeFinalAnswer.*instance"):
        Agent(chat_generator=ScriptedChatGenerator([]), hooks={"on_exit": [GradeFinalAnswer]})
    with pytest.raises(ValueError, match="which is not a hook"):
        Agent(chat_generator=ScriptedChatGenerator([]), hooks={"before_llm": [42]})  # type: ignore[list-item]
    with pytest.raises(ValueError, match="reserved"):
        Agent(chat_generator=ScriptedChatGenerator([]), state_schema={"stop_run": {"type": str}})
    assert set(HOOK_POINT_NAMES) == {
        "before_run", "before_llm", "after_llm", "before_tool", "after_tool", "on_exit", "after_run", "on_error",
        "on_loop",
    }  # fmt: skip


def test_async_hooks_need_run_async_and_sync_hooks_run_off_the_event_loop() -> None:
    seen: dict[str, str] = {}

    @hook
    async def async_hook(state: State) -> None:
        seen["async"] = threading.current_thread().name

    @hook
    def sync_hook(state: State) -> None:
        seen["sync"] = threading.current_thread().name

    agent = Agent(chat_generator=ScriptedChatGenerator(["a", "b"]), hooks={"before_llm": [async_hook, sync_hook]})
    with pytest.raises(TypeError, match=r"async.*run_async"):
        agent.run(USER)
    asyncio.run(agent.run_async(USER))
    assert seen["async"] == threading.main_thread().name != seen["sync"]


def test_token_usage_is_summed_from_the_replies() -> None:
    replies = [
        ChatMessage.from_assistant(
            tool_calls=[call("add", "a1", a=1, b=2)], meta={"usage": {"total_tokens": 10, "prompt_tokens": 7}}
        ),
        ChatMessage.from_assistant("3", meta={"usage": {"total_tokens": 5, "prompt_tokens": 4}}),
    ]
    result = Agent(chat_generator=ScriptedChatGenerator(replies), tools=[add]).run(USER)
    assert result["token_usage"] == {"total_tokens": 15, "prompt_tokens": 11}


# -- serialization and diagrams ------------------------------------------------------------------------


def test_hooks_serialize_by_import_path(allow_tests_modules: None) -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["a"]),
        hooks={"on_exit": [continue_once], "before_llm": [RecordingHook("b")]},
    )
    rebuilt = Agent.from_dict(agent.to_dict())
    assert sorted(rebuilt.hooks or {}) == ["before_llm", "on_exit"]  # both points came back
    assert rebuilt.to_dict() == agent.to_dict() and rebuilt.fingerprint == agent.fingerprint
    with pytest.raises(SerializationError, match="'<lambda>' of 'before_llm'"):
        Agent(chat_generator=ScriptedChatGenerator([]), hooks={"before_llm": [lambda state: None]}).to_dict()


def test_the_agent_diagram_draws_each_hook_on_its_phase() -> None:
    drawn = seed_agent(seed_script()).draw()
    assert isinstance(drawn, str)
    assert "hooks before_llm - build_context" in drawn and "hooks on_exit - require_search" in drawn
    assert "continue_run" in drawn and "EXIT_CHECK --> DONE : 1 stop" in drawn
    assert "continue_run" not in Agent(chat_generator=ScriptedChatGenerator([])).draw()


# -- exactly once across pause, resume and crash --------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripted_conversations([add], max_replies=4), hooks=hook_sets(), use_async=st.booleans())
def test_every_hook_fires_exactly_once_across_pause_and_resume(
    script: list[ChatMessage], hooks: dict[str, list[Any]], use_async: bool
) -> None:
    assert_resume_equivalent(
        lambda: Agent(chat_generator=ScriptedChatGenerator(script), tools=[add], hooks=hooks),
        USER,
        side_effects=HOOK_CALLS,
        use_async=use_async,
        allowed_modules=["tests"],
    )


def test_hooks_that_ran_are_not_run_again_after_a_crash(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    HOOK_CALLS.clear()
    crash = {"armed": True}

    @hook
    def crash_once(state: State) -> None:
        if crash["armed"]:
            crash["armed"] = False
            raise KeyboardInterrupt("the process died")

    def make() -> Agent:
        return Agent(
            chat_generator=ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2)), "done"]),
            tools=[add],
            snapshot_store=store,
            hooks={"after_llm": [RecordingHook("after_llm")], "before_tool": [crash_once]},
        )

    with pytest.raises(KeyboardInterrupt):
        make().run(USER)
    run_id = store.runs()[0].run_id
    latest = store.latest(run_id)
    # The failed run's record, where it failed: after_llm's hooks ran, the run went on.
    assert latest.phase is Phase.FAILED and (latest.reopened().phase, latest.stage) == (Phase.TOOL_PENDING, 0)
    resumed = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2)), "done"], position=1),
        tools=[add],
        snapshot_store=store,
        hooks={"after_llm": [RecordingHook("after_llm")], "before_tool": [crash_once]},
    ).run(snapshot=latest)
    assert resumed["last_message"].text == "done"
    assert HOOK_CALLS == ["after_llm@1", "after_llm@2"], (
        "after the first reply once (before the crash), then the second"
    )


def test_a_pause_between_hook_points_keeps_which_ran() -> None:
    HOOK_CALLS.clear()
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["first", "second"]),
        hooks={
            "before_run": [RecordingHook("before_run")],
            "on_exit": [continue_once],
            "after_run": [RecordingHook("after_run")],
        },
    )
    with pytest.raises(BreakpointException) as paused:
        agent.run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=1))
    again = Agent.from_dict(agent.to_dict(), allowed_modules=["tests"])
    again.run(snapshot=paused.value.snapshot)
    assert HOOK_CALLS == ["before_run@0", "after_run@2"]


def test_an_unknown_hook_point_in_agent_config_lists_the_points() -> None:
    with pytest.raises(ConfigurationError, match=", ".join(HOOK_POINT_NAMES)):
        Agent(chat_generator=ScriptedChatGenerator([]), hooks={"on_start": []})


# -- the contract: which points fire on which path (the README's table) ------------------------------


def every_point(**extra: list[Any]) -> dict[str, list[Any]]:
    hooks: dict[str, list[Any]] = {point: [RecordingHook(point)] for point in HOOK_POINT_NAMES}
    for point, more in extra.items():
        hooks[point] = [*more, *hooks[point]]
    return hooks


@pytest.mark.parametrize(
    ("script", "options", "fired", "exit_reason"),
    [
        (["hi"], {}, ["before_run@0", "before_llm@0", "after_llm@1", "on_exit@1", "after_run@1"], "text"),
        (
            [calls(call("finish", "f1", answer="42"))],
            {"exit_conditions": ["finish"]},
            [
                "before_run@0",
                "before_llm@0",
                "after_llm@1",
                "before_tool@1",
                "after_tool@1",
                "on_exit@1",
                "after_run@1",
            ],
            "tool:finish",
        ),
        (
            [calls(call("add", "a1", a=1, b=2))],
            {"max_agent_steps": 1},
            ["before_run@0", "before_llm@0", "after_llm@1", "before_tool@1", "after_tool@1", "after_run@1"],
            "max_agent_steps",
        ),
        (
            ["never asked"],
            {"hooks": every_point(before_llm=[stop_at_once])},
            ["before_run@0", "before_llm@0", "after_run@0"],
            "stopped by a hook",
        ),
    ],
    ids=["text exit", "tool exit", "max_agent_steps", "stop_run"],
)
def test_the_hook_contract(script: list[Any], options: dict[str, Any], fired: list[str], exit_reason: str) -> None:
    HOOK_CALLS.clear()
    options = {"hooks": every_point(), **options}
    result = Agent(chat_generator=ScriptedChatGenerator(script), tools=[add, finish], **options).run(USER)
    assert result["exit_reason"] == exit_reason
    assert [c.split(".")[0] for c in HOOK_CALLS] == fired


def test_the_hook_contract_on_an_error() -> None:
    HOOK_CALLS.clear()
    agent = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("fail", "x1", reason="boom"))]),
        tools=[fail],
        raise_on_tool_invocation_failure=True,
        hooks=every_point(),
    )
    with pytest.raises(ToolInvocationError, match="boom"):
        agent.run(USER)
    assert HOOK_CALLS == ["before_run@0", "before_llm@0", "after_llm@1", "before_tool@1", "on_error@1"]


def test_stop_run_written_by_a_tool_or_a_snapshot_is_honoured_without_hooks() -> None:
    from agentfsm import Breakpoint, BreakpointException, Phase, tool
    from agentfsm.generators import ScriptedChatGenerator

    @tool(outputs_to_state={"stop_run": {"source": "reason"}})
    def halt(reason: str) -> dict[str, str]:
        """Ask the run to stop."""
        return {"reason": reason}

    script = [calls(call("halt", "h1", reason="the tool said so")), "never sent"]
    result = Agent(chat_generator=ScriptedChatGenerator(script), tools=[halt]).run([ChatMessage.from_user("go")])
    assert result["exit_reason"] == "the tool said so" and result["step_count"] == 1

    # A hook asked to stop while a call was pending; the run paused; an agent without hooks resumes it.
    script = [calls(call("add", "a1", a=1, b=2)), "never sent"]
    with_hook = Agent(chat_generator=ScriptedChatGenerator(script), tools=[add], hooks={"after_llm": [stop_at_once]})
    with pytest.raises(BreakpointException) as paused:
        with_hook.run([ChatMessage.from_user("go")], break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    assert paused.value.snapshot.state["stop_run"] == "stopped by a hook"
    without_hooks = Agent(chat_generator=ScriptedChatGenerator(script, position=1), tools=[add])
    result = without_hooks.run(snapshot=paused.value.snapshot)
    assert result["exit_reason"] == "stopped by a hook" and result["step_count"] == 1
