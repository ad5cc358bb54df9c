"""What an MCP tool call returns, as a value agentfsm's tool loop can use and a model can read.

A call's value is a dict: ``content`` (the parts a model reads: ``TextContent`` and
``ImageContent``; other MCP parts, such as audio or resources, become a text part describing
them), ``text`` (the text parts joined), ``structured_content`` (the server's structured
result, or ``None``) and ``raw_result`` (the MCP content parts as the server sent them, as JSON).
An ``isError`` result raises ``MCPToolError`` with that dict, so the model is told the call failed.
A result nested too deeply to be kept in a snapshot (past ``MAX_VALUE_DEPTH``) raises
``MCPServerError``: the model is told so, and the run (a durable one too) goes on.
"""

from __future__ import annotations

from typing import Any

import mcp.types as mcp_types
import orjson

from agentfsm.errors import MCPServerError, MCPToolError
from agentfsm.messages import ImageContent, TextContent
from agentfsm.serialization import MAX_VALUE_DEPTH, nests_deeper

#: How an MCP tool's value reaches the model unless told otherwise: its content parts, images included.
DEFAULT_OUTPUTS_TO_STRING: dict[str, Any] = {"source": "content", "raw_result": True}


def _part(block: Any) -> TextContent | ImageContent:
    if isinstance(block, mcp_types.TextContent):
        return TextContent(block.text)
    if isinstance(block, mcp_types.ImageContent):
        return ImageContent(block.data, mime_type=block.mime_type)
    # Audio, resource links and embedded resources: the model is told what they are, as JSON.
    described = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    return TextContent(orjson.dumps(described).decode())


def result_value(tool_name: str, result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The value of a call (see the module docstring); ``MCPToolError`` for an ``isError`` result."""
    # The value is kept one level below a call's outcome, which is kept in State's limits.
    if nests_deeper(result.structured_content, MAX_VALUE_DEPTH - 2):
        raise MCPServerError(
            f"MCP tool {tool_name!r} answered with structured content nested deeper than {MAX_VALUE_DEPTH - 2} "
            "levels: it is not kept."
        )
    content = [_part(block) for block in result.content]
    value = {
        "content": content,
        "text": "\n".join(p.text for p in content if isinstance(p, TextContent)),
        "structured_content": result.structured_content,
        "raw_result": [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content],
    }
    if result.is_error:
        raise MCPToolError(f"MCP tool {tool_name!r} reported an error: {value['text'] or '(no text)'}", result=value)
    return value
