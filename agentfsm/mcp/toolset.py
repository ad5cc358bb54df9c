"""MCPToolset: the tools of one MCP server, over one session, kept up to date with the server's list."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import mcp.types as mcp_types

from agentfsm.errors import ConfigurationError, ConfigurationTypeError
from agentfsm.mcp.annotations import check_overrides
from agentfsm.mcp.connection import MCPConnection, ProgressCallback
from agentfsm.mcp.server_info import MCPServerInfo
from agentfsm.mcp.tool import MCPTool, raise_not_offered
from agentfsm.reconcile import ReconcileFunction, reconcile_at, reconcile_of
from agentfsm.retries import Retry, retry_of
from agentfsm.serialization import object_path
from agentfsm.tools.tool import Tool
from agentfsm.tools.toolset import Toolset

logger = logging.getLogger(__name__)


class MCPToolset(Toolset):
    """Every tool of an MCP server (or those named in ``tool_names``), sharing one session.

    The tools are listed at ``warm_up`` (``eager_connect=True``: in the constructor), and again
    whenever the server says its list changed; the agent asks for them before each model call
    (the toolset is ``dynamic``). The session opens at warm-up, serves every call of every run, and
    closes with ``close()`` (``Agent.close``, ``with agent:``, or when the interpreter exits).

    Args:
        server_info: Where the server is (``StdioServerInfo``, ``StreamableHttpServerInfo`` or ``SSEServerInfo``).
        tool_names: Only these tools (all must exist at warm-up); ``None`` for all.
        connection_timeout: Seconds to reach the server and open the session.
        invocation_timeout: Seconds a call may take; past it, it is cancelled on the server.
        eager_connect: Connect in the constructor (so that ``exit_conditions`` and confirmation
            strategies of the agent can name the tools).
        list_timeout: Seconds to fetch the tool list.
        max_reconnects: Further attempts when connecting fails.
        reconnect_backoff: Seconds before the first retry; doubled for each further one.
        progress_callback: Told ``(tool_name, progress, total, message)`` for each progress notice, on
            the connection's thread: a slow callback holds up that server's messages.
        trust_annotations: Take ``readOnlyHint`` / ``idempotentHint`` / ``destructiveHint`` from the server.
        idempotent_overrides: Per tool name, whether a call may run again after a crash (instead of
            the annotations).
        destructive_overrides: Per tool name, whether to ask before a call (instead of the annotations).
        retry: How a failed call of any of its tools is run again (``agentfsm.retries.Retry``); ``None``: never.
        reconcile: Looks a call in doubt of any of its tools up after a crash (``agentfsm.reconcile``: it is
            given the tool's name); ``None``: a person decides.
    """

    dynamic = True

    def __init__(
        self,
        server_info: MCPServerInfo,
        tool_names: list[str] | None = None,
        connection_timeout: float = 30.0,
        invocation_timeout: float = 300.0,
        eager_connect: bool = False,
        *,
        list_timeout: float = 30.0,
        max_reconnects: int = 2,
        reconnect_backoff: float = 0.25,
        progress_callback: ProgressCallback | None = None,
        trust_annotations: bool = True,
        idempotent_overrides: Mapping[str, bool] | None = None,
        destructive_overrides: Mapping[str, bool] | None = None,
        retry: Retry | None = None,
        reconcile: ReconcileFunction | None = None,
    ) -> None:
        if tool_names is not None and (
            not isinstance(tool_names, list) or not all(isinstance(n, str) for n in tool_names)
        ):
            raise ConfigurationTypeError(f"tool_names must be a list of tool names or None, got {tool_names!r}.")
        super().__init__()
        self.server_info = server_info
        self.tool_names = None if tool_names is None else list(tool_names)
        self.eager_connect = eager_connect
        self.trust_annotations = trust_annotations
        self.idempotent_overrides = check_overrides("idempotent_overrides", idempotent_overrides)
        self.destructive_overrides = check_overrides("destructive_overrides", destructive_overrides)
        #: How a failed call of any of the server's tools is run again (``None``: never).
        self.retry = retry_of(retry, "MCPToolset")
        #: Looks a call in doubt of any of the server's tools up after a crash (``None``: a person decides).
        self.reconcile = reconcile_of(reconcile, "MCPToolset")
        self.connection = MCPConnection(
            server_info,
            connection_timeout=connection_timeout,
            list_timeout=list_timeout,
            invocation_timeout=invocation_timeout,
            max_reconnects=max_reconnects,
            reconnect_backoff=reconnect_backoff,
            progress_callback=progress_callback,
        )
        #: Tools the server offers that cannot be used, by name: why (an invalid input schema, no name).
        self._unusable: dict[str, str] = {}
        self.connection.on_tools_changed(self._listed)
        if eager_connect:
            self.warm_up()

    def _listed(self, specs: list[mcp_types.Tool]) -> None:
        """Rebuild the tools from the server's list (on the connection's thread); unchanged tools are kept.

        A tool whose description changed is a new ``MCPTool``, so that a run holding the old one
        keeps a consistent description. A tool that cannot be used (its name is empty, its input
        schema is not a valid JSON schema, or too large to check) is left out (and logged): the
        server's other tools stay usable.
        """
        current = {t.name: t for t in self.tools if isinstance(t, MCPTool)}
        tools: list[Tool] = []
        unusable: dict[str, str] = {}
        for spec in specs:
            if self.tool_names is not None and spec.name not in self.tool_names:
                continue
            self.connection.check_listing_time()  # checking the schemas counts toward list_timeout
            tool = current.get(spec.name)
            if tool is None or tool.spec != spec or tool.retry != self.retry or tool.reconcile is not self.reconcile:
                try:
                    tool = MCPTool.from_listing(
                        self.connection,
                        spec,
                        trust_annotations=self.trust_annotations,
                        idempotent=self.idempotent_overrides.get(spec.name),
                        destructive=self.destructive_overrides.get(spec.name),
                        retry=self.retry,
                        reconcile=self.reconcile,
                    )
                except ConfigurationError as exc:  # a schema that is none (SchemaError), a name that is none
                    logger.warning("MCP tool %r of %s is left out: %s", spec.name, self.server_info.describe(), exc)
                    unusable[spec.name] = str(exc)
                    continue
            tools.append(tool)
        self._unusable = unusable
        self.tools = tools  # one assignment: a run reading the list sees the old one or the new one

    def add(self, tool: Tool | Toolset) -> None:
        """Refused: an MCP toolset's tools are the server's (give the agent a list of toolsets instead)."""
        raise ConfigurationTypeError(
            "An MCPToolset's tools come from its server and cannot be added to; pass the agent a list instead: "
            "tools=[mcp_toolset, other_tool]."
        )

    def warm_up(self) -> None:
        """Connect (once) and list the tools; ``MCPToolNotFoundError`` if a name in ``tool_names`` is missing."""
        self.connection.open()
        self._check_names()

    async def warm_up_async(self) -> None:
        """Like ``warm_up``, without blocking the event loop."""
        await self.connection.open_async()
        self._check_names()

    def _check_names(self) -> None:
        usable = {t.name for t in self.tools}
        missing = [n for n in self.tool_names or [] if n not in usable]
        if missing:
            reasons = "".join(f" ({n}: {self._unusable[n]})" for n in missing if n in self._unusable)
            raise_not_offered(self.connection, missing, " (from tool_names)" + reasons)

    def close(self) -> None:
        """End the session; the server process (stdio) ends with it. Using the tools again reconnects."""
        self.connection.close()

    async def close_async(self) -> None:
        """Like ``close``, without blocking the event loop."""
        await self.connection.close_async()

    def to_dict(self) -> dict[str, Any]:
        """Serialize by configuration: the server (never a secret), the names, timeouts and overrides."""
        return {
            "type": object_path(type(self)),
            "data": {
                "tool_names": self.tool_names,
                "eager_connect": self.eager_connect,
                "trust_annotations": self.trust_annotations,
                "idempotent_overrides": self.idempotent_overrides or None,
                "destructive_overrides": self.destructive_overrides or None,
                **({"retry": self.retry.to_dict()} if self.retry is not None else {}),
                **({"reconcile": object_path(self.reconcile)} if self.reconcile is not None else {}),
                **self.connection.to_dict(),
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> MCPToolset:
        """Invert ``to_dict``; the server info's class resolves through the allow-list."""
        fields = data["data"]
        connection = MCPConnection.from_dict(fields, allowed_modules)
        return cls(
            connection.server_info,
            fields.get("tool_names"),
            eager_connect=fields.get("eager_connect", False),
            **connection.settings(),
            trust_annotations=fields.get("trust_annotations", True),
            idempotent_overrides=fields.get("idempotent_overrides"),
            destructive_overrides=fields.get("destructive_overrides"),
            retry=None if fields.get("retry") is None else Retry.from_dict(fields["retry"], allowed_modules),
            reconcile=reconcile_at(fields.get("reconcile"), allowed_modules),
        )

    def __repr__(self) -> str:
        return f"MCPToolset(server={self.server_info.describe()!r}, tools={[t.name for t in self.tools]})"
