"""MCPToolset and MCPTool against the test server: listing, schemas, results, list changes, filters."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from agentfsm.errors import SchemaError, ToolArgumentsError
from agentfsm.mcp import (
    ConnectionState,
    MCPConnectionError,
    MCPTool,
    MCPToolError,
    MCPToolNotFoundError,
    MCPToolset,
    StdioServerInfo,
)
from agentfsm.messages import ImageContent, TextContent
from tests.mcp.conftest import HttpServer, children, stdio_info, wait_for_no_children
from tests.mcp.server import PIXEL


@pytest.fixture(scope="module")
def toolset() -> Iterator[MCPToolset]:
    """One server for the tests that do not change it."""
    toolset = MCPToolset(stdio_info())
    toolset.warm_up()
    yield toolset
    toolset.close()


def by_name(toolset: MCPToolset, name: str) -> MCPTool:
    tool = next(t for t in toolset if t.name == name)
    assert isinstance(tool, MCPTool)
    return tool


def test_tools_are_listed_at_warm_up_with_their_schemas(toolset: MCPToolset) -> None:
    assert {"add", "count", "delete_file", "slow", "fail", "picture", "grow"} <= {t.name for t in toolset}
    add = by_name(toolset, "add")
    assert add.description == "Add two integers."
    assert add.parameters["properties"].keys() == {"a", "b"}
    assert add.parameters["required"] == ["a", "b"]


def test_not_listed_before_warm_up() -> None:
    toolset = MCPToolset(stdio_info())
    assert list(toolset) == []
    toolset.close()  # closing what never opened is fine


def test_arguments_are_checked_against_the_input_schema_before_the_call(toolset: MCPToolset) -> None:
    add = by_name(toolset, "add")
    with pytest.raises(ToolArgumentsError, match="'a'"):
        add.validate_arguments({"b": 2})
    with pytest.raises(ToolArgumentsError, match="integer"):
        add.validate_arguments({"a": "one", "b": 2})


def test_text_and_structured_results(toolset: MCPToolset) -> None:
    value = by_name(toolset, "add").invoke(a=2, b=3)
    assert value["text"] == "5"
    assert value["structured_content"] == {"result": 5}
    assert value["content"] == [TextContent("5")]
    assert value["raw_result"] == [{"type": "text", "text": "5"}]


def test_image_results_reach_the_model_as_image_parts(toolset: MCPToolset) -> None:
    value = by_name(toolset, "picture").invoke()
    assert value["content"][0] == ImageContent(PIXEL, mime_type="image/png")
    assert value["content"][1] == TextContent("a pixel")
    assert value["raw_result"][0]["mimeType"] == "image/png"


def test_an_error_result_raises_with_the_servers_message(toolset: MCPToolset) -> None:
    with pytest.raises(MCPToolError, match="the disk is full") as info:
        by_name(toolset, "fail").invoke(reason="the disk is full")
    assert info.value.result["raw_result"][0]["type"] == "text"


def test_tool_names_filter(tmp_path: Path) -> None:
    toolset = MCPToolset(stdio_info(), tool_names=["add", "count"])
    try:
        toolset.warm_up()
        assert sorted(t.name for t in toolset) == ["add", "count"]
    finally:
        toolset.close()


def test_a_missing_tool_name_is_refused_at_warm_up_and_leaves_no_server() -> None:
    before = children()
    toolset = MCPToolset(stdio_info(), tool_names=["add", "nope"])
    with pytest.raises(MCPToolNotFoundError) as info:
        toolset.warm_up()
    assert info.value.tool_name == "nope"
    assert "add" in info.value.available_tools
    assert wait_for_no_children(before) == []


def test_one_tool_alone() -> None:
    add = MCPTool(name="add", server_info=stdio_info(), eager_connect=True)
    try:
        assert add.parameters["required"] == ["a", "b"]
        assert add.invoke(a=40, b=2)["text"] == "42"
    finally:
        add.close()
    before = children()
    with pytest.raises(MCPToolNotFoundError):
        MCPTool(name="nope", server_info=stdio_info(), eager_connect=True)
    assert wait_for_no_children(before) == []


def test_a_list_change_adds_and_withdraws_tools() -> None:
    with closing(MCPToolset(stdio_info())) as toolset:
        toolset.warm_up()
        check_list_change(toolset)


def check_list_change(toolset: MCPToolset) -> None:
    fail, count, add = by_name(toolset, "fail"), by_name(toolset, "count"), by_name(toolset, "add")
    described = (count.description, count.parameters, count.idempotent)
    assert by_name(toolset, "grow").invoke()["text"] == "grown"
    names = {t.name for t in toolset}
    assert "shrink" in names and "fail" not in names
    # A tool described anew is a new tool: one a run holds keeps the description it was checked with.
    assert (count.description, count.parameters, count.idempotent) == described
    assert by_name(toolset, "count").description == "Count the calls (described anew)."
    assert by_name(toolset, "add") is add, "an unchanged tool is kept"
    assert by_name(toolset, "shrink").invoke()["text"] == "shrunk"
    with pytest.raises(MCPToolNotFoundError, match="any more"):
        fail.invoke(reason="stale")


def test_progress_notifications_reach_the_callback(tmp_path: Path) -> None:
    seen: list[tuple[str, float, float | None, str | None]] = []
    toolset = MCPToolset(stdio_info(), progress_callback=lambda *report: seen.append(report))
    try:
        toolset.warm_up()
        by_name(toolset, "slow").invoke(seconds=0, marker=str(tmp_path / "marker"))
    finally:
        toolset.close()
    assert seen == [("slow", 0.5, 1.0, "half way")]


def test_streamable_http(http_server: HttpServer) -> None:
    toolset = MCPToolset(http_server.info(), tool_names=["add"])
    try:
        toolset.warm_up()
        assert by_name(toolset, "add").invoke(a=1, b=1)["text"] == "2"
    finally:
        toolset.close()


def test_a_command_that_does_not_exist_is_a_connection_error() -> None:
    toolset = MCPToolset(StdioServerInfo(command="/nonexistent/mcp-server"), max_reconnects=1, reconnect_backoff=0)
    with pytest.raises(MCPConnectionError, match="nonexistent"):
        toolset.warm_up()
    toolset.close()


BAD_SCHEMA = StdioServerInfo(command=sys.executable, args=[str(Path(__file__).with_name("bad_schema_server.py"))])


def test_a_tool_with_an_invalid_schema_is_left_out_and_the_others_work() -> None:
    with closing(MCPToolset(BAD_SCHEMA, max_reconnects=0)) as toolset:
        toolset.warm_up()
        assert [t.name for t in toolset] == ["add"]
        assert by_name(toolset, "add").invoke(a=1, b=2)["text"] == "3"


def test_naming_a_tool_with_an_invalid_schema_fails_the_same_way_each_time() -> None:
    with closing(MCPToolset(BAD_SCHEMA, tool_names=["broken"], max_reconnects=0)) as toolset:
        for _ in range(2):
            with pytest.raises(MCPToolNotFoundError, match="broken") as caught:
                toolset.warm_up()
            assert caught.value.tool_name == "broken"
            assert "schema" in str(caught.value)
            assert toolset.connection.state is ConnectionState.CLOSED


def test_a_lone_tool_with_an_invalid_schema_raises_schema_error_and_never_sticks() -> None:
    with closing(MCPTool("broken", BAD_SCHEMA, max_reconnects=0)) as tool:
        for _ in range(2):
            with pytest.raises(SchemaError, match="broken"):
                tool.warm_up()
            assert tool.connection.state is ConnectionState.DISCONNECTED
