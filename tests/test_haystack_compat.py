"""A Haystack user's agent code, written to Haystack's documented signatures, runs unchanged.

Every class and callable here is user code as a Haystack user writes it: the signatures of
Haystack's documented protocols and nothing of agentfsm's own extensions (no ``tool_schema``, no ``hook_context``,
no ``**kwargs`` where Haystack's has none). Only the imports differ from Haystack's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest
from pydantic import BaseModel, Field

from agentfsm import (
    Agent,
    AgentBreakpoint,
    AgentSnapshot,
    Breakpoint,
    BreakpointException,
    ChatMessage,
    ChatRole,
    ComponentTool,
    PipelineTool,
    State,
    StreamingChunk,
    TextContent,
    Tool,
    ToolBreakpoint,
    ToolCall,
    ToolInvoker,
    Toolset,
    create_tool_from_function,
    hook,
    replace_values,
)
from agentfsm.errors import AgentFSMError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import (
    BlockingConfirmationStrategy,
    ConfirmationPolicy,
    ConfirmationStrategy,
    ConfirmationUI,
    ConfirmationUIResult,
    HITLBreakpointException,
    ToolExecutionDecision,
    get_tool_calls_and_descriptions_from_snapshot,
)
from agentfsm.machine import Phase
from agentfsm.serialization import object_path
from agentfsm.testing import assert_resume_equivalent


def reply_calling(tool_name: str, /, **arguments: Any) -> ChatMessage:
    return ChatMessage.from_assistant(tool_calls=[ToolCall(tool_name, arguments)])


def add_numbers(a: int, b: int) -> int:
    return a + b


ADD = Tool(
    name="add",
    description="Add two numbers",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
    function=add_numbers,
)


def tool_results(result: dict[str, Any]) -> list[str]:
    return [str(m.tool_call_result.result) for m in result["messages"] if m.tool_call_result is not None]


# -- human in the loop ------------------------------------------------------------------------------


class RecordingUI(ConfirmationUI):
    """A Haystack-shaped UI: doubles ``a`` the first time, confirms afterwards."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, dict[str, Any]]] = []

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        self.asked.append((tool_name, tool_description, tool_params))
        if len(self.asked) == 1:
            return ConfirmationUIResult(action="modify", new_tool_params={**tool_params, "a": tool_params["a"] * 2})
        return ConfirmationUIResult(action="confirm")


class AskForBigNumbers(ConfirmationPolicy):
    """A Haystack-shaped policy: ask when a number is 10 or more; learns what was confirmed."""

    def __init__(self) -> None:
        self.learned: list[str] = []

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        return any(v >= 10 for v in tool_params.values())

    def update_after_confirmation(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        confirmation_result: ConfirmationUIResult,
    ) -> None:
        self.learned.append(confirmation_result.action)


class DuckTypedPolicy:
    """A policy that does not derive from ConfirmationPolicy: only ``should_ask``."""

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        return True


@pytest.mark.parametrize("use_async", [False, True])
def test_a_haystack_shaped_ui_and_policy_decide_the_calls(use_async: bool) -> None:
    ui, policy = RecordingUI(), AskForBigNumbers()
    script = [reply_calling("add", a=10, b=1), reply_calling("add", a=1, b=2), reply_calling("add", a=30, b=1), "ok"]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[ADD],
        confirmation_strategies={"add": BlockingConfirmationStrategy(policy, ui)},
    )
    messages = [ChatMessage.from_user("add")]
    result = asyncio.run(agent.run_async(messages)) if use_async else agent.run(messages)
    assert ui.asked == [("add", "Add two numbers", {"a": 10, "b": 1}), ("add", "Add two numbers", {"a": 30, "b": 1})]
    assert policy.learned == ["modify", "confirm"]
    assert tool_results(result) == ["21", "3", "31"]


def test_a_policy_without_update_after_confirmation_works() -> None:
    ui = RecordingUI()
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply_calling("add", a=1, b=2), "ok"]),
        tools=[ADD],
        confirmation_strategies={"add": BlockingConfirmationStrategy(DuckTypedPolicy(), ui)},  # type: ignore[arg-type]
    )
    assert tool_results(agent.run([ChatMessage.from_user("add")])) == ["4"]


class OnlyEvenStrategy(ConfirmationStrategy):
    """A Haystack-shaped strategy: runs calls whose ``a`` is even, rejects the others."""

    def __init__(self) -> None:
        self.ids: list[str | None] = []

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
    ) -> ToolExecutionDecision:
        self.ids.append(tool_call_id)
        even = tool_params["a"] % 2 == 0
        return ToolExecutionDecision(
            tool_name=tool_name,
            execute=even,
            tool_call_id=tool_call_id,
            feedback=None if even else "odd numbers are not allowed",
            final_tool_params=tool_params if even else None,
        )


class AsyncOnlyEvenStrategy(OnlyEvenStrategy):
    async def run_async(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
    ) -> ToolExecutionDecision:
        self.ids.append("async")
        return self.run(tool_name, tool_description, tool_params, tool_call_id)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_haystack_shaped_strategy_decides_with_run_or_run_async(use_async: bool) -> None:
    strategy = AsyncOnlyEvenStrategy()
    script = [ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": 2, "b": 1}, id="c1")]), "done"]
    script.insert(1, ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": 3, "b": 1}, id="c2")]))
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[ADD], confirmation_strategies={"add": strategy})
    messages = [ChatMessage.from_user("add")]
    result = asyncio.run(agent.run_async(messages)) if use_async else agent.run(messages)
    results = tool_results(result)
    assert results[0] == "3"
    assert "rejected" in results[1] and "odd numbers are not allowed" in results[1]
    assert strategy.ids == (["async", "c1", "async", "c2"] if use_async else ["c1", "c2"])


class ContextStrategy:
    """Haystack's keyword-only strategy signature, with the request-scoped context."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def run(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        self.seen.append(confirmation_strategy_context)
        return ToolExecutionDecision(tool_name=tool_name, execute=True, final_tool_params=tool_params)


def test_the_confirmation_strategy_context_reaches_the_strategies_that_take_it() -> None:
    strategy = ContextStrategy()
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply_calling("add", a=1, b=1), "ok", reply_calling("add", a=1, b=1)]),
        tools=[ADD],
        confirmation_strategies={"add": strategy},
    )
    queue = object()
    agent.run([ChatMessage.from_user("add")], confirmation_strategy_context={"queue": queue})
    assert strategy.seen == [{"queue": queue}]
    with pytest.raises(ValueError, match="two names"):
        agent.run([ChatMessage.from_user("add")], hook_context={}, confirmation_strategy_context={})


class AskLaterStrategy(ConfirmationStrategy):
    """A Haystack-shaped strategy that cannot decide now: it raises HITLBreakpointException."""

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
    ) -> ToolExecutionDecision:
        raise HITLBreakpointException("a person decides later", tool_name, "", tool_call_id)


def test_a_strategy_raising_hitl_breakpoint_exception_pauses_the_run_until_decided() -> None:
    script = [reply_calling("add", a=2, b=3), "five"]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script), tools=[ADD], confirmation_strategies={"add": AskLaterStrategy()}
    )
    with pytest.raises(HITLBreakpointException) as paused:
        agent.run([ChatMessage.from_user("add")])
    calls, descriptions = get_tool_calls_and_descriptions_from_snapshot(paused.value.snapshot)
    assert [(c["tool_name"], c["arguments"]) for c in calls] == [("add", {"a": 2, "b": 3})]
    assert descriptions == {"add": "Add two numbers"}
    decision = ToolExecutionDecision(
        tool_name="add", execute=True, tool_call_id=calls[0]["id"], final_tool_params={"a": 2, "b": 3}
    )
    result = agent.run([ChatMessage.from_user("add")], snapshot=paused.value.snapshot, decisions=[decision])
    assert tool_results(result) == ["5"] and result["last_message"].text == "five"


# -- chat generators --------------------------------------------------------------------------------


class MinimalGenerator:
    """A generator with Haystack's documented minimum: ``run(messages, tools=None)``, no streaming callback.

    It keeps what it was given, as a recorder or a cache does.
    """

    def __init__(self, replies: list[ChatMessage]) -> None:
        self.replies = replies
        self.seen: list[list[ChatMessage]] = []

    def run(self, messages: list[ChatMessage], tools: list[Tool] | None = None) -> dict[str, Any]:
        self.seen.append(messages)
        return {"replies": [self.replies[len(self.seen) - 1]]}


class MinimalAsyncGenerator(MinimalGenerator):
    async def run_async(self, messages: list[ChatMessage], tools: list[Tool] | None = None) -> dict[str, Any]:
        return self.run(messages, tools)


@pytest.mark.parametrize("generator_class", [MinimalGenerator, MinimalAsyncGenerator])
@pytest.mark.parametrize("use_async", [False, True])
def test_a_generator_without_streaming_callback_runs_and_keeps_what_it_was_given(
    generator_class: type[MinimalGenerator], use_async: bool
) -> None:
    generator = generator_class([reply_calling("add", a=1, b=2), ChatMessage.from_assistant("3")])
    agent = Agent(chat_generator=generator, tools=[ADD])
    messages = [ChatMessage.from_user("add 1 and 2")]
    result = asyncio.run(agent.run_async(messages)) if use_async else agent.run(messages)
    assert result["last_message"].text == "3"
    first, second = generator.seen
    assert first == messages, "later messages never appear in what the generator kept"
    assert len(second) == 3


class MockChatGenerator:
    """Haystack's test double: ``run`` and ``run_async``, each replaced by a mock in the test."""

    def run(
        self, messages: list[ChatMessage], tools: list[Tool] | Toolset | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("Hello")]}

    async def run_async(
        self, messages: list[ChatMessage], tools: list[Tool] | Toolset | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("Hello from run_async")]}


class MockChatGeneratorWithoutRunAsync:
    def run(
        self, messages: list[ChatMessage], tools: list[Tool] | Toolset | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("Hello")]}


@pytest.mark.parametrize(
    ("generator_class", "use_async", "mocked"),
    [
        (MockChatGenerator, False, "run"),
        (MockChatGenerator, True, "run_async"),
        (MockChatGeneratorWithoutRunAsync, False, "run"),
        (MockChatGeneratorWithoutRunAsync, True, "run"),
    ],
)
def test_a_mocked_generator_was_called_with_the_messages_the_user_expects(
    generator_class: type[Any], use_async: bool, mocked: str
) -> None:
    generator = generator_class()
    agent = Agent(chat_generator=generator, tools=[ADD])
    reply = {"replies": [ChatMessage.from_assistant("Hello")]}
    mock = AsyncMock(return_value=reply) if mocked == "run_async" else MagicMock(return_value=reply)
    setattr(generator, mocked, mock)
    messages = [ChatMessage.from_user("Hello")]
    result = asyncio.run(agent.run_async(messages)) if use_async else agent.run(messages)
    expected_messages = [ChatMessage(_role=ChatRole.USER, _content=[TextContent(text="Hello")], _name=None, _meta={})]
    mock.assert_called_once_with(messages=expected_messages, tools=[ADD])
    assert result["messages"][0] == expected_messages[0]
    assert result["messages"][-1] == result["last_message"] == ChatMessage.from_assistant("Hello")


class StreamingGenerator:
    """A generator that takes the callback: it is given the one the run streams to."""

    def run(
        self,
        messages: list[ChatMessage],
        tools: list[Tool] | None = None,
        streaming_callback: Any = None,
    ) -> dict[str, Any]:
        if streaming_callback is not None:
            streaming_callback(StreamingChunk(content="hi"))
        return {"replies": [ChatMessage.from_assistant("hi")]}


def test_a_streaming_callback_reaches_a_generator_that_takes_it() -> None:
    chunks: list[StreamingChunk] = []
    Agent(chat_generator=StreamingGenerator()).run([ChatMessage.from_user("hello")], chunks.append)
    assert [c.content for c in chunks] == ["hi"]


# -- state ------------------------------------------------------------------------------------------


@hook
def record_llm(state: State) -> None:
    state.set("trace", [f"llm@{state.get('step_count')}"])


def test_state_keys_haystack_leaves_to_the_user_are_the_users() -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply_calling("add", a=1, b=2), "three"]),
        tools=[ADD],
        state_schema={"trace": {"type": list[str]}, "last_message": {"type": str}, "exit_reason": {"type": str}},
        hooks={"before_llm": [record_llm]},
    )
    result = agent.run([ChatMessage.from_user("add")], last_message="mine", exit_reason="unset")
    assert result["trace"] == ["llm@0", "llm@1"]
    assert (result["last_message"], result["exit_reason"]) == ("mine", "unset")
    assert result.exit_reason == "text"
    assert result.last_message.text == "three"
    assert result.trace[-1].trigger == "exit"


def test_a_users_trace_key_resumes_anywhere_to_the_same_result() -> None:
    def agent() -> Agent:
        return Agent(
            chat_generator=ScriptedChatGenerator([reply_calling("add", a=1, b=2), "three"]),
            tools=[ADD],
            state_schema={"trace": {"type": list[str]}},
            hooks={"before_llm": [record_llm]},
        )

    assert_resume_equivalent(agent, [ChatMessage.from_user("add")], allowed_modules=["tests"])


@pytest.mark.parametrize("use_async", [False, True])
def test_a_users_key_without_a_value_is_absent_not_agentfsms(use_async: bool) -> None:
    """Haystack's result holds the State's data: a declared key the run never set is not in it."""
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["hi"]),
        state_schema={"trace": {"type": list[str]}, "exit_reason": {"type": str}, "last_message": {"type": str}},
    )
    messages = [ChatMessage.from_user("hello")]
    result = asyncio.run(agent.run_async(messages)) if use_async else agent.run(messages)
    assert not {"trace", "exit_reason", "last_message"} & result.keys()
    assert {"trace", "exit_reason", "last_message", "messages", "step_count"} <= agent.state_keys
    assert result.exit_reason == "text" and result.last_message == ChatMessage.from_assistant("hi")
    assert result.trace[-1].trigger == "exit"
    copied = pickle.loads(pickle.dumps(result))
    assert copied == result and not {"trace", "exit_reason", "last_message"} & copied.keys()
    assert copied.trace == result.trace


def test_without_those_keys_the_result_carries_agentfsms_values() -> None:
    result = Agent(chat_generator=ScriptedChatGenerator(["hi"])).run([ChatMessage.from_user("hello")])
    assert result["last_message"].text == "hi"
    assert result["exit_reason"] == "text"
    assert result["trace"] == result.trace


@pytest.mark.parametrize("key", ["continue_run", "stop_run", "step_count", "tool_call_counts"])
def test_flow_control_keys_stay_reserved(key: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        Agent(chat_generator=ScriptedChatGenerator([]), state_schema={key: {"type": int}})


def keep_longest(current: Any, new: Any) -> Any:
    """A Haystack-shaped State handler: (current, new) -> merged."""
    return new if current is None or len(new) > len(current) else current


def test_state_handlers_from_the_schema_outputs_to_state_and_handler_override() -> None:
    state = State(schema={"name": {"type": str, "handler": keep_longest}, "docs": {"type": list[str]}})
    state.set("name", "ann")
    state.set("name", "al")
    state.set("docs", ["a"])
    state.set("docs", ["b"])
    state.set("docs", ["c"], handler_override=replace_values)
    assert (state.get("name"), state.get("docs"), state.has("docs"), state.has("other")) == ("ann", ["c"], True, False)

    def lookup(name: str) -> dict[str, Any]:
        return {"name": name.upper(), "length": len(name)}

    finder = create_tool_from_function(lookup, outputs_to_state={"name": {"source": "name", "handler": keep_longest}})
    agent = Agent(
        chat_generator=ScriptedChatGenerator(
            [reply_calling("lookup", name="bob"), reply_calling("lookup", name="x"), "ok"]
        ),
        tools=[finder],
        state_schema={"name": {"type": str}},
    )
    assert agent.run([ChatMessage.from_user("look")])["name"] == "BOB"


# -- components and pipelines -----------------------------------------------------------------------


@dataclass
class Document:
    content: str
    meta: dict[str, Any] = field(default_factory=dict)


class Filters(BaseModel):
    language: str
    top_k: int = 3


class DocumentRanker:
    """Rank documents for a query."""

    def __init__(self) -> None:
        self.warm_ups = 0
        self.received: list[Any] = []

    def warm_up(self) -> None:
        self.warm_ups += 1

    def run(
        self, query: str, documents: list[Document], filters: Filters, best: Document | None = None
    ) -> dict[str, Any]:
        """Rank the documents.

        :param query: What the user asked.
        :param documents: The documents to rank,
            best first.
        :param filters: Which documents to keep.
        :param best: A document known to be the best.
        """
        self.received.append((documents, filters, best))
        kept = [d for d in documents if d.meta.get("language") == filters.language][: filters.top_k]
        return {"documents": [d.content for d in kept]}


class GoogleStyleSummarizer:
    """Summarize a text."""

    def run(self, text: str, max_words: int = 10) -> dict[str, Any]:
        """Summarize.

        Args:
            text (str): The text to summarize.
            max_words: How many words to keep
                at most.

        Returns:
            The summary.
        """
        return {"summary": " ".join(text.split()[:max_words])}


def test_component_arguments_become_dataclasses_and_models_and_run_is_warmed_once() -> None:
    ranker = DocumentRanker()
    tool = ComponentTool(component=ranker)
    docs = [{"content": "hallo", "meta": {"language": "de"}}, {"content": "hello", "meta": {"language": "en"}}]
    arguments = {"query": "greeting", "documents": docs, "filters": {"language": "en"}, "best": docs[1]}
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply_calling("document_ranker", **arguments), "ok"] * 2),
        tools=[tool],
    )
    for _ in range(2):
        result = agent.run([ChatMessage.from_user("rank")])
        assert tool_results(result) == ['{"documents":["hello"]}']
    documents, filters, best = ranker.received[0]
    assert documents == [Document("hallo", {"language": "de"}), Document("hello", {"language": "en"})]
    assert filters == Filters(language="en") and best == Document("hello", {"language": "en"})
    assert ranker.warm_ups == 1
    tool.warm_up()
    assert ranker.warm_ups == 1


def test_component_parameters_are_described_by_the_run_docstring() -> None:
    properties = ComponentTool(component=DocumentRanker()).parameters["properties"]
    assert properties["query"]["description"] == "What the user asked."
    assert properties["documents"]["description"] == "The documents to rank, best first."
    assert properties["filters"]["description"] == "Which documents to keep."
    google = ComponentTool(component=GoogleStyleSummarizer())
    assert google.description == "Summarize a text."
    assert google.parameters["properties"]["text"]["description"] == "The text to summarize."
    assert google.parameters["properties"]["max_words"]["description"] == "How many words to keep at most."


@dataclass
class Customer:
    """A customer of the shop.

    :param name: The customer's full name.
    :param email: Where to send the receipt.
    """

    name: str
    email: str | None = None


@dataclass
class LineItem:
    """One line of an order."""

    sku: str
    quantity: int = 1


@dataclass
class Order:
    """An order.

    :param customer: Who ordered.
    """

    customer: Customer
    items: list[LineItem] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)


class OrderPlacer:
    """Place orders in the shop."""

    def __init__(self) -> None:
        self.placed: list[tuple[Order, list[LineItem] | None]] = []

    def run(self, order: Order, gifts: list[LineItem] | None = None, priority: int = 0) -> dict[str, Any]:
        """Place an order and return its number.

        The schema's description is this docstring's first line only.

        :param order: The order to place.
        :param gifts: Items added for free.
        """
        self.placed.append((order, gifts))
        return {"number": len(self.placed)}


class PostalAddress(BaseModel):
    """A postal address."""

    street: str = Field(description="Street and number.")
    city: str


class Recipient(BaseModel):
    """Who receives a parcel."""

    name: str = Field(description="The recipient's name.")
    address: PostalAddress
    phones: list[str] = []


class ParcelSender:
    """Send parcels."""

    def run(self, recipients: list[Recipient], express: bool = False) -> dict[str, Any]:
        """
        Send a parcel to each recipient.

        :param recipients: Who gets a parcel.
        """
        return {"sent": [r.address.city for r in recipients]}


class WordCounter:
    def run(self, text: str, ignore: list[str] | None = None) -> dict[str, Any]:
        return {"count": len([w for w in text.split() if w not in (ignore or [])])}


SCHEMAS = Path(__file__).parent / "fixtures" / "component_schemas"


@pytest.mark.parametrize("component", [OrderPlacer(), ParcelSender(), WordCounter()], ids=lambda c: type(c).__name__)
def test_component_tool_schemas_are_the_ones_haystack_generates(component: Any) -> None:
    tool = ComponentTool(component=component)
    expected = json.loads((SCHEMAS / f"{tool.name}.json").read_text())
    assert {"name": tool.name, "description": tool.description, "parameters": tool.parameters} == expected


def test_arguments_fitting_the_described_schema_reach_run_as_dataclasses_and_models() -> None:
    placer, sender = OrderPlacer(), ParcelSender()
    order = {"customer": {"name": "Ada"}, "items": [{"sku": "pen", "quantity": 2}], "notes": {"door": "back"}}
    address = {"street": "Main St 1", "city": "Turin"}
    agent = Agent(
        chat_generator=ScriptedChatGenerator(
            [
                ChatMessage.from_assistant(
                    tool_calls=[
                        ToolCall("order_placer", {"order": order, "gifts": [{"sku": "card"}]}),
                        ToolCall("parcel_sender", {"recipients": [{"name": "Ada", "address": address}]}),
                    ]
                ),
                "done",
            ]
        ),
        tools=[ComponentTool(component=placer), ComponentTool(component=sender)],
    )
    assert tool_results(agent.run([ChatMessage.from_user("order and send")])) == ['{"number":1}', '{"sent":["Turin"]}']
    assert placer.placed == [
        (Order(Customer("Ada"), [LineItem("pen", 2)], {"door": "back"}), [LineItem("card")]),
    ]


class UppercasePipeline:
    """A pipeline-shaped object: ``run(data) -> {component: {output: value}}``."""

    def __init__(self) -> None:
        self.warm_ups = 0

    def warm_up(self) -> None:
        self.warm_ups += 1

    def run(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"upper": {"text": data["upper"]["text"].upper()}, "counter": {"n": len(data["counter"]["text"])}}


def test_a_pipeline_tool_maps_arguments_in_and_outputs_out() -> None:
    pipeline = UppercasePipeline()
    tool = PipelineTool(
        pipeline=pipeline,
        input_mapping={"text": ["upper.text", "counter.text"]},
        output_mapping={"upper.text": "shout"},
        parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        name="shout",
        description="Shout the text",
    )
    agent = Agent(chat_generator=ScriptedChatGenerator([reply_calling("shout", text="hey"), "ok"] * 2), tools=[tool])
    agent.run([ChatMessage.from_user("shout")])
    assert tool_results(agent.run([ChatMessage.from_user("shout")])) == ['{"shout":"HEY"}']
    assert pipeline.warm_ups == 1
    with pytest.raises(ValueError, match="not a parameter"):
        PipelineTool(pipeline=pipeline, name="p", description="", input_mapping={"text": ["upper.text"]},
                     parameters={"type": "object"}, inputs_from_state={"k": "other"})  # fmt: skip


class Shouter:
    """A component of the pipeline below."""

    def run(self, text: str) -> dict[str, Any]:
        """Shout.

        :param text: The text to shout.
        """
        return {"text": text.upper()}


class DescribedPipeline:
    """A pipeline that describes itself as Haystack's do: inputs(), outputs(), get_component()."""

    def __init__(self) -> None:
        self.components = {"shouter": Shouter()}

    def inputs(self) -> dict[str, dict[str, Any]]:
        return {"shouter": {"text": {"type": str, "is_mandatory": True}}}

    def outputs(self) -> dict[str, dict[str, Any]]:
        return {"shouter": {"text": {"type": str}}}

    def get_component(self, name: str) -> Any:
        return self.components[name]

    def run(self, data: dict[str, Any]) -> dict[str, Any]:
        return {name: self.components[name].run(**inputs) for name, inputs in data.items()}


def test_a_pipeline_tool_describes_its_inputs_from_the_components_docstrings() -> None:
    tool = PipelineTool(pipeline=DescribedPipeline(), name="shout", description="Shout the text")
    assert tool.parameters["properties"]["text"] == {"type": "string", "description": "The text to shout."}
    agent = Agent(chat_generator=ScriptedChatGenerator([reply_calling("shout", text="hey"), "ok"]), tools=[tool])
    assert tool_results(agent.run([ChatMessage.from_user("shout")])) == ['{"text":"HEY"}']


# -- tools and toolsets -----------------------------------------------------------------------------


class CalculatorToolset(Toolset):
    """Haystack's documented dynamic-loading toolset: tools built in ``__init__``, a shared resource warmed once."""

    def __init__(self) -> None:
        tools = self._create_tools()
        super().__init__(tools)
        self.connections = 0

    def _create_tools(self) -> list[Tool]:
        schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}  # fmt: skip
        return [
            Tool(name="add", description="Add two numbers", parameters=schema, function=lambda a, b: a + b),
            Tool(name="multiply", description="Multiply two numbers", parameters=schema, function=lambda a, b: a * b),
        ]

    def warm_up(self) -> None:
        self.connections += 1

    def to_dict(self) -> dict[str, Any]:
        return {"type": object_path(type(self)), "data": {}}  # the tools are rebuilt, not stored

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CalculatorToolset:
        return cls()


def test_a_toolset_subclass_from_haystacks_docs_runs() -> None:
    toolset = CalculatorToolset()
    agent = Agent(chat_generator=ScriptedChatGenerator([reply_calling("multiply", a=6, b=7), "42"]), tools=toolset)
    assert tool_results(agent.run([ChatMessage.from_user("6*7")])) == ["42"]
    assert toolset.connections == 1
    assert len(toolset) == 2 and "add" in toolset and toolset[1].name == "multiply"


def test_a_toolset_that_serializes_its_descriptor_round_trips_with_the_agent(allow_tests_modules: None) -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply_calling("add", a=2, b=2), "4"]), tools=CalculatorToolset()
    )
    rebuilt = Agent.from_dict(agent.to_dict())
    assert isinstance(rebuilt.tools, CalculatorToolset)
    assert tool_results(rebuilt.run([ChatMessage.from_user("2+2")])) == ["4"]


def format_documents(docs: list[str]) -> str:
    return ", ".join(docs)


@pytest.mark.parametrize(
    "config",
    [
        {"outputs_to_state": {"docs": {"source": 1}}},
        {"outputs_to_state": {"docs": {"handler": "not callable"}}},
        {"outputs_to_state": {"docs": "docs"}},
        {"outputs_to_string": {"source": ["docs"]}},
        {"outputs_to_string": {"handler": 3}},
        {"outputs_to_string": {"source": "docs", "raw_result": "yes"}},
        {"outputs_to_string": {"formatted": {"source": "docs", "handler": format_documents, "raw_result": True}}},
    ],
)
def test_wrongly_shaped_tool_configurations_raise_value_error(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as refused:
        Tool(name="t", description="", parameters={"type": "object"}, function=add_numbers, **config)
    assert isinstance(refused.value, AgentFSMError) and isinstance(refused.value, TypeError)


def test_inputs_from_state_must_name_a_parameter_of_the_function() -> None:
    def search(query: str, repo: str) -> str:
        return f"{repo}: {query}"

    with pytest.raises(ValueError, match=r"'repository' to 'repo_name'.*\['query', 'repo'\]"):
        create_tool_from_function(search, inputs_from_state={"repository": "repo_name"})
    with pytest.raises(ValueError, match="not a parameter"):
        ComponentTool(component=GoogleStyleSummarizer(), inputs_from_state={"document": "body"})
    tool = create_tool_from_function(search, inputs_from_state={"repository": "repo"})
    assert list(tool.parameters["properties"]) == ["query"]


# -- configuration errors as Haystack words them -------------------------------------------------------


WEATHER_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def get_weather_report(city: str) -> str:
    return f"Weather report for {city}: 20°C, sunny"


async def get_weather_report_async(city: str) -> str:
    return get_weather_report(city)


def weather_tool(**config: Any) -> Tool:
    arguments = {"name": "weather", "description": "Get weather report", "parameters": WEATHER_PARAMETERS}
    return Tool(**{**arguments, "function": get_weather_report, **config})


class MockChatGeneratorWithoutTools:
    def run(self, messages: list[ChatMessage]) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("Hello")]}


def run_with_tools(agent_tools: list[Tool], tools: Any) -> Any:
    return Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=agent_tools).run(
        [ChatMessage.from_user("Hello")], tools=tools
    )


def untyped(city):  # type: ignore[no-untyped-def]
    return city


CONFIGURATION_ERRORS: list[tuple[str, Any, type[Exception], str]] = [
    (
        "inputs_from_state names an unknown parameter",
        lambda: weather_tool(inputs_from_state={"state_key": "nonexistent"}),
        ValueError,
        "inputs_from_state maps 'state_key' to unknown parameter 'nonexistent'. Valid parameters are: {'city'}.",
    ),
    (
        "inputs_from_state maps to a dict",
        lambda: weather_tool(inputs_from_state={"state_key": {"source": "city"}}),
        TypeError,
        "inputs_from_state values must be str, not dict. Got {'source': 'city'} for key 'state_key'.",
    ),
    (
        "a component's inputs_from_state maps to a dict",
        lambda: ComponentTool(component=GoogleStyleSummarizer(), inputs_from_state={"documents": {"source": "text"}}),
        TypeError,
        "inputs_from_state values must be str, not dict.",
    ),
    (
        "an async function",
        lambda: weather_tool(function=get_weather_report_async),
        ValueError,
        "Async functions are not supported as tools. The function 'get_weather_report_async' is a coroutine function.",
    ),
    (
        "parameters that are no JSON schema",
        lambda: weather_tool(parameters={"type": "object", "properties": {"city": {"type": "text"}}}),
        ValueError,
        "The provided parameters do not define a valid JSON schema",
    ),
    (
        "outputs_to_state given a string",
        lambda: weather_tool(outputs_to_state={"result": "report"}),
        TypeError,
        "outputs_to_state configuration for key 'result' must be a dictionary",
    ),
    (
        "outputs_to_state with a handler that is not callable",
        lambda: weather_tool(outputs_to_state={"result": {"handler": "upper"}}),
        ValueError,
        "outputs_to_state handler for key 'result' must be callable",
    ),
    (
        "outputs_to_string with a source that is not a string",
        lambda: weather_tool(outputs_to_string={"source": 1}),
        ValueError,
        "outputs_to_string source must be a string.",
    ),
    (
        "outputs_to_string with raw_result that is not a boolean",
        lambda: weather_tool(outputs_to_string={"raw_result": "yes"}),
        ValueError,
        "outputs_to_string raw_result must be a boolean.",
    ),
    (
        "outputs_to_string mixing the two formats",
        lambda: weather_tool(outputs_to_string={"source": "report", "summary": {"source": "summary"}}),
        ValueError,
        "Invalid outputs_to_string config.",
    ),
    (
        "raw_result in the multiple output format",
        lambda: weather_tool(outputs_to_string={"report": {"source": "report", "raw_result": True}}),
        ValueError,
        "Invalid outputs_to_string configuration for key 'report': 'raw_result' is not supported in the multiple "
        "output format.",
    ),
    (
        "a function without type hints",
        lambda: create_tool_from_function(untyped),
        ValueError,
        "Function 'untyped': parameter 'city' does not have a type hint.",
    ),
    (
        "tools with the same name",
        lambda: Toolset([weather_tool(), weather_tool()]),
        ValueError,
        "Duplicate tool names found: {'weather'}",
    ),
    (
        "an item of tools that is no tool",
        lambda: Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=[weather_tool(), "search"]),
        TypeError,
        "Items in the tools list must be Tool or Toolset instances.",
    ),
    (
        "invalid exit conditions",
        lambda: Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=[weather_tool()], exit_conditions=["x"]),
        ValueError,
        "Invalid exit conditions provided: ['x']. Valid exit conditions must be a subset of ['text', 'weather'].",
    ),
    (
        "a chat generator without tools",
        lambda: Agent(chat_generator=MockChatGeneratorWithoutTools(), tools=[weather_tool()]),
        TypeError,
        "MockChatGeneratorWithoutTools does not accept tools parameter in its run method.",
    ),
    (
        "run(tools=...) naming an unknown tool",
        lambda: run_with_tools([weather_tool()], ["invalid_tool_name"]),
        ValueError,
        "The following tool names are not valid: {'invalid_tool_name'}. Valid tool names are: {'weather'}.",
    ),
    (
        "run(tools=...) naming tools of an agent without any",
        lambda: run_with_tools([], ["weather"]),
        ValueError,
        "No tools were configured for the Agent at initialization.",
    ),
    (
        "run(tools=...) given one name",
        lambda: run_with_tools([weather_tool()], "weather"),
        TypeError,
        "tools must be a list of Tool and/or Toolset objects, a Toolset, or a list of tool names (strings).",
    ),
    (
        "a State type that is no type",
        lambda: State({"test": {"type": "not_a_type"}}),
        ValueError,
        "StateSchema: 'type' for key 'test' must be a Python type",
    ),
    (
        "a State entry without a type",
        lambda: State({"test": {"handler": replace_values}}),
        ValueError,
        "StateSchema: Key 'test' is missing a 'type' entry.",
    ),
    (
        "a State handler that is not callable",
        lambda: State({"test": {"type": list, "handler": "not_callable"}}),
        ValueError,
        "StateSchema: 'handler' for key 'test' must be callable or None",
    ),
    (
        "a State key outside the schema",
        lambda: State({"test": {"type": int}}).set("any_key", "value"),
        ValueError,
        "State: Key 'any_key' not found in schema.",
    ),
    (
        "an unknown hook point",
        lambda: Agent(chat_generator=ScriptedChatGenerator(["hi"]), hooks={"before_everything": [build_context]}),
        ValueError,
        "Invalid hook point 'before_everything'. Valid hook points are: ",
    ),
    (
        "a Breakpoint of the tool invoker",
        lambda: AgentBreakpoint("agent", Breakpoint(component_name="tool_invoker")),
        ValueError,
        "If the break_point is a Breakpoint, it must have the component_name 'chat_generator'.",
    ),
    (
        "a ToolBreakpoint of the chat generator",
        lambda: AgentBreakpoint("agent", ToolBreakpoint(component_name="chat_generator")),
        ValueError,
        "If the break_point is a ToolBreakpoint, it must have the component_name 'tool_invoker'.",
    ),
]


@pytest.mark.parametrize(
    ("build", "error", "opening"), [case[1:] for case in CONFIGURATION_ERRORS], ids=[c[0] for c in CONFIGURATION_ERRORS]
)
def test_configuration_errors_open_with_haystacks_words(build: Any, error: type[Exception], opening: str) -> None:
    with pytest.raises(error, match=re.escape(opening)) as refused:
        build()
    assert str(refused.value).startswith(opening), "Haystack's words first; agentfsm's hint, if any, after them"


# -- the agent's arguments and hooks ----------------------------------------------------------------


def test_resuming_ignores_the_messages_as_haystack_does() -> None:
    messages = [ChatMessage.from_user("add 1 and 2")]
    agent = Agent(chat_generator=ScriptedChatGenerator([reply_calling("add", a=1, b=2), "3"]), tools=[ADD])
    with pytest.raises(BreakpointException) as paused:
        agent.run(messages, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    snapshot = paused.value.snapshot
    assert isinstance(snapshot, AgentSnapshot)
    result = agent.run(messages=messages, snapshot=snapshot)
    assert [m.text for m in result["messages"] if m.text] == ["add 1 and 2", "3"]
    assert tool_results(result) == ["3"]


def streaming_add(a: int, b: int, streaming_callback: Any = None) -> int:
    if streaming_callback is not None:
        streaming_callback(StreamingChunk(content=f"adding in {threading.current_thread().name}"))
    return a + b


def test_haystacks_tool_invoker_kwargs_are_honoured() -> None:
    tool = create_tool_from_function(streaming_add)
    script = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("streaming_add", {"a": 1, "b": i}) for i in range(3)]),
        "ok",
    ]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[tool],
        tool_invoker_kwargs={"max_workers": 1, "enable_streaming_callback_passthrough": True},
    )
    assert agent.tool_concurrency == 1
    chunks: list[StreamingChunk] = []
    agent.run([ChatMessage.from_user("add")], chunks.append)
    from_tools = [c.content for c in chunks if c.content.startswith("adding")]
    assert from_tools == [f"adding in {threading.current_thread().name}"] * 3, "one worker: in the calling thread"


def describe(city: str) -> dict[str, Any]:
    return {"city": city, "sunny": True}


@pytest.mark.parametrize(("convert", "text"), [(False, "{'city': 'Rome', 'sunny': True}"), (True, '{"city":"Rome","sunny":true}')])  # fmt: skip
def test_convert_result_to_json_string_chooses_the_tool_result_string(convert: bool, text: str) -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply_calling("describe", city="Rome"), "ok"]),
        tools=[create_tool_from_function(describe)],
        tool_invoker_kwargs={"convert_result_to_json_string": convert},
    )
    assert tool_results(agent.run([ChatMessage.from_user("Rome?")])) == [text]


class AuditHook:
    """A Haystack-shaped class hook: ``warm_up``, ``run(state)``, ``run_async(state)``, ``close``."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def warm_up(self) -> None:
        self.events.append("warm_up")

    def run(self, state: State) -> None:
        pending = state.data["messages"][-1].tool_calls
        self.events.append(f"run {[tc.tool_name for tc in pending]}")

    async def run_async(self, state: State) -> None:
        self.events.append("async " + str([tc.tool_name for tc in state.data["messages"][-1].tool_calls]))

    def close(self) -> None:
        self.events.append("close")


@hook
def build_context(state: State) -> None:
    if state.get("step_count") == 0:
        system = ChatMessage.from_system("You are a calculator.")
        state.set("messages", [system, *state.data["messages"]], handler_override=replace_values)


@hook
def require_add(state: State) -> None:
    if state.get("tool_call_counts", {}).get("add", 0) == 0:
        state.set("messages", [ChatMessage.from_system("Use the add tool before answering.")])


@pytest.mark.parametrize("use_async", [False, True])
def test_haystack_shaped_hooks_run_at_their_points(use_async: bool) -> None:
    audit = AuditHook()
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["I think 3", reply_calling("add", a=1, b=2), "3"]),
        tools=[ADD],
        hooks={"before_llm": [build_context], "before_tool": [audit], "on_exit": [require_add]},
    )
    messages = [ChatMessage.from_user("add 1 and 2")]
    result = asyncio.run(agent.run_async(messages)) if use_async else agent.run(messages)
    agent.close()
    assert result["messages"][0].text == "You are a calculator."
    assert result["last_message"].text == "3" and result["step_count"] == 3
    assert audit.events == ["warm_up", "async ['add']" if use_async else "run ['add']", "close"]


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("max_agent_steps", [0, 2])
def test_reaching_max_agent_steps_logs_haystacks_warning(
    caplog: pytest.LogCaptureFixture, use_async: bool, max_agent_steps: int
) -> None:
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply_calling("add", a=1, b=2)] * 2),
        tools=[ADD],
        max_agent_steps=max_agent_steps,
    )
    messages = [ChatMessage.from_user("Hello")]
    with caplog.at_level(logging.WARNING):
        result = asyncio.run(agent.run_async(messages)) if use_async else agent.run(messages)
        assert "Agent reached maximum agent steps" in caplog.text
    assert result["exit_reason"] == "max_agent_steps"
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.name == "agentfsm"
    assert record.getMessage() == f"Agent reached maximum agent steps of {max_agent_steps}, stopping."
    assert caplog.messages == [f"Agent reached maximum agent steps of {max_agent_steps}, stopping."]
    assert record.msg["event"] == "max_agent_steps reached"  # type: ignore[index]  # and the structured event


# -- ToolInvoker as a component: run(messages=...) -----------------------------------------------------


def add_numbers(a: int, b: int) -> int:
    return a + b


def subtract_numbers(a: int, b: int) -> int:
    return a - b


MATH_PARAMETERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def math_toolset() -> Toolset:
    """The seed's example: a Toolset of two Tools built from plain functions."""
    add_tool = Tool(name="add", description="Add two numbers", parameters=MATH_PARAMETERS, function=add_numbers)
    subtract_tool = Tool(
        name="subtract", description="Subtract b from a", parameters=MATH_PARAMETERS, function=subtract_numbers
    )
    return Toolset([add_tool, subtract_tool])


def test_a_tool_invoker_runs_the_tool_calls_of_messages_as_a_component() -> None:
    invoker = ToolInvoker(tools=math_toolset())
    replies = [
        ChatMessage.from_assistant(
            tool_calls=[ToolCall("add", {"a": 2, "b": 3}, id="c1"), ToolCall("subtract", {"a": 9, "b": 4}, id="c2")]
        )
    ]
    result = invoker.run(messages=replies)
    assert [m.tool_call_result.result for m in result["tool_messages"]] == ["5", "5"]
    assert [m.tool_call_result.origin.id for m in result["tool_messages"]] == ["c1", "c2"]
    assert isinstance(result["state"], State)
    again = asyncio.run(invoker.run_async(messages=replies))
    assert [m.tool_call_result.result for m in again["tool_messages"]] == ["5", "5"]


def test_a_tool_invoker_reads_and_writes_the_state_it_is_given() -> None:
    def lookup(user: str) -> dict[str, Any]:
        return {"greeting": f"hello {user}"}

    tool = create_tool_from_function(
        lookup, inputs_from_state={"user_name": "user"}, outputs_to_state={"greeting": {"source": "greeting"}}
    )
    state = State({"user_name": {"type": str}, "greeting": {"type": str}}, {"user_name": "ann"})
    result = ToolInvoker(tools=[tool]).run(
        messages=[ChatMessage.from_assistant(tool_calls=[ToolCall("lookup", {})])], state=state
    )
    assert result["state"] is state and state.get("greeting") == "hello ann"


def test_a_tool_invoker_raises_on_an_unknown_tool_by_default_as_haystack_does() -> None:
    unknown = [ChatMessage.from_assistant(tool_calls=[ToolCall("nope", {}, id="c1")])]
    with pytest.raises(AgentFSMError, match="nope"):
        ToolInvoker(tools=math_toolset()).run(messages=unknown)
    answered = ToolInvoker(tools=math_toolset(), raise_on_failure=False).run(messages=unknown)
    assert answered["tool_messages"][0].tool_call_result.error
