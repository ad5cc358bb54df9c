"""Ready hooks: budgets, compaction, offloading, confirmation as a hook, and hook_context."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, ChatRole, ConfigurationError, State, ToolCall, hook, tool
from agentfsm.builtin_hooks import (
    CompactionHook,
    ConfirmationHook,
    DirectoryToolResultStore,
    EstimatedTokens,
    MessageCount,
    SlidingWindowCompactor,
    SQLiteToolResultStore,
    StepBudgetHook,
    SummarizationCompactor,
    TokenBudgetHook,
    ToolResultOffloadHook,
    ToolResultPruningCompactor,
    estimate_tokens,
    total_tokens,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy
from agentfsm.testing import assert_resume_equivalent
from tests.helpers import SIDE_EFFECTS, RuleUI, ScriptedUI, add, call, calls

USER = [ChatMessage.from_user("go")]


@tool
def essay(words: int) -> str:
    """Write a long text of ``words`` numbered words."""
    SIDE_EFFECTS.append(f"essay({words})")
    return " ".join(f"word{i}" for i in range(words))


def adding(steps: int, usage: dict[str, int] | None = None) -> list[ChatMessage | str]:
    meta = {"usage": usage} if usage else {}
    replies: list[ChatMessage | str] = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": i, "b": 1}, id=f"c{i}")], meta=meta)
        for i in range(steps)
    ]
    return [*replies, ChatMessage.from_assistant("done", meta=meta)]


# -- budgets -------------------------------------------------------------------------------------------


def test_total_tokens_reads_either_api() -> None:
    assert total_tokens({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}) == 8
    assert total_tokens({"input_tokens": 10, "output_tokens": 4}) == 14
    assert total_tokens(None) == 0


@pytest.mark.parametrize("final", [False, True])
def test_a_token_budget_ends_the_run_before_the_next_model_call(final: bool) -> None:
    model = ScriptedChatGenerator(adding(5, {"input_tokens": 30, "output_tokens": 10}))
    agent = Agent(
        chat_generator=model, tools=[add], hooks={"before_llm": [TokenBudgetHook(100, add_final_message=final)]}
    )
    result = agent.run(USER)
    assert result["exit_reason"] == "token_budget"
    assert len(model.calls) == 3, "40 tokens a call: the budget of 100 is used up after the third"
    assert result["token_usage"] == {"input_tokens": 90, "output_tokens": 30}
    last = result["last_message"]
    if final:
        assert last.role is ChatRole.ASSISTANT and "used 120 tokens, its budget is 100" in (last.text or "")
    else:
        assert last.role is ChatRole.TOOL


def test_a_tool_call_budget() -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator(adding(5)), tools=[add], hooks={"before_llm": [StepBudgetHook(2)]}
    )
    result = agent.run(USER)
    assert result["exit_reason"] == "tool_call_budget" and result["tool_call_counts"] == {"add": 2}


def test_ready_hooks_say_where_they_belong() -> None:
    with pytest.raises(ConfigurationError, match="TokenBudgetHook, which goes on before_llm"):
        Agent(chat_generator=ScriptedChatGenerator(["x"]), hooks={"after_tool": [TokenBudgetHook(10)]})
    with pytest.raises(ConfigurationError, match="max_total_tokens must be an int >= 1"):
        TokenBudgetHook(0)


# -- compaction ----------------------------------------------------------------------------------------


def compacting(compactor: Any, trigger: Any, steps: int = 6, **kwargs: Any) -> tuple[Agent, ScriptedChatGenerator]:
    model = ScriptedChatGenerator(adding(steps))
    hooks = {"before_llm": [CompactionHook(compactor, trigger, **kwargs)]}
    return Agent(chat_generator=model, tools=[add], system_prompt="Be brief.", hooks=hooks), model


def test_a_sliding_window_keeps_whole_steps_and_every_message_stays_recoverable() -> None:
    agent, model = compacting(SlidingWindowCompactor(min_keep_steps=2), MessageCount(7))
    result = agent.run(USER)
    for seen in model.calls:
        sent: list[ChatMessage] = seen["messages"]
        assert len(sent) <= 8, "the model is sent a bounded conversation"
        assert sent[0].role is ChatRole.SYSTEM and sent[1].text == "go", "system prompt and task are kept"
        answered = {r.origin.id for m in sent for r in m.tool_call_results}
        asked = {c.id for m in sent for c in m.tool_calls}
        assert answered == asked, "a tool call is never separated from its result"
    final = result["messages"]
    assert any("earlier messages were left out here" in (m.text or "") for m in final)
    whole = [m for m in result["compacted_messages"] + final if "left out here" not in (m.text or "")]
    assert sorted(m.to_dict().__repr__() for m in whole) == sorted(
        m.to_dict().__repr__()
        for m in Agent(chat_generator=ScriptedChatGenerator(adding(6)), tools=[add], system_prompt="Be brief.").run(
            USER
        )["messages"]
    ), "compacted_messages and messages hold the whole conversation"


def test_old_tool_results_are_pruned() -> None:
    model = ScriptedChatGenerator(
        [calls(call("essay", "e1", words=100)), calls(call("essay", "e2", words=100)), "done"]
    )
    hooks = {"before_llm": [CompactionHook(ToolResultPruningCompactor(max_chars=30), EstimatedTokens(150))]}
    result = Agent(chat_generator=model, tools=[essay], hooks=hooks).run(USER)
    first, second = [m.tool_call_result.result for m in result["messages"] if m.tool_call_result]  # type: ignore[union-attr]
    assert first.startswith("word0 word1") and first.endswith("more characters pruned]") and len(first) < 80
    assert len(second) > 600, "the last step's result is kept whole"
    assert next(m.tool_call_result.result for m in result["compacted_messages"]).endswith("word99")  # type: ignore[union-attr]
    assert estimate_tokens(result["messages"]) < 300


def test_old_steps_are_summarized_by_a_model() -> None:
    summarizer = ScriptedChatGenerator(["Added numbers; all fine."] * 5)
    agent, model = compacting(SummarizationCompactor(summarizer, min_keep_steps=1), MessageCount(6))
    result = agent.run(USER)
    asked = summarizer.calls[0]["messages"]
    assert asked[0].role is ChatRole.SYSTEM and "add({'a': 0, 'b': 1})" in (asked[1].text or "")
    summaries = [m for m in result["messages"] if (m.text or "").startswith("Summary of the conversation so far:")]
    assert len(summaries) == 1 and "Added numbers; all fine." in (summaries[0].text or "")
    assert all(len(seen["messages"]) <= 7 for seen in model.calls)


# -- offloading ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["directory", "sqlite"])
def test_large_tool_results_are_offloaded_and_read_back(tmp_path: Path, kind: str) -> None:
    store = (
        DirectoryToolResultStore(tmp_path / "results")
        if kind == "directory"
        else SQLiteToolResultStore(tmp_path / "r.db")
    )
    offload = ToolResultOffloadHook(store, threshold=200, preview_chars=20)
    model = ScriptedChatGenerator(
        [calls(call("essay", "e1", words=200), call("essay", "e2", words=3)), "read it", "done"]
    )
    agent = Agent(chat_generator=model, tools=[essay, offload.read_tool()], hooks={"after_tool": [offload]})
    result = agent.run(USER)
    big, small = [m for m in result["messages"] if m.tool_call_result]
    note = big.tool_call_result.result  # type: ignore[union-attr]
    ref = big.meta["offloaded"]
    assert f"stored as {ref!r}" in note and "It begins: 'word0 word1 word2 wo'" in note and len(note) < 300
    assert small.tool_call_result.result == "word0 word1 word2"  # type: ignore[union-attr]
    assert store.get(ref) == " ".join(f"word{i}" for i in range(200)), "nothing is lost"
    assert store.put(store.get(ref)) == ref, "the same result is stored once"
    read = offload.read_tool()
    assert read.invoke(ref=ref, offset=6, length=11) == "word1 word2"
    with pytest.raises(Exception, match="No offloaded result 'result-nope'"):
        read.invoke(ref="result-nope")


# -- confirmation as a hook ------------------------------------------------------------------------------


def test_a_confirmation_hook_is_the_confirm_phase() -> None:
    SIDE_EFFECTS.clear()
    strategy = BlockingConfirmationStrategy(AlwaysAskPolicy(), ScriptedUI([["reject", "no", None]]))
    script = [calls(call("add", "c1", a=1, b=2)), "done"]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[add],
        hooks={"before_tool": [ConfirmationHook({"*": strategy})]},
    )
    result = agent.run(USER)
    assert SIDE_EFFECTS == [] and "rejected by the user" in str(result["messages"][2].tool_call_result.result)  # type: ignore[union-attr]
    assert ("TOOL_PENDING", "CONFIRM") in [(r.source.value, r.dest.value) for r in result["trace"]]
    assert "CONFIRM" in str(agent.draw())
    with pytest.raises(ConfigurationError, match="given twice"):
        Agent(
            chat_generator=ScriptedChatGenerator(script),
            tools=[add],
            confirmation_strategies={"*": strategy},
            hooks={"before_tool": [ConfirmationHook({"*": strategy})]},
        )


# -- hook_context --------------------------------------------------------------------------------------

SEEN: list[Any] = []


@hook
def note_the_user(state: State, hook_context: dict[str, Any] | None = None) -> None:
    """Record who the run is for."""
    SEEN.append((hook_context or {}).get("user"))


class ContextStrategy(BlockingConfirmationStrategy):
    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        hook_context: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        SEEN.append(("strategy", (hook_context or {}).get("user")))
        return super().run(tool_name, tool_description, tool_params, tool_call_id, **kwargs)


@pytest.mark.parametrize("use_async", [False, True])
def test_hook_context_reaches_hooks_and_strategies_and_never_a_snapshot(use_async: bool) -> None:
    from agentfsm import Breakpoint, BreakpointException, Phase

    SEEN.clear()
    script = [calls(call("add", "c1", a=1, b=2)), "done"]

    def make(position: int = 0) -> Agent:
        return Agent(
            chat_generator=ScriptedChatGenerator(script, position=position),
            tools=[add],
            hooks={"before_llm": [note_the_user]},
            confirmation_strategies={"add": ContextStrategy(AlwaysAskPolicy(), RuleUI())},
        )

    context = {"user": "ana", "socket": object()}
    with pytest.raises(BreakpointException) as paused:
        make().run(USER, hook_context=context, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    assert "ana" not in paused.value.snapshot.to_bytes().decode()
    resumed = make(1)
    run = resumed.run_async(snapshot=paused.value.snapshot, hook_context={"user": "bo"}) if use_async else None
    result = (
        asyncio.run(run)
        if run is not None
        else resumed.run(snapshot=paused.value.snapshot, hook_context={"user": "bo"})
    )
    assert result["last_message"].text == "done"
    assert SEEN == ["ana", ("strategy", "ana"), "bo"]


# -- every ready hook: serialization, async, resume anywhere ------------------------------------------------


def ready_agent(tmp_path: Path, model_position: int = 0) -> Agent:
    store = DirectoryToolResultStore(tmp_path / "results")
    offload = ToolResultOffloadHook(store, threshold=120)
    script = [
        calls(call("essay", "e1", words=40)),
        calls(call("add", "a1", a=1, b=2), call("essay", "e2", words=5)),
        calls(call("add", "a2", a=3, b=4)),
        "done",
    ]
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=model_position),
        tools=[add, essay, offload.read_tool()],
        hooks={
            "before_llm": [
                CompactionHook(SlidingWindowCompactor(min_keep_steps=1), MessageCount(5)),
                CompactionHook(ToolResultPruningCompactor(max_chars=40), EstimatedTokens(60)),
                CompactionHook(SummarizationCompactor(ScriptedChatGenerator(["So far: sums."] * 20)), MessageCount(9)),
                TokenBudgetHook(10_000),
                StepBudgetHook(50),
            ],
            "after_tool": [offload],
            "before_tool": [ConfirmationHook({"add": BlockingConfirmationStrategy(AlwaysAskPolicy(), RuleUI())})],
        },
    )


def test_ready_hooks_serialize_with_the_agent(tmp_path: Path, allow_tests_modules: None) -> None:
    agent = ready_agent(tmp_path)
    again = Agent.from_dict(agent.to_dict())
    assert again.to_dict() == agent.to_dict()
    assert again.run(USER)["messages"] == ready_agent(tmp_path).run(USER)["messages"]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_run_with_every_ready_hook_resumes_anywhere_to_the_same_result(
    tmp_path: Path, allow_tests_modules: None, use_async: bool
) -> None:
    checked = assert_resume_equivalent(
        lambda: ready_agent(tmp_path), USER, side_effects=SIDE_EFFECTS, use_async=use_async, double_breaks=True
    )
    assert checked > 10


def test_without_keep_history_a_durable_store_still_holds_every_message(tmp_path: Path) -> None:
    from agentfsm.stores import SQLiteSnapshotStore

    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    hooks = {"before_llm": [CompactionHook(SlidingWindowCompactor(), MessageCount(5), keep_history=False)]}
    agent = Agent(chat_generator=ScriptedChatGenerator(adding(6)), tools=[add], hooks=hooks, snapshot_store=store)
    result = agent.run(USER)
    assert "compacted_messages" not in result
    [run] = store.runs()
    seen = {repr(m) for info in store.history(run.run_id) for m in store.load(run.run_id, info.seq).messages}
    whole = Agent(chat_generator=ScriptedChatGenerator(adding(6)), tools=[add]).run(USER)["messages"]
    assert all(repr(m.to_dict()) in seen for m in whole), "every message is in some stored snapshot"
