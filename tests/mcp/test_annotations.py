"""Annotations drive agentfsm: idempotent tools re-run after a crash, destructive ones ask first."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, BreakpointException, ChatMessage, Phase, TextContent, ToolCall
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BlockingConfirmationStrategy, ConfirmationUIResult
from agentfsm.mcp import AskDestructiveMCPToolsPolicy, ConnectionState, MCPTool, MCPToolset
from agentfsm.reconcile import Happened, InDoubtCall, Reconciled
from agentfsm.stores import SQLiteSnapshotStore
from tests.mcp.conftest import stdio_info


@pytest.fixture(scope="module")
def hints() -> Iterator[dict[str, tuple[bool, bool]]]:
    """Each tool's (idempotent, destructive), as the server's annotations say."""
    toolset = MCPToolset(stdio_info())
    toolset.warm_up()
    yield {t.name: (t.idempotent, t.destructive) for t in toolset if isinstance(t, MCPTool)}
    toolset.close()


def test_annotations_map_onto_idempotent_and_destructive(hints: dict[str, tuple[bool, bool]]) -> None:
    assert hints["add"] == (True, False)  # readOnlyHint
    assert hints["count"] == (True, False)  # idempotentHint, destructiveHint false
    assert hints["delete_file"] == (False, True)  # destructiveHint
    assert hints["slow"] == (False, True)  # no annotations: MCP's defaults


def test_the_user_overrides_the_annotations_or_ignores_them() -> None:
    toolset = MCPToolset(
        stdio_info(),
        idempotent_overrides={"slow": True},
        destructive_overrides={"delete_file": False},
        tool_names=["slow", "delete_file", "add"],
    )
    untrusting = MCPTool("add", stdio_info(), trust_annotations=False)
    try:
        toolset.warm_up()
        untrusting.warm_up()
        tools = {t.name: t for t in toolset if isinstance(t, MCPTool)}
        assert (tools["slow"].idempotent, tools["delete_file"].destructive, tools["add"].idempotent) == (
            True,
            False,
            True,
        )
        assert (untrusting.idempotent, untrusting.destructive) == (False, True)
    finally:
        toolset.close()
        untrusting.close()


class Approve:
    """A confirmation UI (Haystack's documented protocol) that approves and records what it was asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        self.asked.append(tool_name)
        return ConfirmationUIResult(action="confirm")


@pytest.mark.parametrize("eager_connect", [True, False], ids=["connected-when-built", "tools-seen-at-warm-up"])
def test_the_policy_asks_before_destructive_tools_only(tmp_path: Path, eager_connect: bool) -> None:
    # The policy matches names process-wide: an earlier test's untrusted (so destructive) "add",
    # dropped but held in a reference cycle, would count until collected.
    gc.collect()
    doomed = tmp_path / "doomed.txt"
    doomed.write_text("bye")
    reply = ChatMessage.from_assistant(
        tool_calls=[ToolCall("add", {"a": 1, "b": 1}, id="a"), ToolCall("delete_file", {"path": str(doomed)}, id="d")]
    )
    ui = Approve()
    strategy = BlockingConfirmationStrategy(AskDestructiveMCPToolsPolicy(), ui)
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply, "done"]),
        # Connected when built or not: "*" covers the tools the server lists at warm-up too.
        tools=MCPToolset(stdio_info(), tool_names=["add", "delete_file"], eager_connect=eager_connect),
        confirmation_strategies={"*": strategy},
    )
    with agent:
        agent.run([ChatMessage.from_user("clean up")])
    assert ui.asked == ["delete_file"]
    assert not doomed.exists()


def test_the_policy_asks_whatever_the_state_of_the_session(tmp_path: Path) -> None:
    doomed = tmp_path / "doomed.txt"
    doomed.write_text("keep me")
    toolset = MCPToolset(stdio_info(), tool_names=["delete_file"])
    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": str(doomed)}, id="d")])
    ui = Reject()
    asking = Agent(
        chat_generator=ScriptedChatGenerator([reply, "done"]),
        tools=toolset,
        confirmation_strategies={"*": BlockingConfirmationStrategy(AskDestructiveMCPToolsPolicy(), ui)},
    )
    other = Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=toolset)
    try:
        asking.warm_up()
        other.warm_up()
        other.close()  # closes the session the two agents share: the next call reconnects
        assert toolset.connection.state is ConnectionState.CLOSED
        asking.run([ChatMessage.from_user("delete it")])
    finally:
        asking.close()
    assert ui.asked == ["delete_file"]
    assert doomed.read_text() == "keep me"


def test_an_explicit_override_holds_before_the_tool_is_described() -> None:
    tool = MCPTool("delete_file", stdio_info(), destructive=False, idempotent=True)
    assert (tool.destructive, tool.idempotent) == (False, True)
    assert AskDestructiveMCPToolsPolicy().should_ask("never-described-tool", "", {}) is False
    undescribed = MCPTool("not-yet-described", stdio_info())
    assert AskDestructiveMCPToolsPolicy().should_ask(undescribed.name, "", {})


class Reject(Approve):
    """A confirmation UI that rejects and records what it was asked about."""

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        self.asked.append(tool_name)
        return ConfirmationUIResult(action="reject")


KILLED_DURING_A_CALL = """
import os, sys
from agentfsm import Agent, ChatMessage, ToolCall
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.mcp import MCPToolset
from agentfsm.stores import SQLiteSnapshotStore
from tests.mcp.conftest import stdio_info

def die(*progress):  # the call is under way on the server: the agent's process dies
    os.kill(os.getpid(), 9)

reply = ChatMessage.from_assistant(tool_calls=[ToolCall("slow", {"seconds": 0.1, "marker": sys.argv[2]}, id="s")])
idempotent = {"slow": True} if sys.argv[3] == "idempotent" else None
toolset = MCPToolset(stdio_info(), tool_names=["slow"], progress_callback=die, idempotent_overrides=idempotent)
store = SQLiteSnapshotStore(sys.argv[1], durable=True)
Agent(chat_generator=ScriptedChatGenerator([reply, "done"]), tools=toolset, snapshot_store=store).run(
    [ChatMessage.from_user("go")]
)
"""


def slept(call: InDoubtCall) -> Reconciled:
    """The toolset's reconcile function: the server's log says the call in doubt finished.

    Its result is what the tool returns (an MCP tool's: its content, text...), shown to the model as the tool's is.
    """
    text = f"{call.tool_name} finished before the crash"
    return Happened({"content": [TextContent(text)], "text": text, "structured_content": None, "raw_result": []})


@pytest.mark.parametrize("kind", ["idempotent", "not idempotent", "reconciled"])
def test_a_call_in_doubt_after_a_crash_reruns_only_if_idempotent(tmp_path: Path, kind: str) -> None:
    root = Path(__file__).resolve().parents[2]
    db, marker = tmp_path / "runs.db", tmp_path / "marker"
    done = subprocess.run(
        [sys.executable, "-c", KILLED_DURING_A_CALL, str(db), str(marker), kind],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    store = SQLiteSnapshotStore(db, durable=True)
    snapshot = store.latest(store.runs()[0].run_id)
    assert snapshot.phase is Phase.TOOL_RUN and snapshot.outcome_unknown_calls() == {"s": "slow"}
    reply = ChatMessage.from_assistant(tool_calls=[ToolCall("slow", {"seconds": 0.1, "marker": str(marker)}, id="s")])
    toolset = MCPToolset(
        stdio_info(),
        tool_names=["slow"],
        idempotent_overrides={"slow": True} if kind == "idempotent" else None,
        reconcile=slept if kind == "reconciled" else None,
    )
    agent = Agent(
        chat_generator=ScriptedChatGenerator([reply, "done"], position=snapshot.step),
        tools=toolset,
        snapshot_store=store,
    )
    with agent:
        if kind == "idempotent":  # it runs again, on a new server
            result = agent.run(snapshot=snapshot, take_over=True)
            assert result["messages"][-2].tool_call_result.result[0].text == "slept"
            assert result["last_message"].text == "done"
        elif kind == "reconciled":  # the toolset's reconcile function settles it: the tool is not called again
            result = agent.run(snapshot=snapshot, take_over=True)
            assert result["messages"][-2].tool_call_result.result[0].text == "slow finished before the crash"
            assert toolset.to_dict()["data"]["reconcile"] == "tests.mcp.test_annotations.slept"
        else:  # it may have had its effect (the orphaned server may finish it): a person decides
            with pytest.raises(BreakpointException, match="outcome is unknown"):
                agent.run(snapshot=snapshot, take_over=True)
