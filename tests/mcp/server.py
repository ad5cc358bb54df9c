"""The MCP server the MCP tests talk to, written with the ``mcp`` SDK's server API (MCPServer).

Run as a script it serves over stdio; ``build_server()`` gives a fresh one for streamable HTTP.
"""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ToolAnnotations

#: A 1x1 PNG.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()


def build_server() -> MCPServer:
    """A server with tools for every behaviour the tests check."""
    server = MCPServer("agentfsm-test", log_level="WARNING")
    calls = {"count": 0}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def delete_file(path: str) -> str:
        """Delete a file."""
        Path(path).unlink()
        return f"deleted {path}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    def count() -> int:
        """Count the calls made in this session of the server."""
        calls["count"] += 1
        return calls["count"]

    @server.tool()
    async def slow(seconds: float, marker: str, ctx: Context, release: str = "") -> str:
        """Sleep, reporting progress; the marker file says 'started', then 'finished' or 'cancelled'.

        With ``release`` (a path), it ends as soon as that file exists, or after ``seconds`` at most.
        """
        Path(marker).write_text("started")
        await ctx.report_progress(0.5, 1.0, "half way")
        try:
            with anyio.move_on_after(seconds):
                while not (release and Path(release).exists()):
                    await anyio.sleep(0.01 if release else seconds)
        except anyio.get_cancelled_exc_class():
            Path(marker).write_text("cancelled")
            raise
        Path(marker).write_text("finished")
        return "slept"

    @server.tool()
    async def download(parts: int, ctx: Context) -> str:
        """Fetch a file in ``parts`` parts, reporting each part."""
        for part in range(1, parts + 1):
            await anyio.sleep(0.01)
            await ctx.report_progress(part, parts, f"part {part} of {parts}")
        return f"downloaded {parts} parts"

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ToolError(reason)

    @server.tool()
    def picture() -> list[object]:
        """A picture and a caption."""
        return [ImageContent(type="image", data=PIXEL, mime_type="image/png"), "a pixel"]

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Offer a new tool, 'shrink', withdraw 'fail', and describe 'count' anew."""

        def shrink() -> str:
            """Undo grow."""
            return "shrunk"

        server.add_tool(shrink, name="shrink")
        server.remove_tool("fail")
        server.remove_tool("count")
        server.add_tool(count, name="count", description="Count the calls (described anew).")
        await ctx.notify_tools_changed()
        return "grown"

    return server


if __name__ == "__main__":
    build_server().run()
