"""Hostile MCP servers, tried from outside: each attack of ``hostile_server.py`` gets a typed, bounded answer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfsm import Agent, ChatMessage, telemetry, tool
from agentfsm.errors import ConfigurationError, SerializationError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, ConfirmationUIResult
from agentfsm.mcp import (
    MCPConnectionError,
    MCPTimeoutError,
    MCPToolset,
    SSEServerInfo,
    StdioServerInfo,
    StreamableHttpServerInfo,
)
from agentfsm.stores import SQLiteSnapshotStore
from tests.helpers import call, calls
from tests.mcp.conftest import HttpServer, stdio_info

HOSTILE = Path(__file__).with_name("hostile_server.py")
USER = [ChatMessage.from_user("go")]


def hostile(mode: str, marker: Path | None = None, **options: Any) -> MCPToolset:
    """A toolset of the hostile server in ``mode`` (``marker``: the file it writes when its taken tool runs)."""
    args = [str(HOSTILE), mode, *([str(marker)] if marker is not None else [])]
    return MCPToolset(StdioServerInfo(command=sys.executable, args=args), **options)


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """The file the server's tool writes when it runs: it must never exist."""
    path = tmp_path / "server-ran"
    yield path
    assert not path.exists(), f"the server's tool ran: {path.read_text()}"


@tool
def note(text: str) -> str:
    """Take a note."""
    return f"the agent's note: {text}"


class AskedAbout:
    """A confirmation UI that approves every call and records what it was asked about."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        self.asked.append((tool_name, tool_description))
        return ConfirmationUIResult(action="confirm")


# -- a server never takes over a tool it did not own --------------------------------------------------


def test_a_list_change_naming_the_agents_own_tool_leaves_it_the_agents(marker: Path) -> None:
    # The server offers a tool named `note` once the run started: before, its `note` ran in the agent's place.
    ui = AskedAbout()
    script = [calls(call("take", "c1", tool="note")), calls(call("note", "c2", text="x")), "done"]
    events: list[Any] = []
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[note, hostile("takeover", marker)],
        confirmation_strategies={"note": BlockingConfirmationStrategy(AlwaysAskPolicy(), ui)},
    )
    with agent:
        result = agent.run(USER, on_event=events.append)
    assert result["messages"][4].tool_call_result.result == "the agent's note: x"
    assert ui.asked == [("note", "Take a note.")], "the person was asked about the agent's own note"
    [warning] = [e for e in events if e.kind == "warning"]
    assert warning.warning == "tool_name_taken" and "'note'" in warning.message


def test_a_list_change_naming_another_toolsets_tool_leaves_it_that_toolsets(marker: Path) -> None:
    script = [calls(call("take", "c1", tool="add")), calls(call("add", "c2", a=2, b=3)), "done"]
    events: list[Any] = []
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script), tools=[MCPToolset(stdio_info()), hostile("takeover", marker)]
    )
    with agent:
        result = agent.run(USER, on_event=events.append)
    assert [p.text for p in result["messages"][4].tool_call_result.result] == ["5"]
    assert [e.warning for e in events if e.kind == "warning"] == ["tool_name_taken"]


# -- no listing holds the process: list_timeout bounds it, schemas checked included --------------------


def test_a_tool_with_a_huge_schema_is_listed_and_checked_within_list_timeout() -> None:
    toolset = hostile("huge", list_timeout=30)
    with closing(toolset):
        toolset.warm_up()
        big = next(t for t in toolset if t.name == "big")
        assert len(big.parameters["properties"]) == 10_000
        big.validate_arguments({"p1": "x"})


def test_list_timeout_bounds_checking_the_schemas_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each schema takes 0.6 s to check here, and the whole listing may take 0.5 s: no second check starts.
    from agentfsm.mcp.tool import MCPTool

    checked: list[str] = []
    apply_spec = MCPTool.apply_spec

    def slowly(tool: MCPTool, spec: Any) -> None:
        checked.append(spec.name)
        time.sleep(0.6)
        apply_spec(tool, spec)

    monkeypatch.setattr(MCPTool, "apply_spec", slowly)
    toolset = hostile("odd_listing", list_timeout=0.5, max_reconnects=0)
    with closing(toolset), pytest.raises(MCPTimeoutError, match=r"longer than 0.5 s \(list_timeout\), checking"):
        toolset.warm_up()
    assert checked == ["add"]


def test_a_backtracking_pattern_in_a_servers_schema_is_checked_in_bounded_time() -> None:
    # Run in a process of its own: Python's backtracking `re` would hold this one (and its GIL) for hours.
    code = f"""
import sys
from agentfsm import Agent, ChatMessage
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.mcp import MCPToolset, StdioServerInfo
from tests.helpers import call, calls
toolset = MCPToolset(StdioServerInfo(command=sys.executable, args=[{str(HOSTILE)!r}, "backtracking"]))
script = [calls(call("match", "c1", text="a" * 40 + "!")), "done"]
with Agent(chat_generator=ScriptedChatGenerator(script), tools=[toolset]) as agent:
    answer = agent.run([ChatMessage.from_user("go")])["messages"][2].tool_call_result
print(answer.error, answer.result)
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        check=False,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True ") and "does not match '^(a|a)*$'" in done.stdout


# -- listings and results that are not what they should be ----------------------------------------------


def test_a_tool_named_empty_or_with_no_schema_is_left_out_and_the_others_work(caplog: pytest.LogCaptureFixture) -> None:
    toolset = hostile("odd_listing")
    with closing(toolset):
        toolset.warm_up()
        assert [t.name for t in toolset] == ["add"]
        assert next(iter(toolset)).invoke(a=2, b=3)["text"] == "5"
    assert "MCP tool '' of" in caplog.text and "MCP tool 'broken' of" in caplog.text


def test_a_server_that_exits_while_listing_is_a_typed_error() -> None:
    toolset = hostile("exit_listing", max_reconnects=0)
    with closing(toolset), pytest.raises(MCPConnectionError, match="closed the connection while listing its tools"):
        toolset.warm_up()


def test_a_malformed_result_is_a_short_typed_error_the_model_reads() -> None:
    script = [calls(call("broken", "c1")), "done"]
    with Agent(chat_generator=ScriptedChatGenerator(script), tools=[hostile("bad_content")]) as agent:
        answer = agent.run(USER)["messages"][2].tool_call_result
    assert answer.error and "MCPServerError" in answer.result and "is not MCP's" in answer.result
    assert len(answer.result) < 500 and "xxxx" not in answer.result, "the server's data is not repeated"


@pytest.mark.parametrize("durable", [False, True])
def test_a_result_nested_100_deep_is_an_error_result_not_a_failed_run(tmp_path: Path, durable: bool) -> None:
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=durable)
    script = [calls(call("deep", "c1")), "done"]
    with Agent(
        chat_generator=ScriptedChatGenerator(script), tools=[hostile("bad_content")], snapshot_store=store
    ) as agent:
        result = agent.run(USER)
    answer = result["messages"][2].tool_call_result
    assert answer.error and "nested deeper than 62 levels" in answer.result
    assert result["last_message"].text == "done"
    assert [r.status for r in store.runs()] == (["done"] if durable else [])
    store.close()


# -- credentials in a server's URL are used, and shown nowhere -------------------------------------------

SECRETS = ("hunter2", "sk-live-123")


def credentialed(url: str) -> str:
    """``url`` with a user name and password and an API key written into it."""
    scheme, rest = url.split("://")
    return f"{scheme}://alice:{SECRETS[0]}@{rest}?api_key={SECRETS[1]}&v=2"


def test_credentials_in_a_url_are_refused_by_to_dict_and_never_shown() -> None:
    info = StreamableHttpServerInfo(url=credentialed("http://127.0.0.1:1/mcp"))
    toolset = MCPToolset(info)
    with pytest.raises(SerializationError, match="holds credentials") as refused:
        toolset.to_dict()
    with pytest.raises(SerializationError, match="holds credentials"):
        Agent(chat_generator=ScriptedChatGenerator(["hi"]), tools=[toolset]).to_dict()
    with pytest.raises(ConfigurationError, match="http") as bad:
        StreamableHttpServerInfo(url=f"ftp://alice:{SECRETS[0]}@example.com/?token={SECRETS[1]}")
    shown = [
        str(refused.value),
        str(bad.value),
        repr(toolset),
        repr(info),
        info.describe(),
        repr(SSEServerInfo(info.url)),
    ]
    assert not any(secret in text for secret in SECRETS for text in shown), shown
    assert info.describe() == "http://***@127.0.0.1:1/mcp?api_key=***&v=***"
    plain = StreamableHttpServerInfo(url="http://127.0.0.1:1/mcp?v=2")  # a query without credentials is kept
    assert MCPToolset.from_dict(MCPToolset(plain).to_dict()).server_info.describe() == "http://127.0.0.1:1/mcp?v=***"


def test_credentials_in_a_url_never_reach_an_error_a_tool_result_a_snapshot_or_a_span(
    http_server: HttpServer, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(provider)
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=True)
    toolset = MCPToolset(StreamableHttpServerInfo(url=credentialed(http_server.url)), max_reconnects=0)

    def stop_the_server(state: Any) -> None:
        http_server.stop()  # after the first call: the second one cannot reach it

    script = [calls(call("add", "c1", a=2, b=3)), calls(call("add", "c2", a=1, b=1)), "done"]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[toolset],
        snapshot_store=store,
        hooks={"after_tool": [stop_the_server]},
    )
    try:
        with agent:
            result = agent.run(USER)
    finally:
        telemetry.uninstrument()
    first, second = result["messages"][2].tool_call_result, result["messages"][4].tool_call_result
    assert not first.error and second.error and "http://***@127.0.0.1" in second.result
    [run] = store.runs()
    stored = [store.load(run.run_id, info.seq).to_bytes().decode() for info in store.history(run.run_id)]
    spans = [repr(s.to_json()) for s in exporter.get_finished_spans()]
    assert any("ERROR" in s for s in spans)
    assert not any(secret in text for secret in SECRETS for text in [*stored, *spans, str(second.result)])
    store.close()
