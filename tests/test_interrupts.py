"""Interrupts (``agentfsm.interrupts``): a tool or a hook asks a person, the run pauses, answers are checked and resumed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, ChatMessage, State, hook, tool
from agentfsm.agent import RunRequest
from agentfsm.errors import AnswerError, ConfigurationError, InputBreakpointException, SchemaError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.interrupts import AskUser, InputAnswer
from agentfsm.machine import CallStatus
from agentfsm.pauses import AwaitingInput
from agentfsm.snapshot import AgentSnapshot
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore
from agentfsm.tools.invoker import ToolInvoker
from tests.helpers import add, call, calls

USER = [ChatMessage.from_user("Move 5.")]
#: Each run of ``transfer``'s body, by amount: a tool that asks runs again from its start once answered.
RUNS: list[int] = []
ACCOUNT = {"enum": ["checking", "savings"]}
CODE = {"type": "string", "pattern": "^[0-9]{6}$"}


@tool
def transfer(amount: int, ask_user: AskUser) -> str:
    """Move money between accounts."""
    RUNS.append(amount)
    account = ask_user("Which account?", ACCOUNT)
    code = ask_user("The 2FA code?", CODE)
    return f"moved {amount} from {account} ({code})"


def _agent(*amounts: int, position: int = 0, **options: Any) -> Agent:
    script = [calls(*(call("transfer", f"c{a}", amount=a) for a in amounts)), "done"]
    return Agent(chat_generator=ScriptedChatGenerator(script, position=position), tools=[transfer], **options)


def _paused(agent: Agent, **run: Any) -> InputBreakpointException:
    with pytest.raises(InputBreakpointException) as paused:
        agent.run(**run) if run else agent.run(USER)
    return paused.value


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RUNS.clear()


def test_the_parameter_is_hidden_from_the_model_and_the_run_pauses_with_a_typed_reason() -> None:
    assert "ask_user" not in transfer.parameters["properties"] and transfer.takes_ask
    paused = _paused(_agent(5))
    pause = paused.snapshot.pause
    assert isinstance(pause, AwaitingInput) and paused.questions == pause.questions
    [question] = pause.questions
    assert (question.id, question.question, question.response_schema) == ("c5.0", "Which account?", ACCOUNT)
    assert (question.tool_call_id, question.tool_name, question.hook_point) == ("c5", "transfer", None)
    assert paused.snapshot.phase.value == "TOOL_RUN" and paused.snapshot.completed_tool_results == {}
    assert paused.snapshot.awaited_decisions() == [] and paused.snapshot.awaited_answers() == [question]


def test_the_kth_ask_returns_the_kth_answer_and_the_tool_runs_again_from_its_start() -> None:
    agent = _agent(5)
    first = _paused(agent)
    second = _paused(agent, snapshot=first.snapshot, decisions=[InputAnswer("c5.0", "savings")])
    assert [q.id for q in second.questions] == ["c5.1"]
    assert second.snapshot.input_answers == {"c5.0": "savings"}
    result = agent.run(snapshot=second.snapshot, decisions=[{"question_id": "c5.1", "answer": "123456"}])
    assert result["messages"][-2].tool_call_result.result == "moved 5 from savings (123456)"
    assert RUNS == [5, 5, 5], "what the tool does before its ask happens on each run"


def test_an_answer_that_does_not_fit_is_refused_and_nothing_runs() -> None:
    agent = _agent(5)
    paused = _paused(agent)
    refused = [
        [InputAnswer("c5.0", "gold")],  # not in the enum
        [InputAnswer("c9.0", "savings")],  # no such question
        [InputAnswer("c5.0", "savings"), InputAnswer("c5.0", "checking")],  # twice
        [],  # no answer at all
        [{"question_id": "c5.0"}],  # not an answer
    ]
    for answers in refused:
        with pytest.raises(AnswerError, match=r"Nothing ran|An answer is"):
            agent.run(snapshot=paused.snapshot, decisions=answers)
    assert RUNS == [5]
    again = _paused(agent, snapshot=paused.snapshot, decisions=[InputAnswer("c5.0", "checking")])
    assert [q.id for q in again.questions] == ["c5.1"], "the pause stayed: a good answer still resumes it"


def test_parallel_calls_are_each_answered_by_id_and_an_unanswered_one_keeps_waiting() -> None:
    agent = _agent(5, 7)
    paused = _paused(agent)
    assert [q.id for q in paused.questions] == ["c5.0", "c7.0"]
    # Answers name their questions: given backwards, each still reaches its own call.
    both = [InputAnswer("c7.0", "checking"), InputAnswer("c5.0", "savings")]
    codes = _paused(agent, snapshot=paused.snapshot, decisions=both)
    assert [q.id for q in codes.questions] == ["c5.1", "c7.1"]
    only_seven = _paused(agent, snapshot=codes.snapshot, decisions=[InputAnswer("c7.1", "777777")])
    assert [q.id for q in only_seven.questions] == ["c5.1"]
    assert list(only_seven.snapshot.completed_tool_results) == ["c7"]
    result = agent.run(snapshot=only_seven.snapshot, decisions=[InputAnswer("c5.1", "555555")])
    results = [m.tool_call_result.result for m in result["messages"] if m.tool_call_result]
    assert results == ["moved 5 from savings (555555)", "moved 7 from checking (777777)"]
    assert RUNS == [5, 7, 5, 7, 7, 5], "an unanswered call does not run again until it is answered"


def test_the_calls_take_declared_edges_and_the_events_say_so() -> None:
    moves: list[tuple[str, str, str]] = []

    def on_event(event: Any) -> None:
        if event.kind == "call_transition":
            moves.append((event.source, event.trigger, event.dest))

    agent = _agent(5)
    paused = _paused(agent)
    with pytest.raises(InputBreakpointException):
        agent.run(snapshot=paused.snapshot, decisions=[InputAnswer("c5.0", "savings")], on_event=on_event)
    assert ("ready", "await_input", "awaiting_input") in moves and ("awaiting_input", "answered", "ready") in moves
    assert CallStatus.AWAITING_INPUT.value == "awaiting_input"


FIRED: list[str] = []


@hook
def note(state: State) -> None:
    FIRED.append("note")


@hook
def confirm_plan(state: State, ask_user: AskUser) -> None:
    FIRED.append("confirm")
    state.set("go", ask_user("Go on with the plan?", {"type": "boolean"}))


def _hooked() -> Agent:
    return Agent(
        chat_generator=ScriptedChatGenerator(["done"]),
        hooks={"before_llm": [note, confirm_plan]},
        state_schema={"go": {"type": bool}},
    )


def test_a_hook_asks_and_the_run_resumes_at_that_hook() -> None:
    FIRED.clear()
    agent = _hooked()
    paused = _paused(agent)
    [question] = paused.questions
    assert (question.id, question.hook_point, question.hook) == ("before_llm.1.0", "before_llm", 1)
    assert paused.snapshot.phase.value == "LLM_CALL" and paused.snapshot.trace[-1]["trigger"] == "start"
    result = agent.run(snapshot=paused.snapshot, decisions=[InputAnswer(question.id, True)])
    assert result["go"] is True and result["last_message"].text == "done"
    assert FIRED == ["note", "confirm", "confirm"], "the hooks before the asking one do not run again"


def test_the_async_driver_pauses_and_resumes_alike() -> None:
    FIRED.clear()
    agent = _hooked()

    async def main() -> Any:
        with pytest.raises(InputBreakpointException) as paused:
            await agent.run_async(USER)
        return await agent.run_async(snapshot=paused.value.snapshot, decisions=[InputAnswer("before_llm.1.0", False)])

    assert asyncio.run(main())["go"] is False
    assert FIRED == ["note", "confirm", "confirm"]


@pytest.mark.parametrize("kind", ["sqlite", "json"])
def test_a_stored_pause_is_answered_by_another_agent_object(tmp_path: Path, kind: str) -> None:
    def store() -> Any:
        return SQLiteSnapshotStore(tmp_path / "runs.db") if kind == "sqlite" else JsonFileStore(tmp_path / "runs")

    run_id = _paused(_agent(5, snapshot_store=store())).snapshot.run_id
    # As another process would: a new store over the same files, a new agent (its model past the first reply).
    other, answers = store(), [InputAnswer("c5.0", "savings")]
    codes = _paused(_agent(5, position=1, snapshot_store=other), snapshot=other.latest(run_id), decisions=answers)
    head = other.latest(run_id)
    assert head.input_answers == {"c5.0": "savings"} and [q.id for q in head.awaited_answers()] == ["c5.1"]
    assert AgentSnapshot.from_bytes(head.to_bytes()).pause == codes.snapshot.pause
    result = _agent(5, position=1, snapshot_store=other).run(snapshot=head, decisions=[InputAnswer("c5.1", "000000")])
    assert result["messages"][-2].tool_call_result.result == "moved 5 from savings (000000)"


def test_asking_where_no_run_can_pause_is_a_typed_error() -> None:
    invoker = ToolInvoker([transfer], raise_on_failure=False)
    [result] = invoker.run([calls(call("transfer", "c1", amount=1))])["tool_messages"]
    assert result.tool_call_result.error and "where no run can pause" in result.tool_call_result.result

    @hook
    def at_start(state: State, ask_user: AskUser) -> None:
        ask_user("Start?")

    agent = Agent(chat_generator=ScriptedChatGenerator(["done"]), hooks={"before_run": [at_start]})
    with pytest.raises(ConfigurationError, match="before_run, after_run or on_error"):
        agent.run(USER)


def test_a_bad_question_is_a_typed_error_in_the_tool() -> None:
    @tool
    def odd(ask_user: AskUser) -> str:
        """Asks with a schema that is none."""
        return str(ask_user("Pick", {"type": "no such type"}))

    agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("odd", "o1")), "done"]), tools=[odd])
    result = agent.run(USER)
    assert "SchemaError" in result["messages"][-2].tool_call_result.result
    assert issubclass(SchemaError, ConfigurationError)


def test_an_agent_that_asks_nothing_reads_none_of_the_facts() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator([calls(call("add", "a1", a=1, b=2)), "done"]), tools=[add])
    run = agent.new_run(RunRequest(messages=list(USER)))
    assert {("calls_asking", False), ("hook_asking", False)} <= run.constants
    assert not run.asks and not run.config.asking_hooks
    assert _agent(5).new_run(RunRequest(messages=USER)).asks


def test_the_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from examples import interrupts

    interrupts.LOOKUPS.clear()
    interrupts.main()
    printed = capsys.readouterr().out
    assert "refused: The answer 'gold'" in printed and printed.strip().endswith("Rent is paid.")


@tool(idempotent=True)
def which(ask_user: AskUser) -> str:
    """Asks which account pays, before doing anything."""
    return str(ask_user("Which account?", ACCOUNT))


def test_check_agent_explores_a_fitting_and_an_unfitting_answer_per_question(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentfsm._core import decisions
    from agentfsm.checking import check_agent

    agent = Agent(chat_generator=ScriptedChatGenerator(["unused"]), tools=[which])
    assert check_agent(agent, max_steps=1).ok
    # Answers taken unchecked: the unfitting one is taken, and the invariant says so.
    monkeypatch.setattr(decisions, "check_answers", lambda run_id, pause, answers: list(answers))
    result = check_agent(agent, max_steps=1, crashes=False, breakpoints=False)
    assert [v.invariant for v in result.violations] == ["answers_checked"]
    assert "breaks its question's schema" in result.violations[0].message


def test_check_agent_flags_a_tool_that_asks_and_is_not_idempotent() -> None:
    from agentfsm.checking import check_agent

    agent = Agent(chat_generator=ScriptedChatGenerator(["unused"]), tools=[transfer])
    result = check_agent(agent, max_steps=1, crashes=False, breakpoints=False)
    [violation] = result.violations
    assert violation.invariant == "no_double_effect" and "asks a person (ask_user)" in violation.message
