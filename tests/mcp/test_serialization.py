"""MCP tools serialize by configuration: the server, the names and the settings, never a secret."""

from __future__ import annotations

import json
import sys

import pytest

from agentfsm import Agent
from agentfsm.errors import ConfigurationError, ConfigurationTypeError, DeserializationError, SerializationError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.mcp import MCPTool, MCPToolset, StdioServerInfo, StreamableHttpServerInfo
from agentfsm.secrets import Secret


def http_info() -> StreamableHttpServerInfo:
    return StreamableHttpServerInfo(
        url="https://mcp.example.com/mcp",
        token=Secret.from_env_var("MCP_TOKEN"),
        headers={"X-Team": "blue", "X-Key": Secret.from_env_var("MCP_KEY")},
    )


def test_a_toolset_round_trips_without_its_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TOKEN", "token-value")
    monkeypatch.setenv("MCP_KEY", "key-value")
    monkeypatch.setenv("AGENTFSM_ALLOWED_ENV_VARS", "MCP_TOKEN,MCP_KEY")
    toolset = MCPToolset(
        http_info(),
        tool_names=["search"],
        invocation_timeout=600,
        idempotent_overrides={"search": True},
        max_reconnects=5,
    )
    data = toolset.to_dict()
    text = json.dumps(data)
    assert "token-value" not in text and "key-value" not in text and "MCP_TOKEN" in text
    again = MCPToolset.from_dict(json.loads(text))
    assert again.to_dict() == data
    assert again.connection.invocation_timeout == 600 and again.connection.max_reconnects == 5
    assert isinstance(again.server_info, StreamableHttpServerInfo)
    assert again.server_info.headers is not None and again.server_info.headers["X-Team"] == "blue"


def test_an_agent_with_mcp_tools_round_trips() -> None:
    stdio = StdioServerInfo(command=sys.executable, args=["server.py"], env={"MODE": "test"})
    agent = Agent(
        chat_generator=ScriptedChatGenerator(["hi"]),
        tools=[MCPToolset(stdio), MCPTool("add", stdio, description="Add.", destructive=False)],
    )
    data = agent.to_dict()
    assert Agent.from_dict(json.loads(json.dumps(data))).to_dict() == data


def test_a_token_held_in_memory_cannot_be_serialized() -> None:
    info = StreamableHttpServerInfo(url="http://127.0.0.1:1/mcp", token=Secret.from_token("sk-secret"))
    with pytest.raises(SerializationError, match="from_env_var"):
        MCPToolset(info).to_dict()


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="http"):
        StreamableHttpServerInfo(url="ftp://example.com")
    with pytest.raises(ConfigurationTypeError, match="Secret"):
        StreamableHttpServerInfo(url="http://example.com/mcp", token="sk-plain")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="command"):
        StdioServerInfo(command="")
    with pytest.raises(ConfigurationError, match="invocation_timeout"):
        MCPToolset(StdioServerInfo(command="x"), invocation_timeout=-1)
    with pytest.raises(ConfigurationTypeError, match="tool names"):
        MCPToolset(StdioServerInfo(command="x"), idempotent_overrides={"a": "yes"})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationTypeError, match="server_info"):
        MCPToolset("python server.py")  # type: ignore[arg-type]


def test_server_info_classes_resolve_through_the_allow_list() -> None:
    data = MCPToolset(StdioServerInfo(command="x")).to_dict()
    data["data"]["server_info"]["type"] = "os.system"
    with pytest.raises(DeserializationError, match="allow"):
        MCPToolset.from_dict(data)
