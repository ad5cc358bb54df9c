"""Human in the loop: CONFIRM as a guard state, decisions bound to their calls, approve later anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from agentfsm import Agent, ChatMessage, Phase, Toolset
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import (
    AlwaysAskPolicy,
    AskOncePolicy,
    BlockingConfirmationStrategy,
    BreakpointConfirmationStrategy,
    ConfirmationUIResult,
    DecisionError,
    HITLBreakpointException,
    NeverAskPolicy,
    SimpleConsoleUI,
    ToolExecutionDecision,
    call_fingerprint,
    get_tool_calls_and_descriptions_from_snapshot,
)
from agentfsm.snapshot import AgentSnapshot
from agentfsm.testing import assert_resume_equivalent, scripted_conversations
from tests.helpers import SIDE_EFFECTS, RuleUI, ScriptedUI, add, call, calls, finish, remember

USER = [ChatMessage.from_user("go")]
ROOT = Path(__file__).resolve().parents[2]


def blocking(*answers: list[Any], policy: Any = None) -> BlockingConfirmationStrategy:
    return BlockingConfirmationStrategy(policy or AlwaysAskPolicy(), ScriptedUI(list(answers)))


def two_adds(*, strategies: dict[Any, Any], position: int = 0, **kwargs: Any) -> Agent:
    script = [calls(call("add", "c1", a=1, b=2), call("add", "c2", a=4, b=4)), "done"]
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[add, finish],
        confirmation_strategies=strategies,
        **kwargs,
    )


def tool_results(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [(r.origin.id or "", str(r.result), r.error) for m in result["messages"] for r in m.tool_call_results]


# -- blocking: confirm, reject, modify -------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
def test_blocking_confirm_reject_and_modify(use_async: bool) -> None:
    SIDE_EFFECTS.clear()
    strategy = blocking(["reject", "not that one", None], ["modify", None, {"a": 40, "b": 2}])
    agent = two_adds(strategies={"add": strategy})
    result = asyncio.run(agent.run_async(USER)) if use_async else agent.run(USER)
    assert SIDE_EFFECTS == ["add(40,2)"], "the rejected call never ran; the modified one ran with its new arguments"
    results = tool_results(result)
    assert results[0] == ("c1", "Tool execution for 'add' was rejected by the user. With feedback: not that one", True)
    assert results[1] == ("c2", "42", False)
    modified = result["messages"][3]
    assert modified.tool_call_result.origin.arguments == {"a": 40, "b": 2}
    assert modified.meta["confirmation"]["final_tool_params"] == {"a": 40, "b": 2}
    assert "changed the arguments from {'a': 4, 'b': 4}" in modified.meta["confirmation"]["feedback"]
    assert result["tool_call_counts"] == {"add": 1}
    assert [(r.source, r.dest) for r in result["trace"]][2:4] == [
        (Phase.TOOL_PENDING, Phase.CONFIRM),
        (Phase.CONFIRM, Phase.TOOL_RUN),
    ]
    assert strategy.confirmation_ui.asked == [("add", {"a": 1, "b": 2}), ("add", {"a": 4, "b": 4})]  # type: ignore[attr-defined]


def test_modified_arguments_are_checked_again() -> None:
    agent = two_adds(strategies={"add": blocking(["confirm", None, None], ["modify", None, {"a": "four"}])})
    results = tool_results(agent.run(USER))
    assert results[1][2] and "Invalid arguments for tool 'add'" in results[1][1]


def test_calls_no_strategy_covers_go_straight_to_tool_run() -> None:
    agent = two_adds(strategies={"finish": blocking()})
    result = agent.run(USER)
    assert Phase.CONFIRM not in {r.dest for r in result["trace"]}
    assert result["tool_call_counts"] == {"add": 2}


def test_the_most_specific_key_wins_and_unknown_tools_are_refused() -> None:
    named, grouped, everything = (blocking(["reject", None, None]) for _ in range(3))
    proposed = calls(call("add", "c1", a=1, b=2), call("finish", "c2", answer="x"), call("remember", "c3", text="t"))
    agent = Agent(
        chat_generator=ScriptedChatGenerator([proposed, "done"]),
        tools=[add, finish, remember],
        confirmation_strategies={"add": named, ("add", "finish"): grouped, "*": everything},
        state_schema={"notes": {"type": list[str]}, "prefix": {"type": str}},
    )
    agent.run(USER)
    asked = [[name for name, _ in s.confirmation_ui.asked] for s in (named, grouped, everything)]
    assert asked == [["add"], ["finish"], ["remember"]]
    with pytest.raises(ValueError, match=r"unknown tools \['nope'\]"):
        Agent(chat_generator=ScriptedChatGenerator([]), tools=[add], confirmation_strategies={"nope": named})


def test_never_ask_runs_and_ask_once_asks_once_per_call() -> None:
    SIDE_EFFECTS.clear()
    assert two_adds(strategies={"*": blocking(policy=NeverAskPolicy())}).run(USER)["tool_call_counts"] == {"add": 2}
    once = blocking(["confirm", None, None], policy=AskOncePolicy())
    script = [calls(call("add", "c1", a=1, b=1)), calls(call("add", "c2", a=1, b=1)), "done"]
    result = Agent(
        chat_generator=ScriptedChatGenerator(script), tools=[add], confirmation_strategies={"add": once}
    ).run(USER)
    assert result["tool_call_counts"] == {"add": 2} and len(once.confirmation_ui.asked) == 1  # type: ignore[attr-defined]


# -- breakpoint: pause, approve later, in parts, anywhere ---------------------------------------------


def test_a_breakpoint_strategy_pauses_and_decisions_resume_the_run(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    agent = two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))})
    with pytest.raises(HITLBreakpointException) as paused:
        agent.run(USER)
    exc = paused.value
    assert (exc.tool_name, exc.tool_call_id) == ("add", "c1") and SIDE_EFFECTS == []
    snapshot = AgentSnapshot.from_file(exc.snapshot_file_path)  # type: ignore[arg-type]
    assert snapshot == exc.snapshot and snapshot.phase is Phase.CONFIRM
    last = snapshot.trace[-1]
    assert (last["source"], last["trigger"], last["dest"]) == ("TOOL_PENDING", "confirm", "CONFIRM")
    assert snapshot.stage == 0, "on resume, the strategies are asked about the calls still undecided"
    calls_, descriptions = get_tool_calls_and_descriptions_from_snapshot(snapshot)
    assert [c["id"] for c in calls_] == ["c1"] and descriptions == {"add": "Add two integers."}
    every, _ = get_tool_calls_and_descriptions_from_snapshot(snapshot, breakpoint_tool_only=False)
    assert [c["id"] for c in every] == ["c1", "c2"]

    approve = ToolExecutionDecision("add", True, "c1", call_fingerprint=call_fingerprint("add", {"a": 1, "b": 2}))
    reject = ToolExecutionDecision(
        "add", False, "c2", "too big", call_fingerprint=call_fingerprint("add", {"a": 4, "b": 4})
    )
    later = two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}, position=1)
    result = later.run(snapshot=snapshot, decisions=[approve, reject])
    assert SIDE_EFFECTS == ["add(1,2)"]
    assert tool_results(result) == [
        ("c1", "3", False),
        ("c2", "Tool execution for 'add' was rejected by the user. With feedback: too big", True),
    ]
    assert result["last_message"].text == "done"


def test_decisions_may_arrive_in_parts(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    with pytest.raises(HITLBreakpointException) as first:
        two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}).run(USER)
    approve_c1 = ToolExecutionDecision("add", True, "c1")
    with pytest.raises(HITLBreakpointException) as second:
        two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}, position=1).run(
            snapshot=first.value.snapshot, decisions=[approve_c1]
        )
    assert second.value.tool_call_id == "c2" and SIDE_EFFECTS == [], "nothing runs until every call is decided"
    assert [d["tool_call_id"] for d in second.value.snapshot.decisions] == ["c1"]
    result = two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}, position=1).run(
        snapshot=second.value.snapshot, decisions=[ToolExecutionDecision("add", True, "c2")]
    )
    assert SIDE_EFFECTS == ["add(1,2)", "add(4,4)"] and result["tool_call_counts"] == {"add": 2}


def test_decisions_that_do_not_fit_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    with pytest.raises(HITLBreakpointException) as paused:
        two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}).run(USER)
    snapshot = paused.value.snapshot

    def resume(*decisions: ToolExecutionDecision) -> None:
        two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}, position=1).run(
            snapshot=snapshot, decisions=list(decisions)
        )

    with pytest.raises(DecisionError, match=r"'c9'.*\['c1', 'c2'\]"):
        resume(ToolExecutionDecision("add", True, "c9"))
    stale = call_fingerprint("add", {"a": 100, "b": 2})
    with pytest.raises(DecisionError, match="was taken for another call"):
        resume(ToolExecutionDecision("add", True, "c1", call_fingerprint=stale))
    with pytest.raises(DecisionError, match="decided already"):
        resume(ToolExecutionDecision("add", True, "c1"), ToolExecutionDecision("add", False, "c1"))
    with pytest.raises(DecisionError, match="not waiting for decisions"):
        two_adds(strategies={}).run(snapshot=pause_before_tools(), decisions=[ToolExecutionDecision("add", True, "c1")])
    assert SIDE_EFFECTS == []


@pytest.mark.parametrize("durable", [False, True])
def test_a_second_resume_of_the_same_paused_run_is_refused(tmp_path: Path, durable: bool) -> None:
    from agentfsm import StaleSnapshotError
    from agentfsm.stores import SQLiteSnapshotStore

    SIDE_EFFECTS.clear()
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=durable)
    strategies = {"add": BreakpointConfirmationStrategy(str(tmp_path))}
    with pytest.raises(HITLBreakpointException) as paused:
        two_adds(strategies=strategies, snapshot_store=store).run(USER)
    snapshot = paused.value.snapshot
    approve_both = [ToolExecutionDecision("add", True, "c1"), ToolExecutionDecision("add", True, "c2")]
    two_adds(strategies=strategies, snapshot_store=store, position=1).run(snapshot=snapshot, decisions=approve_both)
    assert SIDE_EFFECTS == ["add(1,2)", "add(4,4)"]
    reject_both = [ToolExecutionDecision("add", False, "c1"), ToolExecutionDecision("add", False, "c2")]
    second = two_adds(strategies=strategies, snapshot_store=store, position=1)
    with pytest.raises(StaleSnapshotError, match="nothing ran"):
        second.run(snapshot=snapshot, decisions=reject_both)  # another reviewer, later, on the same pause
    from_file = AgentSnapshot.from_file(paused.value.snapshot_file_path)  # type: ignore[arg-type]
    with pytest.raises(StaleSnapshotError, match="nothing ran"):
        second.run(snapshot=from_file, decisions=reject_both)
    assert SIDE_EFFECTS == ["add(1,2)", "add(4,4)"], "the second resume ran nothing"


def pause_before_tools() -> AgentSnapshot:
    from agentfsm import Breakpoint, BreakpointException

    with pytest.raises(BreakpointException) as paused:
        two_adds(strategies={}).run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    return paused.value.snapshot  # type: ignore[no-any-return]


def test_ask_once_remembers_across_a_pause_in_another_agent(allow_tests_modules: None) -> None:
    from agentfsm import Breakpoint, BreakpointException

    script = [calls(call("add", "c1", a=1, b=1)), calls(call("add", "c2", a=1, b=1)), "done"]

    def agent(position: int = 0) -> Agent:
        strategy = blocking(["confirm", None, None], policy=AskOncePolicy())
        return Agent(
            chat_generator=ScriptedChatGenerator(script, position=position),
            tools=[add],
            confirmation_strategies={"add": strategy},
        )

    first = agent()
    with pytest.raises(BreakpointException) as paused:
        first.run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=1))
    fresh = Agent.from_dict(agent(position=1).to_dict())
    fresh.run(snapshot=paused.value.snapshot)
    assert fresh.confirmation_strategies["add"].confirmation_ui.asked == [], (
        "confirmed before the pause: not asked again"
    )


class ShownAtWarmUp(Toolset):
    """A dynamic toolset (as an MCP server's is) whose tools are known only once it is warmed up."""

    dynamic = True

    def warm_up(self) -> None:
        self.tools = [add]


def test_an_every_tool_ask_once_strategy_remembers_across_a_pause() -> None:
    from agentfsm import Breakpoint, BreakpointException

    script = [calls(call("add", "c1", a=1, b=1)), calls(call("add", "c2", a=1, b=1)), "done"]

    def agent(position: int = 0) -> Agent:
        strategy = blocking(["confirm", None, None], policy=AskOncePolicy())
        return Agent(
            chat_generator=ScriptedChatGenerator(script, position=position),
            tools=ShownAtWarmUp(),
            confirmation_strategies={"*": strategy},
        )

    with pytest.raises(BreakpointException) as paused:
        agent().run(USER, break_point=Breakpoint(phase=Phase.LLM_CALL, step=1))
    fresh = agent(position=1)
    fresh.run(snapshot=paused.value.snapshot)
    assert fresh.confirmation_strategies["*"].confirmation_ui.asked == [], "confirmed before the pause: not asked again"


def test_hitl_exceptions_pickle_with_their_snapshot(tmp_path: Path) -> None:
    with pytest.raises(HITLBreakpointException) as paused:
        two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}).run(USER)
    again = pickle.loads(pickle.dumps(paused.value))
    assert (again.tool_name, again.tool_call_id, again.snapshot) == ("add", "c1", paused.value.snapshot)


def test_strategies_serialize_with_the_agent(allow_tests_modules: None, tmp_path: Path) -> None:
    agent = two_adds(
        strategies={
            "add": blocking(["confirm", None, None], policy=AskOncePolicy()),
            ("finish",): BreakpointConfirmationStrategy(str(tmp_path)),
        }
    )
    rebuilt = Agent.from_dict(agent.to_dict())
    assert rebuilt.to_dict() == agent.to_dict() and rebuilt.fingerprint == agent.fingerprint


def test_confirm_is_drawn_only_with_strategies() -> None:
    assert "CONFIRM" not in two_adds(strategies={}).draw()
    drawn = two_adds(strategies={"add": blocking()}).draw()
    assert "TOOL_PENDING --> CONFIRM : 1 confirm [a strategy covers a call]" in drawn
    assert "confirmation - add" in drawn


# -- every transition, random decisions -------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripted_conversations([add], max_replies=4, invalid_calls=False))
def test_decisions_resume_anywhere_and_run_each_approved_call_once(script: list[ChatMessage]) -> None:
    def make() -> Agent:
        strategy = BlockingConfirmationStrategy(AlwaysAskPolicy(), RuleUI())
        return Agent(
            chat_generator=ScriptedChatGenerator(script), tools=[add], confirmation_strategies={"add": strategy}
        )

    assert_resume_equivalent(make, USER, side_effects=SIDE_EFFECTS, allowed_modules=["tests"])
    rejected = [(c.arguments["a"], c.arguments["b"]) for m in script for c in m.tool_calls if c.arguments["a"] % 2]
    assert not any(f"add({a},{b})" in SIDE_EFFECTS for a, b in rejected), "a rejected call never runs"


# -- the console UI through a real terminal, and the command line ----------------------------------------


def test_simple_console_ui_in_a_terminal_asks_again_until_it_can_use_the_answer() -> None:
    program = (
        "from agentfsm.hitl import SimpleConsoleUI\n"
        "schema = {'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'required': ['a']}\n"
        "result = SimpleConsoleUI().get_user_confirmation('add', 'Add.', {'a': 1}, tool_schema=schema)\n"
        "print('RESULT', result.action, result.new_tool_params)\n"
    )
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", program], stdin=follower, stdout=follower, stderr=follower, cwd=ROOT, close_fds=True
    )
    os.close(follower)
    for answer in (b"x\n", b"m\n", b"{not json\n", b"m\n", b'{"a": "two"}\n', b"m\n", b'{"a": 2}\n'):
        os.write(leader, answer)
    output, deadline = b"", time.monotonic() + 60
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"the console UI did not end within a minute; it wrote {output!r}"
        if not select.select([leader], [], [], left)[0]:
            continue
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closes when the program ends
            break
        if not chunk:
            break
        output += chunk
    process.wait(timeout=60)
    os.close(leader)
    text = output.decode()
    assert 'Arguments: {"a": 1}' in text
    assert "Answer y, n or m." in text and "That is not JSON" in text and "do not fit the tool" in text
    assert "RESULT modify {'a': 2}" in text


def test_cli_resume_approves_and_rejects(tmp_path: Path) -> None:
    with pytest.raises(HITLBreakpointException) as paused:
        two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}).run(USER)
    path = paused.value.snapshot_file_path
    shown = subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", "snapshot", "show", path],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert 'c1: add({"a":1,"b":2}) (waiting for a decision)' in shown.stdout
    done = subprocess.run(
        [
            sys.executable, "-m", "agentfsm.cli", "resume", path, "--agent", "tests.hitl.test_hitl:resuming_agent",
            "--approve", "c1", "--reject", "c2:not now",
        ],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    bad = subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", "resume", path, "--agent", "tests.hitl.test_hitl:resuming_agent", "--modify", "c1:{nope"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert bad.returncode == 1 and "The new arguments of c1 are not JSON" in bad.stderr


def resuming_agent() -> Agent:
    """The agent the command-line test resumes with (its model gives the reply after the tools)."""
    return two_adds(strategies={"add": BreakpointConfirmationStrategy(tempfile.gettempdir())}, position=1)


def test_ui_results_and_decisions_round_trip() -> None:
    decision = ToolExecutionDecision("add", True, "c1", "ok", {"a": 1}, "abc")
    assert ToolExecutionDecision.from_dict(json.loads(json.dumps(decision.to_dict()))) == decision
    assert ConfirmationUIResult("reject", "no").feedback == "no"
    assert isinstance(SimpleConsoleUI(), SimpleConsoleUI)


def test_rich_console_ui_shows_the_call_and_asks_again_until_it_can_use_the_answer() -> None:
    import io

    from rich.console import Console

    from agentfsm.hitl import RichConsoleUI

    shown = io.StringIO()
    answers = io.StringIO('m\n{oops\nm\n{"a": "x"}\nm\n{"a": 3}\n')
    ui = RichConsoleUI(console=Console(file=shown, width=100), stream=answers)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    result = ui.get_user_confirmation("add", "Add two integers.", {"a": 1}, tool_schema=schema)
    assert result == ConfirmationUIResult("modify", new_tool_params={"a": 3})
    out = shown.getvalue()
    assert "add" in out and "Add two integers." in out and '"a": 1' in out
    assert "That is not JSON" in out and "do not fit the tool" in out
    rejected = RichConsoleUI(console=Console(file=io.StringIO()), stream=io.StringIO("n\ntoo risky\n"))
    assert rejected.get_user_confirmation("add", "", {}) == ConfirmationUIResult("reject", "too risky")


class OnlyBigPayments(AlwaysAskPolicy):
    """A user's policy: ask only when a is large."""

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict[str, Any]) -> bool:
        return tool_params.get("a", 0) > 2


def test_user_policies_decide_when_to_ask() -> None:
    SIDE_EFFECTS.clear()
    strategy = blocking(["reject", None, None], policy=OnlyBigPayments())
    result = two_adds(strategies={"add": strategy}).run(USER)
    assert strategy.confirmation_ui.asked == [("add", {"a": 4, "b": 4})]  # type: ignore[attr-defined]
    assert SIDE_EFFECTS == ["add(1,2)"] and result["tool_call_counts"] == {"add": 1}


def test_breakpoint_and_decisions_under_run_async(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    strategy = BreakpointConfirmationStrategy(str(tmp_path))
    with pytest.raises(HITLBreakpointException) as paused:
        asyncio.run(two_adds(strategies={"add": strategy}).run_async(USER))
    decisions = [ToolExecutionDecision("add", True, "c1"), ToolExecutionDecision("add", False, "c2")]
    result = asyncio.run(
        two_adds(strategies={"add": strategy}, position=1).run_async(
            snapshot=paused.value.snapshot, decisions=decisions
        )
    )
    assert SIDE_EFFECTS == ["add(1,2)"] and result["last_message"].text == "done"


def test_a_waiting_call_never_runs_without_a_decision(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    with pytest.raises(HITLBreakpointException) as paused:
        two_adds(strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))}).run(USER)
    no_strategy = two_adds(strategies={}, position=1)
    with pytest.raises(DecisionError, match=r"\['c2'\].*decision"):
        no_strategy.run(snapshot=paused.value.snapshot, decisions=[ToolExecutionDecision("add", True, "c1")])
    assert SIDE_EFFECTS == []


def test_an_every_tool_strategy_is_part_of_the_fingerprint() -> None:
    def agent(strategies: dict[Any, Any]) -> Agent:
        return Agent(
            chat_generator=ScriptedChatGenerator(["x"]), tools=ShownAtWarmUp(), confirmation_strategies=strategies
        )

    assert agent({"*": blocking()}).fingerprint != agent({}).fingerprint


class KeyedStrategy:
    """A strategy that declares ``idempotency_key``: it records the key it was given, and approves."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str,
        idempotency_key: str,
    ) -> ToolExecutionDecision:
        self.keys.append(idempotency_key)
        return ToolExecutionDecision(tool_name, True, tool_call_id)


def test_a_strategy_that_declares_idempotency_key_gets_the_key_its_call_runs_with() -> None:
    from agentfsm import Tool

    ran_with: list[str] = []

    def send(to: str, idempotency_key: str) -> str:
        ran_with.append(idempotency_key)
        return f"sent to {to}"

    tool = Tool("send", "Send.", {"type": "object", "properties": {"to": {"type": "string"}}}, send)
    for driver in ("sync", "async"):
        strategy = KeyedStrategy()
        model = ScriptedChatGenerator([calls(call("send", "s1", to="ann")), "Sent."])
        agent = Agent(chat_generator=model, tools=[tool], confirmation_strategies={"send": strategy})
        if driver == "sync":
            agent.run(USER)
        else:
            asyncio.run(agent.run_async(USER))
        assert len(strategy.keys) == 1 and strategy.keys == ran_with[-1:], driver
    # A strategy written to the plain signature is called with it, as before.
    remember_model = ScriptedChatGenerator([calls(call("send", "s2", to="bob")), "Sent."])
    plain = BlockingConfirmationStrategy(NeverAskPolicy(), SimpleConsoleUI())
    Agent(chat_generator=remember_model, tools=[tool], confirmation_strategies={"send": plain}).run(USER)
