"""Structured output: answers checked against ``output_type``, sent back on a budget, through declared edges."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from agentfsm import (
    Agent,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    LoopDetection,
    Phase,
    State,
    StreamingChunk,
    Tool,
    ToolCall,
    Toolset,
    UsageLimits,
)
from agentfsm.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    DeserializationError,
    OutputValidationError,
    SchemaError,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy
from agentfsm.output import FINAL_ANSWER_TOOL, RETRY_META_KEY
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import ScriptedUI, add, call, calls

ROOT = Path(__file__).resolve().parents[1]
USER = [ChatMessage.from_user("Which city?")]


class City(BaseModel):
    """A city, as the model must answer."""

    name: str
    population: int

    @field_validator("name")
    @classmethod
    def capitalised(cls, name: str) -> str:
        if not name[:1].isupper():
            raise ValueError("must start with a capital letter")
        return name


@dataclasses.dataclass
class Point:
    """A point, as a dataclass."""

    x: int
    y: int


NUMBERS = {"type": "array", "items": {"type": "integer"}, "title": "numbers"}
PARIS = '{"name": "Paris", "population": 2100000}'


def triggers(result: dict[str, Any]) -> list[str]:
    return [r.trigger for r in result["trace"]]


class ToolOnlyModel:
    """A user's chat generator written to the seed's signature: no response format, so the final-answer tool."""

    def __init__(self, replies: list[ChatMessage]) -> None:
        self.replies = replies
        self.tools_seen: list[list[str]] = []

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        assert "generation_kwargs" not in kwargs, "a generator that declares no response format gets none"
        self.tools_seen.append([t.name for t in tools or []])
        return {"replies": [self.replies.pop(0)]}


# -- the answer is checked, and sent back with what is wrong ---------------------------------------------


def test_an_answer_that_does_not_fit_goes_back_with_its_problems_and_the_fitting_one_is_the_output() -> None:
    model = ScriptedChatGenerator(['{"name": "paris"}', f"```json\n{PARIS}\n```"])
    result = Agent(chat_generator=model, output_type=City).run(USER)
    assert result["output"] == City(name="Paris", population=2100000) and result.output == result["output"]
    assert triggers(result) == ["start", "text_reply", "output_retry", "text_reply", "exit"]
    assert result.exit_reason == "text"
    feedback = result["messages"][2]
    assert feedback.meta == {RETRY_META_KEY: 1}
    assert "name: Value error, must start with a capital letter" in feedback.text
    assert "population: Field required" in feedback.text
    assert feedback in model.calls[1]["messages"], "the model saw why its answer was refused"


@pytest.mark.parametrize(
    ("output_type", "answers", "expected"),
    [
        (Point, ['{"x": 1}', '{"x": 1, "y": 2}'], Point(1, 2)),
        (NUMBERS, ["[1, 2.5]", "[1, 2]"], [1, 2]),
    ],
)
def test_dataclasses_and_json_schemas_are_output_types(output_type: Any, answers: list[str], expected: Any) -> None:
    result = Agent(chat_generator=ScriptedChatGenerator(answers), output_type=output_type).run(USER)
    assert result["output"] == expected and "output_retry" in triggers(result)


def test_the_response_format_reaches_a_generator_that_declares_it() -> None:
    seen: list[dict[str, Any]] = []

    class Recording(ScriptedChatGenerator):
        def run(self, messages: Any, tools: Any = None, streaming_callback: Any = None, **kwargs: Any) -> Any:
            seen.append(kwargs)
            return super().run(messages, tools, streaming_callback)

    Agent(chat_generator=Recording([PARIS]), output_type=City).run(USER)
    response_format = seen[0]["generation_kwargs"]["response_format"]
    assert response_format["type"] == "json_schema" and response_format["json_schema"]["name"] == "City"
    assert response_format["json_schema"]["schema"]["required"] == ["name", "population"]


def test_a_fallback_passes_the_response_format_on_only_when_each_of_its_generators_takes_it() -> None:
    from agentfsm.generators import FallbackChatGenerator

    native = FallbackChatGenerator([ScriptedChatGenerator([PARIS])])
    assert Agent(chat_generator=native, output_type=City).run(USER).exit_reason == "text"
    tool_only = FallbackChatGenerator(
        [ToolOnlyModel([calls(ToolCall(FINAL_ANSWER_TOOL, {"name": "Lyon", "population": 1}, id="f"))])]
    )
    assert Agent(chat_generator=tool_only, output_type=City).run(USER)["output"].name == "Lyon"


def test_a_run_fails_with_the_problems_once_its_retries_are_spent_and_on_error_hooks_see_it() -> None:
    errors: list[BaseException] = []

    def record(state: State, error: BaseException) -> None:
        errors.append(error)

    agent = Agent(
        chat_generator=ScriptedChatGenerator(["not json", '{"name": "Paris"}']),
        output_type=City,
        output_retries=1,
        hooks={"on_error": [record]},
    )
    with pytest.raises(OutputValidationError) as failed:
        agent.run(USER)
    error = failed.value
    assert error.output_name == "City" and error.retries == 1 and error.answer == '{"name": "Paris"}'
    assert error.problems == ["population: Field required"]
    assert isinstance(error, ValueError) and errors == [error]
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.problems, copy.answer, str(copy)) == (error.problems, error.answer, str(error))


def test_without_retries_the_first_answer_that_does_not_fit_fails_the_run() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["not json"]), output_type=City, output_retries=0)
    with pytest.raises(OutputValidationError, match="not JSON"):
        agent.run(USER)
    assert "output_retry" not in agent.draw(), "no retry edge in the drawing of an agent without retries"


def test_max_agent_steps_bounds_the_retries() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type=City, output_retries=5, max_agent_steps=1)
    with pytest.raises(OutputValidationError) as failed:
        agent.run(USER)
    assert failed.value.retries == 0


def test_retries_count_per_answer_a_new_user_message_starts_afresh() -> None:
    model = ScriptedChatGenerator(["{}", PARIS, "{}", PARIS])
    agent = Agent(chat_generator=model, output_type=City, output_retries=1)
    first = agent.run(USER)
    second = agent.run([*first["messages"], ChatMessage.from_user("And again?")])
    assert second["output"] == City(name="Paris", population=2100000)
    assert triggers(second).count("output_retry") == 1


def test_tools_run_before_the_answer_and_a_run_ending_without_one_has_no_output() -> None:
    model = ScriptedChatGenerator([calls(call("add", a=1, b=2)), '{"x": 3, "y": 0}'])
    assert Agent(chat_generator=model, tools=[add], output_type=Point).run(USER)["output"] == Point(3, 0)
    capped = Agent(chat_generator=ScriptedChatGenerator([calls(call("add", a=1, b=2))]), tools=[add],
                   output_type=Point, max_agent_steps=1).run(USER)  # fmt: skip
    assert capped.exit_reason == "max_agent_steps" and capped["output"] is None


def test_an_agent_without_output_type_has_no_output_key_and_no_output_edges() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["hi"]))
    result = agent.run(USER)
    assert "output" not in result and result.output is None
    assert "output_" not in agent.draw() and "answer fits" not in agent.draw()


def test_a_state_key_named_output_keeps_its_value_and_the_attribute_is_agentfsms() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator([PARIS]), output_type=City,
                  state_schema={"output": {"type": str}})  # fmt: skip
    result = agent.run(USER, output="mine")
    assert result["output"] == "mine" and result.output == City(name="Paris", population=2100000)
    assert pickle.loads(pickle.dumps(result)).output == result.output


# -- the final-answer tool, for generators without a response format -----------------------------------


def test_a_generator_without_response_format_answers_through_the_final_answer_tool() -> None:
    model = ToolOnlyModel(
        [
            calls(ToolCall(FINAL_ANSWER_TOOL, {"name": "Paris"}, id="f1")),
            calls(ToolCall(FINAL_ANSWER_TOOL, {"name": "Paris", "population": 2100000}, id="f2")),
        ]
    )
    result = Agent(chat_generator=model, tools=[add], output_type=City).run(USER)
    assert result["output"] == City(name="Paris", population=2100000)
    assert result.exit_reason == f"tool:{FINAL_ANSWER_TOOL}"
    assert model.tools_seen == [["add", FINAL_ANSWER_TOOL]] * 2
    assert "Call the final_answer tool again" in result["messages"][3].text


def test_the_final_answer_tool_wraps_a_schema_that_is_not_an_object() -> None:
    model = ToolOnlyModel([calls(call(FINAL_ANSWER_TOOL, "f1", answer=[1, 2]))])
    assert Agent(chat_generator=model, output_type=NUMBERS).run(USER)["output"] == [1, 2]


PARIS_CALL = ToolCall(FINAL_ANSWER_TOOL, {"name": "Paris", "population": 2100000}, id="f1")


def test_the_final_answer_is_no_tool_call_for_the_limits_nor_the_counts() -> None:
    model = ToolOnlyModel([calls(call("add", "c1", a=1, b=2)), calls(PARIS_CALL)])
    agent = Agent(chat_generator=model, tools=[add], output_type=City, usage_limits=UsageLimits(tool_calls=1))
    result = agent.run(USER)
    assert result["output"] == City(name="Paris", population=2100000) and result.exit_reason == "tool:final_answer"
    assert result["tool_call_counts"] == {"add": 1}


def test_a_strategy_for_every_tool_does_not_ask_about_the_final_answer() -> None:
    ui = ScriptedUI([["confirm", None, None]])
    strategy = BlockingConfirmationStrategy(AlwaysAskPolicy(), ui)
    model = ToolOnlyModel([calls(call("add", "c1", a=1, b=2)), calls(PARIS_CALL)])
    result = Agent(chat_generator=model, tools=[add], output_type=City, confirmation_strategies={"*": strategy}).run(
        USER
    )
    assert result["output"].name == "Paris" and [name for name, _ in ui.asked] == ["add"]


def test_loop_detection_does_not_take_the_same_answer_twice_for_a_loop() -> None:
    model = ToolOnlyModel([calls(PARIS_CALL, ToolCall(FINAL_ANSWER_TOOL, PARIS_CALL.arguments, id="f2"))])
    agent = Agent(chat_generator=model, output_type=City, loop_detection=LoopDetection(repeats=2))
    result = agent.run(USER)
    assert result["output"].name == "Paris" and result.exit_reason == "tool:final_answer"


def test_a_final_answer_that_does_not_fit_is_reported_as_json() -> None:
    model = ToolOnlyModel([calls(ToolCall(FINAL_ANSWER_TOOL, {"name": "paris"}, id="f1"))])
    with pytest.raises(OutputValidationError) as failed:
        Agent(chat_generator=model, output_type=City, output_retries=0).run(USER)
    assert failed.value.answer == '{"name":"paris"}'


class ShowsAFinalAnswer(Toolset):
    """A dynamic toolset (as an MCP server's is) showing a tool whose name is the final-answer tool's."""

    dynamic = True

    def warm_up(self) -> None:
        self.tools = [Tool(FINAL_ANSWER_TOOL, "Not the agent's.", {"type": "object"}, lambda: "theirs")]


def test_a_dynamic_toolset_showing_a_tool_named_final_answer_is_refused() -> None:
    model = ToolOnlyModel([calls(PARIS_CALL)])
    with pytest.raises(ConfigurationError, match=FINAL_ANSWER_TOOL):
        Agent(chat_generator=model, tools=ShowsAFinalAnswer(), output_type=City).run(USER)


class Node(BaseModel):
    """A recursive model: pydantic gives it a root ``$ref`` into ``$defs``."""

    value: int
    children: list[Node] = []


def test_a_recursive_model_answers_through_the_final_answer_tool_with_its_fields_at_the_root() -> None:
    tree = {"value": 1, "children": [{"value": 2}]}
    model = ToolOnlyModel([calls(ToolCall(FINAL_ANSWER_TOOL, tree, id="f1"))])
    agent = Agent(chat_generator=model, output_type=Node)
    assert agent.run(USER)["output"] == Node(value=1, children=[Node(value=2)])
    spec = agent.output_spec
    assert spec is not None and not spec.wrapped and spec.parameters["required"] == ["value"]


def test_a_recursive_model_goes_out_as_a_response_format_with_an_object_at_its_root() -> None:
    spec = Agent(chat_generator=ScriptedChatGenerator([]), output_type=Node).output_spec
    assert spec is not None
    schema = spec.response_format()["json_schema"]["schema"]
    assert schema["type"] == "object" and "$ref" not in schema and "Node" in schema["$defs"]


def test_a_schema_whose_references_do_not_resolve_is_refused_when_the_agent_is_built() -> None:
    for schema in ({"$ref": "#/$defs/Missing"}, {"type": "array", "items": {"$ref": "#/definitions/X"}}):
        with pytest.raises(SchemaError, match=r"\$ref"):
            Agent(chat_generator=ToolOnlyModel([]), output_type=schema)


def test_a_wrapped_schema_keeps_its_definitions_at_the_root() -> None:
    schema = {"type": "array", "items": {"$ref": "#/$defs/N"}, "$defs": {"N": {"type": "integer"}}}
    model = ToolOnlyModel([calls(call(FINAL_ANSWER_TOOL, "f1", answer=[1, 2]))])
    assert Agent(chat_generator=model, output_type=schema).run(USER)["output"] == [1, 2]


# -- async, streaming, snapshots ---------------------------------------------------------------------


async def test_run_async_takes_the_same_edges() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["{}", PARIS]), output_type=City)
    result = await agent.run_async(USER)
    assert result["output"].name == "Paris" and "output_retry" in triggers(result)
    with pytest.raises(OutputValidationError):
        await Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type=City, output_retries=0).run_async(USER)


def test_a_streamed_answer_is_checked_as_the_whole_reply() -> None:
    chunks: list[StreamingChunk] = []
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["{}", PARIS]), output_type=City, streaming_callback=chunks.append
    )
    assert agent.run(USER)["output"].population == 2100000
    assert "".join(c.content for c in chunks) == "{}" + PARIS


RESUME_PROGRAM = """
import sys
from agentfsm import Agent, AgentSnapshot
from agentfsm.errors import OutputValidationError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy
from tests.test_output import City
snapshot = AgentSnapshot.from_file(sys.argv[1])
agent = Agent(chat_generator=ScriptedChatGenerator(["{}", *sys.argv[2:]], position=snapshot.step), output_type=City)
try:
    print(agent.run(snapshot=snapshot)["output"])
except OutputValidationError as error:
    print("failed after", error.retries)
"""


def test_a_run_paused_mid_retry_resumes_in_another_process_with_its_retry_count(tmp_path: Path) -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type=City)
    with pytest.raises(BreakpointException) as paused:
        agent.run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=1))
    snapshot = paused.value.snapshot
    assert snapshot.messages[-1]["meta"] == {RETRY_META_KEY: 1}
    path = snapshot.to_file(tmp_path / "paused.json")

    def resume(answer: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", RESUME_PROGRAM, str(path), answer],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert resume(PARIS) == "name='Paris' population=2100000"
    assert resume("{}") == "failed after 1", "the retry made before the pause counts: none is left"


def test_a_durable_store_records_the_retry_and_the_finished_run(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    agent = Agent(chat_generator=ScriptedChatGenerator(["{}", PARIS]), output_type=City, snapshot_store=store)
    result = agent.run(USER)
    run = store.runs()[0]
    assert run.status == "done" and result["output"].name == "Paris"
    history = [s.phase for s in store.history(run.run_id)]
    assert history.count(Phase.LLM_CALL) == 2, "the retry's way back to the model is recorded"


# -- configuration and serialization -----------------------------------------------------------------


def test_output_types_round_trip_through_to_dict_and_the_allow_list() -> None:
    for output_type in (City, Point, NUMBERS):
        agent = Agent(chat_generator=ScriptedChatGenerator([]), output_type=output_type, output_retries=3)
        data = agent.to_dict()
        again = Agent.from_dict(data, allowed_modules=["tests"])
        assert (again.output_type, again.output_retries, again.fingerprint) == (output_type, 3, agent.fingerprint)
    with pytest.raises(DeserializationError, match=r"tests\.test_output"):
        Agent.from_dict(Agent(chat_generator=ScriptedChatGenerator([]), output_type=City).to_dict())
    data = Agent(chat_generator=ScriptedChatGenerator([]), output_type=City).to_dict()
    data["init_parameters"]["output_type"] = "tests.test_output.ToolOnlyModel"
    with pytest.raises(DeserializationError, match="not a pydantic model or a dataclass"):
        Agent.from_dict(data, allowed_modules=["tests"])
    assert "output_type" not in Agent(chat_generator=ScriptedChatGenerator([])).to_dict()["init_parameters"]


def test_bad_output_configuration_is_refused() -> None:
    model = ScriptedChatGenerator([])
    with pytest.raises(ConfigurationTypeError, match="output_type must be"):
        Agent(chat_generator=model, output_type=int)
    with pytest.raises(SchemaError, match="not a valid JSON schema"):
        Agent(chat_generator=model, output_type={"type": "nonsense"})
    with pytest.raises(ConfigurationError, match="output_retries"):
        Agent(chat_generator=model, output_type=City, output_retries=-1)
    from agentfsm import tool

    @tool
    def final_answer(text: str) -> str:
        """A tool of the user's with the reserved name."""
        return text

    with pytest.raises(ConfigurationError, match="rename the tool"):
        Agent(chat_generator=model, tools=[final_answer], output_type=City)


def test_a_snapshot_of_another_output_type_is_told_apart() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type=City)
    with pytest.raises(BreakpointException) as paused:
        agent.run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=1))
    snapshot: AgentSnapshot = paused.value.snapshot
    other = Agent(chat_generator=ScriptedChatGenerator([]), output_type=Point)
    assert snapshot.agent_fingerprint != other.fingerprint


@pytest.mark.parametrize("output_type", [City, {"type": "object", "properties": {"name": {"type": "string"}}}])
def test_a_huge_wrong_answer_is_not_sent_back_whole(output_type: Any) -> None:
    # 2 MB where a name belongs, and a thousand extra wrong fields: the model reads what is wrong, briefly.
    wrong = '{"name": ' + str(list(range(300_000))) + ', "more": [' + ",".join(['"x"'] * 1000) + "]}"
    many = "[" + ",".join(['{"name": 1}'] * 1000) + "]"
    script = [wrong, many, '{"name": "Paris", "population": 2100000}']
    result = Agent(chat_generator=ScriptedChatGenerator(script), output_type=output_type, output_retries=2).run(USER)
    assert result["output"] is not None
    retries = [m for m in result["messages"] if RETRY_META_KEY in m.meta]
    assert len(retries) == 2 and all(len(m.text or "") < 5000 for m in retries), [len(m.text or "") for m in retries]
