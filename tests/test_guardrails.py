"""Guardrails at the four points: pass, rewrite and tripwire, sync and async, on every path (``agentfsm.guardrails``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import Agent, AgentSnapshot, ChatMessage, Guardrail, GuardrailResult, guardrail, tool
from agentfsm.errors import (
    BreakpointException,
    ConfigurationError,
    ConfigurationTypeError,
    GuardrailError,
    HITLBreakpointException,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, ToolExecutionDecision
from agentfsm.machine import Phase, Work
from agentfsm.stores import SQLiteSnapshotStore
from agentfsm.testing import comparable_result
from tests.helpers import call, calls

USER = [ChatMessage.from_user("look up card 1")]


@tool
def lookup(card: str) -> str:
    """Look a card up."""
    return f"card {card}: Ann, 4111-1111-1111-1111"


@guardrail("tool_result")
def redact_cards(result: Any) -> GuardrailResult:
    """Redact card numbers from results."""
    text = str(result.result)
    if "4111" in text:
        return GuardrailResult.rewrite(text.replace("4111-1111-1111-1111", "****"), "card number redacted")
    return GuardrailResult.passed()


@guardrail("input")
def no_secrets(messages: list[ChatMessage]) -> GuardrailResult:
    """No message the model reads says 'secret'."""
    if any("secret" in (m.text or "") or "secret" in str(m.tool_call_results) for m in messages):
        return GuardrailResult.tripwire("a secret in the model's input")
    return GuardrailResult.passed()


@guardrail("output", on_trip="model")
def polite(answer: Any) -> GuardrailResult:
    """Answers are polite."""
    return GuardrailResult.tripwire("be polite") if "stupid" in str(answer) else GuardrailResult.passed()


@guardrail("tool_call", on_trip="model", tools=["lookup"])
def no_card_9(call: Any) -> GuardrailResult:
    """Card 9 is never looked up."""
    return (
        GuardrailResult.tripwire("card 9 is off limits")
        if call.arguments.get("card") == "9"
        else GuardrailResult.passed()
    )


def run(agent: Agent, mode: str, *args: Any, **kwargs: Any) -> Any:
    """The agent's run, through ``run`` or ``run_async``: the same decisions either way."""
    if mode == "sync":
        return agent.run(*args, **kwargs)
    return asyncio.run(agent.run_async(*args, **kwargs))


MODES = ["sync", "async"]


def _agent(script: list[Any], guardrails: list[Guardrail], **options: Any) -> Agent:
    return Agent(chat_generator=ScriptedChatGenerator(script), tools=[lookup], guardrails=guardrails, **options)


def _verdict(point: str, kind: str, on_trip: str = "end") -> Guardrail:
    """A guardrail at ``point`` answering every value with ``kind``."""

    def check(value: Any) -> GuardrailResult:
        if kind == "pass":
            return GuardrailResult.passed()
        if kind == "tripwire":
            return GuardrailResult.tripwire(f"{point} refused")
        rewritten: Any = {
            "input": [*value, ChatMessage.from_system("rewritten")] if isinstance(value, list) else value,
            "output": "REDACTED",
            "tool_call": {"card": "0"},
            "tool_result": "REDACTED",
        }[point]
        return GuardrailResult.rewrite(rewritten, f"{point} rewritten")

    return guardrail(point, name=f"g_{point}", on_trip=on_trip)(check)  # type: ignore[arg-type]


SCRIPT = [calls(call("lookup", "c1", card="1")), "the card is Ann's"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("point", ["input", "output", "tool_call", "tool_result"])
def test_a_passing_guardrail_changes_nothing(mode: str, point: str) -> None:
    plain = run(_agent(SCRIPT, []), mode, USER)
    guarded = run(_agent(SCRIPT, [_verdict(point, "pass")]), mode, USER)
    assert comparable_result(guarded) == comparable_result(plain)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("point", "phase"),
    [("input", "LLM_CALL"), ("tool_call", "TOOL_PENDING"), ("tool_result", "TOOL_RUN"), ("output", "EXIT_CHECK")],
)
def test_a_tripwire_ends_the_run_through_its_edge_with_its_exit_reason(mode: str, point: str, phase: str) -> None:
    ran: list[str] = []

    @tool
    def spy(card: str) -> str:
        """Record the call."""
        ran.append(card)
        return "ok"

    agent = Agent(
        chat_generator=ScriptedChatGenerator([calls(call("spy", "c1", card="1")), "done"]),
        tools=[spy],
        guardrails=[_verdict(point, "tripwire")],
    )
    result = run(agent, mode, USER)
    assert result.exit_reason == f"guardrail:g_{point}"
    last = result.trace[-1]
    assert (last.source, last.trigger, last.dest) == (Phase(phase), "guardrail_tripped", Phase.DONE)
    assert ran == ([] if point in ("input", "tool_call") else ["1"])
    if point == "input":
        assert result["step_count"] == 0, "the model was never called"


@pytest.mark.parametrize("mode", MODES)
def test_rewrites_replace_what_they_guard_and_the_events_say_what_changed(mode: str) -> None:
    events: list[Any] = []
    agent = _agent(SCRIPT, [_verdict("tool_call", "rewrite"), redact_cards, _verdict("output", "rewrite")])
    result = run(agent, mode, USER, on_event=events.append)
    [tool_message] = [m for m in result["messages"] if m.tool_call_result is not None]
    assert tool_message.tool_call_result.origin.arguments == {"card": "0"}, "the call ran with the rewritten arguments"
    assert tool_message.tool_call_result.result == "card 0: Ann, ****"
    assert result["last_message"].text == "REDACTED"
    rewrites = [(e.point, e.rewrites) for e in events if e.kind == "guardrail" and e.rewrites]
    assert rewrites == [
        ("tool_call", [["g_tool_call", "tool_call rewritten"]]),
        ("tool_result", [["redact_cards", "card number redacted"]]),
        ("output", [["g_output", "output rewritten"]]),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_an_input_rewrite_is_what_the_model_reads(mode: str) -> None:
    model = ScriptedChatGenerator(["fine"])
    agent = Agent(chat_generator=model, guardrails=[_verdict("input", "rewrite")])
    result = run(agent, mode, USER)
    assert model.calls[0]["messages"][-1].text == "rewritten"
    assert result["messages"][1].text == "rewritten"


@pytest.mark.parametrize("mode", MODES)
def test_refused_calls_answers_and_results_go_back_to_the_model(mode: str) -> None:
    script = [calls(call("lookup", "c1", card="1"), call("lookup", "c9", card="9")), "you are stupid", "Ann, thanks"]
    result = run(_agent(script, [no_card_9, redact_cards, polite]), mode, USER)
    assert result.exit_reason == "text" and result["last_message"].text == "Ann, thanks"
    results = {m.tool_call_result.origin.id: m.tool_call_result for m in result["messages"] if m.tool_call_result}
    assert results["c9"].error and "card 9 is off limits" in results["c9"].result, "the call never ran"
    assert results["c1"].result == "card 1: Ann, ****"
    assert result["tool_call_counts"] == {"lookup": 1}, "a refused call is not counted as run"
    refused = [m for m in result["messages"] if m.meta.get("guardrail") == "polite"]
    assert len(refused) == 1 and "be polite" in (refused[0].text or "")
    assert "guardrail_retry" in [r.trigger for r in result.trace]


def test_a_refused_answer_with_no_step_left_does_not_leave() -> None:
    result = _agent(["you are stupid"], [polite], max_agent_steps=1).run(USER)
    assert result.exit_reason == "guardrail:polite"
    assert result.trace[-1].trigger == "guardrail_capped"


@pytest.mark.parametrize("mode", MODES)
def test_input_guardrails_check_every_model_call_not_only_the_first(mode: str) -> None:
    @tool
    def leak() -> str:
        """Return a secret."""
        return "the secret is 42"

    model = ScriptedChatGenerator([calls(call("leak", "c1")), "I know it"])
    agent = Agent(chat_generator=model, tools=[leak], guardrails=[no_secrets])
    result = run(agent, mode, USER)
    assert result.exit_reason == "guardrail:no_secrets"
    assert len(model.calls) == 1, "the second model call, which would read the tool's secret, never happened"
    assert result.trace[-1].source is Phase.LLM_CALL


def test_input_guardrails_fire_after_a_resume_from_a_sqlite_store(tmp_path: Path) -> None:
    @tool
    def leak() -> str:
        """Return a secret."""
        return "the secret is 42"

    store = SQLiteSnapshotStore(tmp_path / "runs.db")

    def agent(position: int = 0) -> Agent:
        return Agent(
            chat_generator=ScriptedChatGenerator([calls(call("leak", "c1")), "I know it"], position=position),
            tools=[leak],
            guardrails=[no_secrets],
            confirmation_strategies={"leak": BreakpointConfirmationStrategy(None)},
            snapshot_store=store,
        )

    with pytest.raises(HITLBreakpointException) as paused:
        agent().run(USER)
    stored = store.latest(paused.value.snapshot.run_id)
    resumed = agent(position=1)
    result = resumed.run(snapshot=stored, decisions=[ToolExecutionDecision("leak", True, "c1")])
    assert result.exit_reason == "guardrail:no_secrets"
    assert resumed.chat_generator.calls == [], "the resumed run checked the input before its model call"  # type: ignore[attr-defined]


def test_a_blocked_call_stays_blocked_after_a_pause_for_another_call() -> None:
    ran: list[str] = []

    @tool
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(str(amount))
        return "paid"

    @guardrail("tool_call", on_trip="model", tools=["pay"])
    def small(call: Any) -> GuardrailResult:
        return GuardrailResult.tripwire("too much") if call.arguments["amount"] > 100 else GuardrailResult.passed()

    def agent(position: int = 0) -> Agent:
        script = [calls(call("pay", "big", amount=500), call("lookup", "c1", card="1")), "done"]
        return Agent(
            chat_generator=ScriptedChatGenerator(script, position=position),
            tools=[pay, lookup],
            guardrails=[small],
            confirmation_strategies={"lookup": BreakpointConfirmationStrategy(None)},
        )

    with pytest.raises(HITLBreakpointException) as paused:
        agent().run(USER)
    result = agent(1).run(snapshot=paused.value.snapshot, decisions=[ToolExecutionDecision("lookup", True, "c1")])
    assert ran == [], "the refused call never ran, across the pause"
    big = next(
        m.tool_call_result for m in result["messages"] if m.tool_call_result and m.tool_call_result.origin.id == "big"
    )
    assert big.error and "too much" in big.result


@pytest.mark.parametrize("mode", MODES)
def test_async_guardrails_and_guardrail_classes(mode: str) -> None:
    class NoNines(Guardrail):
        def __init__(self) -> None:
            super().__init__("tool_call", name="no_nines")

        def check(self, value: Any, /) -> GuardrailResult:
            return GuardrailResult.tripwire("nine") if "9" in str(value.arguments) else GuardrailResult.passed()

    @guardrail("output")
    async def shout(answer: Any) -> GuardrailResult:
        return GuardrailResult.rewrite(str(answer).upper(), "shouted")

    agent = _agent([calls(call("lookup", "c1", card="9")), "done"], [NoNines(), shout])
    if mode == "sync":
        with pytest.raises(ConfigurationTypeError, match=r"Guardrails \['shout'\] are async"):
            agent.run(USER)
        return
    assert run(agent, mode, USER).exit_reason == "guardrail:no_nines"
    assert run(_agent(["done"], [shout]), mode, USER)["last_message"].text == "DONE"


def test_bad_guardrails_are_refused_with_what_to_fix() -> None:
    with pytest.raises(ConfigurationError, match="one of the points"):
        guardrail("inputs")(lambda v: GuardrailResult.passed())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationTypeError, match="needs its point"):
        guardrail(lambda v: v)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationTypeError, match=r"decorate it with @guardrail"):
        Agent(chat_generator=ScriptedChatGenerator([]), guardrails=[lambda v: v])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="input guardrail's tripwire ends the run"):
        guardrail("input", on_trip="model")(lambda v: v)
    with pytest.raises(ConfigurationError, match="named 'g_output'"):
        Agent(chat_generator=ScriptedChatGenerator([]), guardrails=[_verdict("output", "pass")] * 2)

    @guardrail("output")
    def sloppy(answer: Any) -> Any:
        return True

    with pytest.raises(GuardrailError, match=r"returned True: return GuardrailResult.passed\(\)"):
        Agent(chat_generator=ScriptedChatGenerator(["hi"]), guardrails=[sloppy]).run(USER)

    @guardrail("tool_call")
    def wrong_rewrite(call: Any) -> GuardrailResult:
        return GuardrailResult.rewrite("card=1")

    with pytest.raises(GuardrailError, match="a rewrite here is a dict"):
        _agent(SCRIPT, [wrong_rewrite]).run(USER)


def test_guardrails_serialize_with_the_agent() -> None:
    agent = _agent(SCRIPT, [redact_cards, no_secrets, polite, no_card_9])
    data = agent.to_dict()
    again = Agent.from_dict(data, allowed_modules=["tests"])
    assert again.to_dict() == data
    assert sorted(g.name for g in again.guardrails or []) == ["no_card_9", "no_secrets", "polite", "redact_cards"]
    assert again._fingerprint() == agent._fingerprint()


def test_an_agent_without_guardrails_plans_none_of_their_work() -> None:
    run_ = _agent(SCRIPT, []).new_run(_request())
    planned = {entry[1] for entries in run_._plan.values() for entry in entries if entry is not None}
    assert not planned & {Work.GUARD_INPUT, Work.GUARD_CALLS, Work.GUARD_RESULTS, Work.GUARD_OUTPUT}
    assert ("guardrail_tripped", False) in run_.constants and ("answer_refused", False) in run_.constants


def _request() -> Any:
    from agentfsm.agent import RunRequest

    return RunRequest(messages=list(USER))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    script=st.lists(
        st.sampled_from([calls(call("lookup", "c1", card="1")), calls(call("lookup", "c2", card="x")), "done"]),
        min_size=1,
        max_size=4,
    )
)
def test_with_pass_through_guardrails_any_run_equals_the_run_without_them(script: list[Any]) -> None:
    script = [*script, "done"]
    passing = [_verdict(point, "pass") for point in ("input", "output", "tool_call", "tool_result")]
    plain = _agent(script, [], max_agent_steps=4).run(USER)
    guarded = _agent(script, passing, max_agent_steps=4).run(USER)
    assert comparable_result(guarded) == comparable_result(plain)


# -- arguments a person changed are guarded again ---------------------------------------------------------


class Modifies:
    """A person who changes every call to ``arguments`` (a confirmation strategy with the seed's signature)."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    def run(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any], tool_call_id: str | None = None
    ) -> ToolExecutionDecision:
        return ToolExecutionDecision(tool_name, True, tool_call_id, final_tool_params=dict(self.arguments))


@guardrail("tool_call", tools=["lookup"])
def card_9_ends(call: Any) -> GuardrailResult:
    """Looking up card 9 ends the run."""
    return GuardrailResult.tripwire("card 9") if call.arguments.get("card") == "9" else GuardrailResult.passed()


@guardrail("tool_call", tools=["lookup"])
def card_9_masked(call: Any) -> GuardrailResult:
    """Card 9 is looked up as card 0."""
    if call.arguments.get("card") == "9":
        return GuardrailResult.rewrite({"card": "0"}, "card 9 masked")
    return GuardrailResult.passed()


def _results(result: Any) -> dict[str, Any]:
    return {r.origin.id: r for m in result["messages"] for r in m.tool_call_results}


def _looked_up(result: Any) -> list[str]:
    return [r.origin.arguments["card"] for r in _results(result).values() if not r.error]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["tripwire", "refused", "rewrite"])
def test_arguments_a_person_changed_pass_the_tool_call_guardrails_before_the_call_runs(mode: str, kind: str) -> None:
    guard = {"tripwire": card_9_ends, "refused": no_card_9, "rewrite": card_9_masked}[kind]
    events: list[Any] = []
    agent = _agent(SCRIPT, [guard], confirmation_strategies={"lookup": Modifies({"card": "9"})})
    result = run(agent, mode, USER, on_event=events.append)
    checked = [e.subject for e in events if e.kind == "guardrail"]
    assert checked == ["c1", "c1"], "the call was checked as the model proposed it, and again as the person changed it"
    looked_up = _looked_up(result)
    assert "9" not in looked_up, "card 9 was never looked up"
    if kind == "tripwire":
        assert result.exit_reason == "guardrail:card_9_ends"
        assert result.trace[-1].source is Phase.CONFIRM
        assert "card 9" in _results(result)["c1"].result
    elif kind == "refused":
        assert result.exit_reason == "text"
        assert _results(result)["c1"].error and "card 9 is off limits" in _results(result)["c1"].result
    else:
        assert looked_up == ["0"]


def test_changed_arguments_given_on_resume_from_a_store_are_guarded(tmp_path: Path) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db")

    def agent(position: int = 0) -> Agent:
        return _agent(
            SCRIPT,
            [card_9_ends],
            confirmation_strategies={"lookup": BreakpointConfirmationStrategy(None)},
            snapshot_store=store,
        )

    with pytest.raises(HITLBreakpointException) as paused:
        agent().run(USER)
    stored = store.latest(paused.value.snapshot.run_id)
    decision = ToolExecutionDecision("lookup", True, "c1", final_tool_params={"card": "9"})
    result = agent(1).run(snapshot=stored, decisions=[decision])
    assert result.exit_reason == "guardrail:card_9_ends"
    assert _looked_up(result) == []


def test_a_rewrite_of_changed_arguments_is_what_a_resumed_run_runs() -> None:
    from agentfsm import Breakpoint

    agent = _agent(SCRIPT, [card_9_masked], confirmation_strategies={"lookup": Modifies({"card": "9"})})
    with pytest.raises(BreakpointException) as paused:
        agent.run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN))
    snapshot = AgentSnapshot.from_bytes(paused.value.snapshot.to_bytes())
    assert snapshot.decisions[0]["final_tool_params"] == {"card": "9"}, "the record keeps what the person decided"
    result = agent.run(snapshot=snapshot)
    assert _looked_up(result) == ["0"], "the resumed run ran the call as the guardrail rewrote it"


# -- a tripwire that ends the run leaves a conversation that can be continued ---------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("confirmed", [False, True])
def test_a_tool_call_tripwire_gives_every_call_of_its_batch_a_result(mode: str, confirmed: bool) -> None:
    from agentfsm.checking.invariants import transcript_problem

    script = [calls(call("lookup", "c1", card="1"), call("lookup", "c9", card="9"), call("lookup", "c2", card="2"))]
    options = {"confirmation_strategies": {"lookup": Modifies({"card": "9"})}} if confirmed else {}
    if confirmed:  # the person changes every call to card 9: the first one trips
        script = [calls(call("lookup", "c1", card="1"), call("lookup", "c2", card="2"))]
    result = run(_agent(script, [card_9_ends], **options), mode, USER)
    assert result.exit_reason == "guardrail:card_9_ends"
    assert transcript_problem(result["messages"]) is None, "each call is answered, right after the calls"
    results = _results(result)
    tripped = "c1" if confirmed else "c9"
    assert results[tripped].error and "Guardrail 'card_9_ends' refused the call: card 9" in results[tripped].result
    for key, r in results.items():
        if key != tripped:
            assert r.error and f"Not run: the run ended when guardrail 'card_9_ends' refused call {tripped}" in r.result
    assert result["last_message"].tool_call_result is not None
    assert result["tool_call_counts"] == {}, "no call ran"


def test_a_call_rewritten_after_a_resume_is_rewritten_in_the_conversation_too() -> None:
    from agentfsm import Breakpoint

    uninterrupted = _agent(SCRIPT, [_verdict("tool_call", "rewrite")]).run(USER)
    agent = _agent(SCRIPT, [_verdict("tool_call", "rewrite")])
    with pytest.raises(BreakpointException) as paused:
        agent.run(USER, break_point=Breakpoint(phase=Phase.TOOL_PENDING))
    result = agent.run(snapshot=AgentSnapshot.from_bytes(paused.value.snapshot.to_bytes()))
    assert result["messages"] == uninterrupted["messages"], "as if it had never paused"
    assert result["messages"][1].tool_calls[0].arguments == {"card": "0"}, "the model is shown the call that ran"
