from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest

from agentfsm import Agent, ChatMessage, ComponentTool, ConfigurationError, PipelineTool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.tools.component import snake_case
from agentfsm.tools.tool import tool_from_dict
from tests.helpers import call, calls


class DocumentSearch:
    """Search the document index."""

    def __init__(self, prefix: str = "doc") -> None:
        self.prefix = prefix
        self.warmed = False

    def warm_up(self) -> None:
        self.warmed = True

    def run(
        self,
        query: Annotated[str, "what to look for"],
        top_k: int = 2,
        mode: Literal["fast", "exact"] = "fast",
        on_progress: Any = None,
    ) -> dict[str, Any]:
        return {"documents": [f"{self.prefix}:{query}:{i}" for i in range(top_k)], "mode": mode}

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DocumentSearch:
        return cls(**data)


def test_component_tool_schema_name_and_description() -> None:
    tool = ComponentTool(DocumentSearch())
    assert tool.name == "document_search"
    assert tool.description == "Search the document index."
    assert tool.parameters["required"] == ["query"]
    assert tool.parameters["properties"]["query"] == {"type": "string", "description": "what to look for"}
    assert tool.parameters["properties"]["mode"]["enum"] == ["fast", "exact"]
    assert "on_progress" in tool.parameters["properties"], "Any is describable"
    assert tool.invoke(query="q", top_k=1) == {"documents": ["doc:q:0"], "mode": "fast"}
    tool.warm_up()
    assert tool.component.warmed


@pytest.mark.parametrize(
    ("name", "snake"),
    [("SerperDevWebSearch", "serper_dev_web_search"), ("HTMLParser", "html_parser"), ("Agent", "agent")],
)
def test_snake_case(name: str, snake: str) -> None:
    assert snake_case(name) == snake


def test_not_a_component() -> None:
    with pytest.raises(TypeError, match="is not a component"):
        ComponentTool(DocumentSearch)
    with pytest.raises(TypeError, match="is not a component"):
        ComponentTool(object())


def test_component_tool_in_an_agent_and_serialization() -> None:
    tool = ComponentTool(DocumentSearch("kb"), name="search", outputs_to_state={"docs": {"source": "documents"}})
    agent = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("search", query="fsm", top_k=2)), "found"]),
        tools=[tool],
        state_schema={"docs": {"type": list[str]}},
    )
    result = agent.run([ChatMessage.from_user("search")])
    assert result["docs"] == ["kb:fsm:0", "kb:fsm:1"]
    restored = tool_from_dict(tool.to_dict(), allowed_modules=["tests"])
    assert isinstance(restored, ComponentTool) and restored.component.prefix == "kb"
    assert restored.parameters == tool.parameters and restored.outputs_to_state == tool.outputs_to_state


def test_a_sub_agent_is_a_tool_and_its_answer_flows_into_the_parents_state() -> None:
    researcher = Agent(
        chat_generator=ScriptedChatGenerator(["Tesla worked on alternating current."]),
        system_prompt="You research.",
        state_schema={"topic": {"type": str}},
    )
    research = ComponentTool(
        researcher,
        name="research",
        description="Ask the research agent.",
        outputs_to_state={"findings": {"source": "last_message", "handler": lambda old, new: [*(old or []), new.text]}},
    )
    assert research.parameters["properties"]["messages"]["items"]["required"] == ["role", "content"]
    assert research.parameters["properties"]["topic"] == {"type": "string"}
    parent = Agent(
        chat_generator=ScriptedChatGenerator(
            [calls(call("research", messages=[{"role": "user", "content": "Who was Tesla?"}], topic="tesla")), "Done."]
        ),
        tools=[research],
        state_schema={"findings": {"type": list[str]}},
    )
    result = parent.run([ChatMessage.from_user("Tell me about Tesla")])
    assert result["findings"] == ["Tesla worked on alternating current."]
    assert result["messages"][2].tool_call_result.result == "Tesla worked on alternating current."
    seen = researcher.chat_generator.calls[0]["messages"]  # type: ignore[attr-defined]
    assert seen == [ChatMessage.from_system("You research."), ChatMessage.from_user("Who was Tesla?")]


class FakePipeline:
    """A pipeline that describes itself like Haystack's: inputs(), outputs(), run(data)."""

    def inputs(self) -> dict[str, dict[str, Any]]:
        return {
            "embedder": {"text": {"type": str, "is_mandatory": True}},
            "retriever": {"top_k": {"type": int, "is_mandatory": False}, "text": {"type": str, "is_mandatory": True}},
        }

    def outputs(self) -> dict[str, dict[str, Any]]:
        return {"retriever": {"documents": {"type": list[str]}}}

    def run(self, data: dict[str, Any]) -> dict[str, Any]:
        text = data["embedder"]["text"]
        assert data["retriever"]["text"] == text
        return {"retriever": {"documents": [f"about {text}"] * data["retriever"].get("top_k", 1)}, "debug": {"x": 1}}

    def to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FakePipeline:
        return cls()


def test_pipeline_tool_with_mappings() -> None:
    tool = PipelineTool(
        FakePipeline(),
        name="document_retriever",
        description="For any questions about Nikola Tesla, always use this tool",
        input_mapping={"query": ["embedder.text", "retriever.text"], "top_k": ["retriever.top_k"]},
        output_mapping={"retriever.documents": "documents"},
    )
    assert tool.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
        "required": ["query"],
    }
    assert tool.invoke(query="Tesla", top_k=2) == {"documents": ["about Tesla", "about Tesla"]}
    restored = tool_from_dict(tool.to_dict(), allowed_modules=["tests"])
    assert isinstance(restored, PipelineTool) and restored.invoke(query="AC") == {"documents": ["about AC"]}


def test_pipeline_tool_default_mappings() -> None:
    tool = PipelineTool(FakePipeline(), name="p", description="d")
    assert tool.input_mapping == {"text": ["embedder.text", "retriever.text"], "top_k": ["retriever.top_k"]}
    assert tool.output_mapping == {"retriever.documents": "documents"}
    assert tool.invoke(text="x") == {"documents": ["about x"]}


class PlainPipeline:
    def run(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"echo": {"value": data["echo"]["value"]}}


def test_pipeline_without_self_description_needs_mappings_and_parameters() -> None:
    with pytest.raises(ConfigurationError, match="pass input_mapping"):
        PipelineTool(PlainPipeline(), name="p", description="d")
    with pytest.raises(ConfigurationError, match="pass parameters"):
        PipelineTool(PlainPipeline(), name="p", description="d", input_mapping={"v": ["echo.value"]})
    tool = PipelineTool(
        PlainPipeline(),
        name="p",
        description="d",
        input_mapping={"v": ["echo.value"]},
        parameters={"type": "object", "properties": {"v": {"type": "string"}}},
    )
    assert tool.invoke(v="hi") == {"echo": {"value": "hi"}}, "without output_mapping the whole result is returned"
    with pytest.raises(ConfigurationError, match=r"list of .component\.input. paths"):
        PipelineTool(PlainPipeline(), name="p", description="d", input_mapping={"v": "echo.value"}, parameters={})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="is not a pipeline"):
        PipelineTool(object(), name="p", description="d")
