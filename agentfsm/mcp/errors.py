"""The errors of MCP tools: a server that cannot be reached, a call that timed out or was cut off.

::

    AgentFSMError
    ├── MCPConnectionError (ConnectionError)     the server could not be reached (after the retries)
    │   └── MCPConnectionLostError                the connection dropped while a call was in flight
    ├── MCPTimeoutError (TimeoutError)           connecting, listing tools or a call took too long
    ├── MCPServerError (RuntimeError)            the server answered a request with a protocol error
    └── ToolError
        ├── ToolNotFoundError
        │   └── MCPToolNotFoundError             the server does not offer the tool (any more)
        └── ToolInvocationError
            └── MCPToolError                     the tool ran and reported an error (``isError``)
"""

from __future__ import annotations

from typing import Any

from agentfsm.errors import AgentFSMError, ToolInvocationError, ToolNotFoundError


class MCPConnectionError(AgentFSMError, ConnectionError):
    """The MCP server could not be reached: it did not start, or refused the connection."""


class MCPConnectionLostError(MCPConnectionError):
    """The connection dropped while a call was in flight: the call may or may not have run.

    It is not sent again (a tool that is not idempotent must not run twice); the next call
    reconnects.
    """


class MCPTimeoutError(AgentFSMError, TimeoutError):
    """Connecting, listing the tools or a tool call took longer than its timeout."""

    def __init__(self, message: str, *, operation: str) -> None:
        super().__init__(message)
        #: ``"connect"``, ``"list"`` or ``"call"``.
        self.operation = operation

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), str(self), {"operation": self.operation}))


class MCPServerError(AgentFSMError, RuntimeError):
    """The server answered a request with a JSON-RPC error (for example, invalid parameters)."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        #: The JSON-RPC error code.
        self.code = code

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), str(self), {"code": self.code}))


class MCPToolNotFoundError(ToolNotFoundError):
    """The MCP server does not offer a tool of that name (or no longer does)."""

    def __init__(self, message: str, *, tool_name: str, available_tools: list[str]) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.available_tools = available_tools

    def __reduce__(self) -> Any:
        return (
            _rebuild,
            (type(self), str(self), {"tool_name": self.tool_name, "available_tools": self.available_tools}),
        )


class MCPToolError(ToolInvocationError):
    """The tool ran and reported an error (an ``isError`` result); ``result`` holds what it returned."""

    def __init__(self, message: str, *, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), str(self), {"result": self.result}))


def _rebuild(cls: type[Exception], message: str, fields: dict[str, Any]) -> Exception:
    """Unpickle an error whose fields are keyword-only arguments."""
    return cls(message, **fields)
