"""Durable runs with an output type (the retry is a model step like any other) and with a tool timeout."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS
from pydantic import BaseModel

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.durable import DurableAgent, find_run, launch
from agentfsm.errors import OutputValidationError
from agentfsm.output import RETRY_META_KEY


class Reading(BaseModel):
    """What the model must answer."""

    celsius: float


class LearningModel:
    """Answers from the conversation: ``{}`` first, a fitting answer once it was sent back (``good=False``: never)."""

    supports_response_format = True

    def __init__(self, good: bool = True) -> None:
        self.good = good

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, list[ChatMessage]]:
        assert kwargs["generation_kwargs"]["response_format"]["json_schema"]["name"] == "Reading"
        sent_back = RETRY_META_KEY in messages[-1].meta
        text = '{"celsius": 21.5}' if sent_back and self.good else "{}"
        return {"replies": [ChatMessage.from_assistant(text)]}


RELEASE = threading.Event()


@tool(timeout=0.2)
def hangs(label: str) -> str:
    """Wait until the test releases it: past its timeout."""
    RELEASE.wait(10)
    return label


class CallsOnce:
    """Calls ``hangs`` once, then answers with the tool results it read."""

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, list[ChatMessage]]:
        if messages[-1].role.value == "user":
            return {"replies": [ChatMessage.from_assistant(tool_calls=[ToolCall("hangs", {"label": "x"}, id="h1")])]}
        [result] = [m.tool_call_result for m in messages if m.tool_call_result is not None]
        return {"replies": [ChatMessage.from_assistant(f"error={result.error}")]}


learning = DurableAgent(Agent(chat_generator=LearningModel(), output_type=Reading), "output-learning")
stubborn = DurableAgent(Agent(chat_generator=LearningModel(good=False), output_type=Reading), "output-stubborn")
timed = DurableAgent(Agent(chat_generator=CallsOnce(), tools=[hangs]), "timeouts-timed")


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest")
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


def test_a_durable_run_retries_an_answer_as_a_model_step_and_returns_the_output(launched: str) -> None:
    result = learning.run([ChatMessage.from_user("temperature?")], run_id="o1")
    assert result["output"] == Reading(celsius=21.5)
    assert learning.result("o1")["output"] == Reading(celsius=21.5), "the stored record gives the same output"
    steps = [s["function_name"] for s in DBOS.list_workflow_steps("o1")]
    assert steps.count("model") == 2
    assert [r.trigger for r in result.trace].count("output_retry") == 1


def test_a_durable_run_whose_answers_never_fit_fails_with_the_problems(launched: str) -> None:
    with pytest.raises(OutputValidationError) as failed:
        stubborn.run([ChatMessage.from_user("temperature?")], run_id="o2")
    assert failed.value.problems == ["celsius: Field required"]
    assert find_run(DBOS, "o2").status == "failed"


def test_a_durable_tool_step_past_its_timeout_records_the_timeout_error_as_its_output(launched: str) -> None:
    RELEASE.clear()
    try:
        result = timed.run([ChatMessage.from_user("go")], run_id="t1")
    finally:
        RELEASE.set()
    assert result["last_message"].text == "error=True"
    [tool_step] = [s for s in DBOS.list_workflow_steps("t1") if s["function_name"] == "tool"]
    assert tool_step["output"]["error_type"] == "ToolTimeoutError", "a recovery replays the timeout, not the call"


def test_a_durable_run_without_output_type_has_no_output_key(launched: str) -> None:
    result = timed.run([ChatMessage.from_user("go")], run_id="t2")
    assert "output" not in result and "output" not in timed.result("t2")
