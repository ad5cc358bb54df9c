from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    Agent,
    ChatMessage,
    ConfigurationError,
    ModelClientError,
    Phase,
    StreamingChunk,
    Tool,
    ToolCall,
    ToolInvocationError,
    Toolset,
    tool,
)
from agentfsm.errors import ScriptExhaustedError, ToolArgumentsError, ToolNotFoundError
from agentfsm.generators import ScriptedChatGenerator
from tests.helpers import SIDE_EFFECTS, add, call, calls, fail, finish

USER = [ChatMessage.from_user("go")]


def make_agent(script: list[Any], **kwargs: Any) -> Agent:
    kwargs.setdefault("tools", [add, fail, finish])
    return Agent(chat_generator=ScriptedChatGenerator(script), **kwargs)


def test_without_tools_the_agent_is_a_chat_generator() -> None:
    result = Agent(chat_generator=ScriptedChatGenerator(["Hello!"])).run(USER)
    assert [m.text for m in result["messages"]] == ["go", "Hello!"]
    assert result["last_message"].text == "Hello!"
    assert result["exit_reason"] == "text"
    assert result["step_count"] == 1


def test_result_shape_and_trace() -> None:
    agent = make_agent([calls(call("add", "c1", a=2, b=3)), "It is 5."], state_schema={"note": {"type": str}})
    result = agent.run(USER, note="n")
    assert set(result) == {"messages", "last_message", "note", "step_count", "tool_call_counts", "exit_reason", "trace"}
    assert result["note"] == "n"
    assert result["tool_call_counts"] == {"add": 1}
    assert result["step_count"] == 2
    roles = [m.role.value for m in result["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert result["messages"][2].tool_call_result.result == "5"
    path = [(r.source, r.dest) for r in result["trace"]]
    assert path == [
        (Phase.IDLE, Phase.LLM_CALL),
        (Phase.LLM_CALL, Phase.TOOL_PENDING),
        (Phase.TOOL_PENDING, Phase.TOOL_RUN),
        (Phase.TOOL_RUN, Phase.EXIT_CHECK),
        (Phase.EXIT_CHECK, Phase.LLM_CALL),
        (Phase.LLM_CALL, Phase.EXIT_CHECK),
        (Phase.EXIT_CHECK, Phase.DONE),
    ]
    assert [r.step for r in result["trace"]] == [0, 1, 1, 1, 1, 2, 2]
    assert all(r.duration_us >= 0 for r in result["trace"])


def test_exit_on_tool_name_after_it_ran_without_error() -> None:
    agent = make_agent(
        [calls(call("add", a=1, b=1)), calls(call("finish", answer="42")), "unused"], exit_conditions=["finish"]
    )
    result = agent.run(USER)
    assert result["exit_reason"] == "tool:finish"
    assert result["last_message"].tool_call_result.result == "42"
    assert result["step_count"] == 2


def test_exit_tool_that_errors_does_not_exit() -> None:
    agent = make_agent(
        [calls(call("finish")), calls(call("finish", answer="ok"))],  # first call misses a required argument
        exit_conditions=["finish"],
    )
    result = agent.run(USER)
    assert result["messages"][2].tool_call_result.error
    assert result["exit_reason"] == "tool:finish"
    assert result["step_count"] == 2


def test_text_reply_ends_the_run_even_with_tool_exit_conditions() -> None:
    result = make_agent(["just text"], exit_conditions=["finish"]).run(USER)
    assert result["exit_reason"] == "text"


def test_invalid_exit_conditions() -> None:
    with pytest.raises(ValueError, match=r"exit conditions.*\['nope'\]"):
        make_agent([], exit_conditions=["nope"])
    with pytest.raises(ConfigurationError):
        make_agent([], exit_conditions=[])


def test_max_agent_steps_stops_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    script = [calls(call("add", a=i, b=i)) for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="agentfsm"):
        result = make_agent(script, max_agent_steps=3).run(USER)
    assert result["exit_reason"] == "max_agent_steps"
    assert result["step_count"] == 3
    assert result["tool_call_counts"] == {"add": 3}
    assert result["trace"][-1].trigger == "max_steps"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].msg["event"] == "max_agent_steps reached"  # type: ignore[index]
    assert warnings[0].msg["max_agent_steps"] == 3  # type: ignore[index]


class Fired:
    """A hook, as Haystack's are written: an object whose run(state) counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def run(self, state: Any) -> None:
        self.calls += 1


def test_max_agent_steps_zero_returns_the_conversation_without_calling_the_model() -> None:
    model = ScriptedChatGenerator(["never said"])
    before_run, after_run = Fired(), Fired()
    agent = Agent(chat_generator=model, hooks={"before_run": [before_run], "after_run": [after_run]}, max_agent_steps=0)
    result = agent.run(USER)
    assert result["messages"] == USER
    assert result.exit_reason == "max_agent_steps"
    assert [r.trigger for r in result.trace] == ["max_steps"]
    assert model.position == 0
    assert (before_run.calls, after_run.calls) == (1, 1)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_max_agent_steps_must_be_a_non_negative_int(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_agent_steps"):
        make_agent([], max_agent_steps=bad)


def test_state_kwargs_must_be_declared() -> None:
    agent = make_agent(["ok"], state_schema={"user": {"type": str}, "docs": {"type": list[str]}})
    result = agent.run(USER, user="ann", docs=["a"])
    assert (result["user"], result["docs"]) == ("ann", ["a"])
    with pytest.raises(ValueError, match="Key 'other' not found in schema"):
        make_agent(["ok"]).run(USER, other=1)
    with pytest.raises(ConfigurationError, match="maintained by the agent"):
        make_agent(["ok"]).run(USER, step_count=3)


def test_reserved_state_keys_and_bad_schema() -> None:
    with pytest.raises(ConfigurationError, match="reserved"):
        make_agent([], state_schema={"step_count": {"type": int}})
    with pytest.raises(ValueError, match="Key 'x' is missing a 'type' entry"):
        make_agent([], state_schema={"x": {}})


def test_system_prompt_from_init_and_override() -> None:
    agent = make_agent(["a", "b", "c"], system_prompt="base")
    assert agent.run(USER)["messages"][0] == ChatMessage.from_system("base")
    assert agent.run(USER, system_prompt="override")["messages"][0] == ChatMessage.from_system("override")
    plain = make_agent(["a"])
    assert plain.run(USER)["messages"][0] == USER[0]


def test_runtime_tools_by_name_list_and_toolset() -> None:
    gen = ScriptedChatGenerator(["a", "b", "c"])
    agent = Agent(chat_generator=gen, tools=[add, fail, finish])
    agent.run(USER, tools=["add"])
    agent.run(USER, tools=[finish])
    agent.run(USER, tools=Toolset([fail, add]))
    assert [c["tools"] for c in gen.calls] == [["add"], ["finish"], ["fail", "add"]]
    with pytest.raises(ValueError, match="Unknown tool names \\['nope'\\]"):
        agent.run(USER, tools=["add", "nope"])
    with pytest.raises(TypeError, match="not a mix"):
        agent.run(USER, tools=["add", finish])  # type: ignore[list-item]


def test_runtime_tools_restrict_what_can_run() -> None:
    agent = make_agent([calls(call("fail", reason="x")), "ok"])
    result = agent.run(USER, tools=["add"])
    assert result["messages"][2].tool_call_result.error
    assert "Tool 'fail' not found" in result["messages"][2].tool_call_result.result


def test_tool_errors_become_error_messages_the_model_sees() -> None:
    gen = ScriptedChatGenerator(
        [calls(call("fail", reason="disk full"), call("nope"), call("add", a="x", b=1)), "recovered"]
    )
    result = Agent(chat_generator=gen, tools=[add, fail]).run(USER)
    errors = [m.tool_call_result for m in result["messages"] if m.tool_call_result]
    assert all(e.error for e in errors)
    assert "RuntimeError: disk full" in errors[0].result
    assert "Tool 'nope' not found. Available tools: add, fail." in errors[1].result
    assert "Invalid arguments for tool 'add'" in errors[2].result and "'x' is not of type 'integer'" in errors[2].result
    assert gen.calls[1]["messages"][-3:] == result["messages"][2:5]
    assert result["last_message"].text == "recovered"
    assert result["tool_call_counts"] == {"fail": 1}


@pytest.mark.parametrize(
    ("tool_call", "error"),
    [
        (call("fail", reason="x"), ToolInvocationError),
        (call("nope"), ToolNotFoundError),
        (call("add", a=1), ToolArgumentsError),
        (ToolCall("add", {"__raw__": "{a: 1"}), ToolArgumentsError),
    ],
)
def test_raise_on_tool_invocation_failure(tool_call: ToolCall, error: type[Exception]) -> None:
    agent = make_agent([calls(tool_call)], raise_on_tool_invocation_failure=True)
    with pytest.raises(error):
        agent.run(USER)


def test_invalid_json_arguments_are_reported_to_the_model() -> None:
    result = make_agent([calls(ToolCall("add", {"__raw__": "{a: 1"}, id="r")), "ok"]).run(USER)
    message = result["messages"][2].tool_call_result
    assert message.error and "not a valid JSON object: '{a: 1'" in message.result


def test_parallel_tool_calls_keep_call_order() -> None:
    script = [calls(*(call("add", f"c{i}", a=i, b=0) for i in range(6))), "done"]
    result = make_agent(script, tool_concurrency=3).run(USER)
    results = [m.tool_call_result for m in result["messages"] if m.tool_call_result]
    assert [r.origin.id for r in results] == [f"c{i}" for i in range(6)]
    assert [r.result for r in results] == [str(i) for i in range(6)]


def test_user_messages_are_not_mutated() -> None:
    messages = [ChatMessage.from_user("go")]
    make_agent(["a"]).run(messages)
    assert messages == [ChatMessage.from_user("go")]


def test_generator_errors() -> None:
    with pytest.raises(ScriptExhaustedError, match="ran out of replies"):
        make_agent([calls(call("add", a=1, b=2))]).run(USER)

    class NoTools:
        def run(self, messages: list[ChatMessage]) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match="does not accept a 'tools' parameter"):
        Agent(chat_generator=NoTools())  # type: ignore[arg-type]

    class Broken:
        def __init__(self, output: Any) -> None:
            self.output = output

        def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> Any:
            return self.output

    reply = ChatMessage.from_assistant("hi")
    for output in (
        {"replies": ["not a message"]},
        {"replies": []},
        {},
        None,
        {"replies": reply},
        {"replies": (m for m in [reply])},
        {"replies": [reply, "not a message"]},
    ):
        with pytest.raises(ModelClientError, match="must return"):
            Agent(chat_generator=Broken(output)).run(USER)


def test_streaming_callback_receives_text_tool_calls_and_results() -> None:
    chunks: list[StreamingChunk] = []
    agent = make_agent(
        [calls(call("add", "c1", a=1, b=2), text="adding"), "three is the answer"], streaming_callback=chunks.append
    )
    agent.run(USER)
    text = "".join(c.content for c in chunks)
    assert text == "addingthree is the answer"
    assert [c.tool_calls[0].tool_name for c in chunks if c.tool_calls] == ["add"]
    assert [c.tool_call_result.result for c in chunks if c.tool_call_result] == ["3"]
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["tool_calls", "stop"]
    per_run: list[StreamingChunk] = []
    make_agent(["x y"]).run(USER, streaming_callback=per_run.append)
    assert [c.content for c in per_run if c.content] == ["x ", "y"]


def test_async_streaming_callback_needs_run_async() -> None:
    async def callback(chunk: StreamingChunk) -> None: ...

    with pytest.raises(TypeError, match="needs run_async"):
        make_agent(["x"]).run(USER, streaming_callback=callback)


async def test_run_async_with_async_streaming_callback() -> None:
    chunks: list[StreamingChunk] = []

    async def callback(chunk: StreamingChunk) -> None:
        await asyncio.sleep(0)
        chunks.append(chunk)

    result = await make_agent([calls(call("add", a=1, b=2)), "three"]).run_async(USER, streaming_callback=callback)
    assert result["last_message"].text == "three"
    assert "".join(c.content for c in chunks) == "three"
    assert [c.tool_call_result.result for c in chunks if c.tool_call_result] == ["3"]


class SyncOnlyGenerator:
    """A generator without run_async: the async driver calls it in a worker thread."""

    def __init__(self, replies: list[Any]) -> None:
        self._inner = ScriptedChatGenerator(replies)

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, list[ChatMessage]]:
        return self._inner.run(messages, tools, **kwargs)


async def test_run_async_with_a_sync_only_generator() -> None:
    agent = Agent(chat_generator=SyncOnlyGenerator([calls(call("add", a=1, b=2)), "three"]), tools=[add])
    result = await agent.run_async(USER)
    assert result["last_message"].text == "three"


# -- sync and async runs make the same decisions ---------------------------------------------------

replies = st.one_of(
    st.text(max_size=8).map(ChatMessage.from_assistant),
    st.lists(
        st.one_of(
            st.builds(lambda a, b: call("add", a=a, b=b), st.integers(-5, 5), st.integers(-5, 5)),
            st.builds(lambda r: call("fail", reason=r), st.text(max_size=4)),
            st.builds(lambda a: call("finish", answer=a), st.text(max_size=4)),
            st.just(call("add", a="bad", b=1)),
            st.just(call("missing_tool")),
        ),
        min_size=1,
        max_size=3,
    ).map(lambda cs: calls(*cs)),
)


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "trace": [(r.step, r.source, r.dest, r.trigger) for r in result["trace"]]}


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(script=st.lists(replies, min_size=1, max_size=6), exit_on_finish=st.booleans(), max_steps=st.integers(1, 6))
def test_sync_and_async_runs_are_identical(script: list[ChatMessage], exit_on_finish: bool, max_steps: int) -> None:
    def run_both() -> tuple[Any, Any]:
        outcomes = []
        for mode in ("sync", "async"):
            agent = make_agent(
                [*script, "final"] * 2,
                exit_conditions=["text", "finish"] if exit_on_finish else ["text"],
                max_agent_steps=max_steps,
            )
            if mode == "sync":
                outcomes.append(comparable(agent.run(USER)))
            else:
                outcomes.append(comparable(asyncio.run(agent.run_async(USER))))
        return outcomes[0], outcomes[1]

    sync_result, async_result = run_both()
    assert sync_result == async_result
    assert sync_result["step_count"] <= max_steps


def test_side_effects_happen_once_per_call() -> None:
    SIDE_EFFECTS.clear()
    make_agent([calls(call("add", a=1, b=2), call("add", a=3, b=4)), "ok"]).run(USER)
    assert sorted(SIDE_EFFECTS) == ["add(1,2)", "add(3,4)"]


# -- State through tools ---------------------------------------------------------------------------


@tool(inputs_from_state={"repo": "repository"}, outputs_to_state={"found": {"source": "files"}, "last": {}})
def list_files(repository: str, pattern: str) -> dict[str, Any]:
    """List files in a repository."""
    return {"files": [f"{repository}/{pattern}"], "count": 1}


def test_tools_read_and_write_state() -> None:
    assert "repository" not in list_files.parameters["properties"]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(
            [calls(call("list_files", pattern="*.py"), call("list_files", pattern="*.md")), "ok"]
        ),
        tools=[list_files],
        state_schema={"repo": {"type": str}, "found": {"type": list[str]}, "last": {"type": dict[str, Any]}},
    )
    result = agent.run(USER, repo="agentfsm")
    assert result["found"] == ["agentfsm/*.py", "agentfsm/*.md"]
    assert result["last"] == {"files": ["agentfsm/*.md"], "count": 1}


def test_tool_state_keys_must_be_declared() -> None:
    with pytest.raises(ConfigurationError, match="Tool 'list_files' maps State key"):
        Agent(chat_generator=ScriptedChatGenerator([]), tools=[list_files])


def test_duplicate_tool_names_raise() -> None:
    with pytest.raises(ValueError, match="Duplicate tool names: \\['add'\\]"):
        make_agent([], tools=[add, Toolset([add])])


# -- serialization ----------------------------------------------------------------------------------


def test_agent_to_dict_from_dict_round_trip() -> None:
    agent = make_agent(
        [calls(call("add", a=1, b=2)), "three"],
        system_prompt="sys",
        exit_conditions=["text", "finish"],
        state_schema={"note": {"type": str}},
        max_agent_steps=7,
    )
    data = agent.to_dict()
    with pytest.raises(Exception, match="allow-list"):
        Agent.from_dict(data)
    clone = Agent.from_dict(data, allowed_modules=["tests"])
    assert clone.to_dict() == data
    assert comparable(clone.run(USER)) | {"messages": None} == comparable(agent.run(USER)) | {"messages": None}


def test_logging_emits_one_event_per_transition(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="agentfsm"):
        result = make_agent([calls(call("add", a=1, b=2)), "ok"]).run(USER)
    events = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "transition"]
    assert len(events) == len(result["trace"])
    assert set(events[0]) >= {"run_id", "step", "source", "dest", "trigger", "duration_us"}
    assert [(e["source"], e["dest"]) for e in events] == [(r.source.value, r.dest.value) for r in result["trace"]]
    assert len({e["run_id"] for e in events}) == 1


def test_logging_is_silent_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    make_agent([calls(call("add", a=1, b=2))], max_agent_steps=1).run(USER)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_the_models_tool_calls_are_kept_as_sent() -> None:
    from agentfsm.demo import get_weather

    reply = calls(call("get_weather", "w", city="Oslo"))
    result = Agent(chat_generator=ScriptedChatGenerator([reply, "ok"]), tools=[get_weather]).run(USER)
    assert result["messages"][1].tool_calls[0].arguments == {"city": "Oslo"}
    assert result["messages"][2].tool_call_result.origin.arguments == {"city": "Oslo"}


def test_configure_logging_writes_key_value_or_json_lines_straight_to_a_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import io

    import orjson

    from agentfsm import configure_logging, use_standard_logging

    stream = io.StringIO()
    try:
        configure_logging(stream=stream)
        result = make_agent([calls(call("add", "c1", a=1, b=2)), "3"], tools=[add]).run(USER)
        lines = stream.getvalue().splitlines()
        assert lines[0].startswith("level='debug' event='transition' ")
        assert "source='IDLE' dest='LLM_CALL' trigger='start'" in lines[0]
        transitions = [line for line in lines if "event='transition'" in line]
        assert len(transitions) == len(result["trace"]) == 7, "one line per transition"
        assert len(lines) == 7 + 2, "and one per transition of the tool call (checked, finished)"

        stream = io.StringIO()
        configure_logging("INFO", json=True, stream=stream)
        make_agent(["a", "b"], max_agent_steps=1).run(USER)
        assert stream.getvalue() == "", "no transitions at INFO, and one text reply ends the run"
        make_agent([calls(call("add", "c1", a=1, b=2))], tools=[add], max_agent_steps=1).run(USER)
        [warning] = [orjson.loads(line) for line in stream.getvalue().splitlines()]
        assert warning["level"] == "warning" and warning["event"] == "max_agent_steps reached"
        assert not caplog.records, "events written to the stream do not go through the standard logger too"

        with pytest.raises(ValueError, match="Unknown logging level"):
            configure_logging("LOUD")
    finally:
        use_standard_logging()
    with caplog.at_level(logging.DEBUG, logger="agentfsm"):
        make_agent(["hi"]).run(USER)
    assert [r.msg["event"] for r in caplog.records] == ["transition"] * 3, "back on the standard logger"


class WarmedOnce(Tool):
    """A tool that warms up asynchronously when it can, and records how it was warmed."""

    warmed: list[str]

    def warm_up(self) -> None:
        self.warmed.append("sync")

    async def warm_up_async(self) -> None:
        self.warmed.append("async")


async def test_async_warm_up_does_not_warm_the_same_tool_again_synchronously() -> None:
    part = WarmedOnce("noop", "Do nothing.", {"type": "object"}, lambda: None)
    part.warmed = []
    async with Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=[part]):
        pass
    assert part.warmed == ["async"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"tool_concurrency": 8, "tool_invoker_kwargs": {"max_workers": 2}}, "max_workers"),
        ({"tool_invoker_kwargs": {"max_workers": 2, "tool_concurrency": 3}}, "tool_concurrency"),
        (
            {"tool_streaming_callback_passthrough": True,
             "tool_invoker_kwargs": {"enable_streaming_callback_passthrough": False}},
            "enable_streaming_callback_passthrough",
        ),
        ({"tool_invoker_kwargs": {"raise_on_failure": True}}, "raise_on_tool_invocation_failure"),
        ({"tool_invoker_kwargs": {"max_worker": 2}}, "max_worker"),
    ],
)  # fmt: skip
def test_tool_runner_settings_that_conflict_or_do_not_exist_are_refused(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=[add], **kwargs)


def test_tool_runner_settings_given_twice_alike_are_kept_and_round_trip() -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["hi"]),
        tools=[add],
        tool_concurrency=2,
        tool_invoker_kwargs={"max_workers": 2},
    )
    assert agent.tool_concurrency == 2
    assert Agent.from_dict(agent.to_dict(), allowed_modules=["tests"]).tool_concurrency == 2
    assert Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=[add]).tool_concurrency == 4


def test_an_agent_turns_serialized_state_values_into_its_own() -> None:
    from agentfsm.errors import DeserializationError
    from agentfsm.serialization import serialize_value

    agent = Agent(chat_generator=ScriptedChatGenerator(["done"]), state_schema={"notes": {"type": list[str]}})
    assert agent.state_values(serialize_value({"notes": ["a"], "step_count": 2})) == {"notes": ["a"], "step_count": 2}
    with pytest.raises(DeserializationError, match="unknown"):
        agent.state_values(serialize_value({"unknown": 1}))
