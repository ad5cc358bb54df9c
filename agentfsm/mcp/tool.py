"""MCPTool: one tool of an MCP server, as an agentfsm ``Tool``."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import mcp.types as mcp_types

from agentfsm.errors import ConfigurationTypeError, MCPToolNotFoundError
from agentfsm.mcp.annotations import register_tool, tool_hints
from agentfsm.mcp.connection import MCPConnection, ProgressCallback
from agentfsm.mcp.results import DEFAULT_OUTPUTS_TO_STRING, result_value
from agentfsm.mcp.server_info import MCPServerInfo
from agentfsm.reconcile import ReconcileFunction, reconcile_at
from agentfsm.retries import Retry
from agentfsm.serialization import object_path
from agentfsm.tools.progress import ProgressReporter, unheard
from agentfsm.tools.tool import REPORT_PROGRESS, Tool

#: The parameters of a tool whose description has not been fetched yet (it accepts any object).
_UNKNOWN_PARAMETERS: dict[str, Any] = {"type": "object"}


def raise_not_offered(connection: MCPConnection, missing: list[str], reasons: str) -> None:
    """Close ``connection`` (nothing unusable keeps a server running), then raise ``MCPToolNotFoundError``."""
    offered = sorted(t.name for t in connection.tools)
    connection.close()
    raise MCPToolNotFoundError(
        f"MCP server {connection.server_info.describe()} has no usable tool{'s' if len(missing) > 1 else ''} "
        f"{', '.join(map(repr, missing))}{reasons}; it offers {offered}.",
        tool_name=missing[0],
        available_tools=offered,
    )


def _heard(report_progress: ProgressReporter | None) -> ProgressReporter | None:
    """The call's reporter, ``None`` when nobody listens: the server is then not asked for progress notices."""
    return None if report_progress is unheard else report_progress


class MCPTool(Tool):
    """One tool of an MCP server: its description and input schema come from the server.

    Its parameters are the tool's input schema, checked before each call like any tool's; its
    value is the call's result (see ``agentfsm.mcp.results``): the model reads its content parts,
    images included. The server is reached at ``warm_up`` (``eager_connect=True``: at once), and
    the session stays open until ``close()`` (``Agent.close`` and ``with agent:`` call it).

    Args:
        name: The tool's name on the server.
        server_info: Where the server is (``StdioServerInfo``, ``StreamableHttpServerInfo`` or ``SSEServerInfo``).
        description: Shown to the model instead of the server's description.
        connection_timeout: Seconds to reach the server and open the session.
        invocation_timeout: Seconds a call may take; past it, it is cancelled on the server.
        eager_connect: Connect in the constructor instead of at ``warm_up``.
        list_timeout: Seconds to fetch the tool list.
        max_reconnects: Further attempts when connecting fails.
        reconnect_backoff: Seconds before the first retry; doubled for each further one.
        progress_callback: Told ``(tool_name, progress, total, message)`` for each progress notice, on
            the connection's thread: a slow callback holds up that server's messages. In a run, each
            notice is also a ``tool_progress`` event of the run, for whoever listens (unless a subclass
            overrides ``invoke`` or ``invoke_async``: it is given the model's arguments alone).
        trust_annotations: Take ``readOnlyHint`` / ``idempotentHint`` / ``destructiveHint`` from the server.
        idempotent: Whether a call may run again after a crash; ``None`` follows the annotations.
        destructive: Whether to ask before a call (``AskDestructiveMCPToolsPolicy``); ``None`` follows them.
        retry: How a failed call is run again (``agentfsm.retries.Retry``); ``None``: never.
        reconcile: Looks a call in doubt after a crash up (``agentfsm.reconcile``); ``None``: a person decides.
    """

    def __init__(
        self,
        name: str,
        server_info: MCPServerInfo,
        description: str | None = None,
        connection_timeout: float = 30.0,
        invocation_timeout: float = 300.0,
        eager_connect: bool = False,
        *,
        list_timeout: float = 30.0,
        max_reconnects: int = 2,
        reconnect_backoff: float = 0.25,
        progress_callback: ProgressCallback | None = None,
        trust_annotations: bool = True,
        idempotent: bool | None = None,
        destructive: bool | None = None,
        retry: Retry | None = None,
        reconcile: ReconcileFunction | None = None,
    ) -> None:
        connection = MCPConnection(
            server_info,
            connection_timeout=connection_timeout,
            list_timeout=list_timeout,
            invocation_timeout=invocation_timeout,
            max_reconnects=max_reconnects,
            reconnect_backoff=reconnect_backoff,
            progress_callback=progress_callback,
        )
        self._setup(
            name,
            connection,
            description,
            trust_annotations,
            idempotent,
            destructive,
            owns_connection=True,
            retry=retry,
            reconcile=reconcile,
        )
        self.eager_connect = eager_connect
        connection.on_tools_changed(self._listed)
        if eager_connect:
            self.warm_up()

    @classmethod
    def from_listing(
        cls,
        connection: MCPConnection,
        spec: mcp_types.Tool,
        *,
        trust_annotations: bool,
        idempotent: bool | None,
        destructive: bool | None,
        retry: Retry | None = None,
        reconcile: ReconcileFunction | None = None,
    ) -> MCPTool:
        """A tool of a toolset: it shares the toolset's connection, which the toolset opens and closes.

        ``SchemaError`` if the server's input schema for it is not a valid JSON schema.
        """
        tool = cls.__new__(cls)
        tool._setup(
            spec.name,
            connection,
            None,
            trust_annotations,
            idempotent,
            destructive,
            owns_connection=False,
            retry=retry,
            reconcile=reconcile,
        )
        tool.eager_connect = False
        tool.apply_spec(spec)
        return tool

    def _setup(
        self,
        name: str,
        connection: MCPConnection,
        description: str | None,
        trust_annotations: bool,
        idempotent: bool | None,
        destructive: bool | None,
        *,
        owns_connection: bool,
        retry: Retry | None = None,
        reconcile: ReconcileFunction | None = None,
    ) -> None:
        for label, value in (("idempotent", idempotent), ("destructive", destructive)):
            if value is not None and not isinstance(value, bool):
                raise ConfigurationTypeError(f"MCPTool {label} must be True, False or None, got {value!r}.")
        Tool.__init__(
            self,
            name=name,
            description=description or "",
            parameters=dict(_UNKNOWN_PARAMETERS),
            function=self._call,
            outputs_to_string=dict(DEFAULT_OUTPUTS_TO_STRING),
            retry=retry,
            reconcile=reconcile,
        )
        self.connection = connection
        self.server_info = connection.server_info
        self.trust_annotations = trust_annotations
        self._description_override = description
        self._idempotent_override = idempotent
        self._destructive_override = destructive
        self._owns_connection = owns_connection
        #: Whether to ask before a call (``destructiveHint`` unless overridden): asked until described.
        self.destructive = True if destructive is None else destructive
        if idempotent is not None:
            self.idempotent = idempotent
        #: The tool as the server last described it.
        self.spec: mcp_types.Tool | None = None
        register_tool(self)  # asked about (as destructive) even before it is described

    def apply_spec(self, spec: mcp_types.Tool) -> None:
        """Take the server's description of the tool: its schema, description and hints (after the overrides).

        ``SchemaError`` if the server's input schema is not a valid JSON schema (the tool is unchanged).
        """
        # Described on a copy, then taken in one dict update: a run validating arguments on another
        # thread meanwhile sees the old description or the new one, never half of each.
        hints = tool_hints(
            spec,
            trust_annotations=self.trust_annotations,
            idempotent=self._idempotent_override,
            destructive=self._destructive_override,
        )
        described = copy.copy(self)
        described.spec = spec
        described.description = self._description_override or spec.description or spec.title or ""
        described.parameters = dict(spec.input_schema)
        described.idempotent = hints.idempotent
        described.destructive = hints.destructive
        described.__post_init__()  # checks the server's schema and compiles its validator
        vars(self).update(vars(described))
        register_tool(self)

    def __post_init__(self) -> None:
        super().__post_init__()
        # A subclass that invokes the tool its own way is given the model's arguments alone, as before.
        self.takes_progress = type(self).invoke is Tool.invoke and type(self).invoke_async is MCPTool.invoke_async

    def _listed(self, specs: list[mcp_types.Tool]) -> None:
        spec = next((s for s in specs if s.name == self.name), None)
        if spec is not None and spec != self.spec:
            self.apply_spec(spec)

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The schema of the tool's structured results, as the server describes it (``None``: none given)."""
        return None if self.spec is None else self.spec.output_schema

    def played_result(self, structured_content: Any = None) -> dict[str, Any]:
        """What a call gives when ``agentfsm check`` plays the server instead of calling it: a text saying so.

        ``structured_content`` is the structured result played (an example of ``output_schema``).
        """
        text = mcp_types.TextContent(type="text", text=f"(the result of {self.name}, played by agentfsm check)")
        return result_value(self.name, mcp_types.CallToolResult(content=[text], structured_content=structured_content))

    def warm_up(self) -> None:
        """Connect (once) and take the tool's description; ``MCPToolNotFoundError`` if the server has no such tool."""
        if not self._owns_connection:
            return
        self.connection.open()
        self._check_offered()

    async def warm_up_async(self) -> None:
        """Like ``warm_up``, without blocking the event loop."""
        if not self._owns_connection:
            return
        await self.connection.open_async()
        self._check_offered()

    def _check_offered(self) -> None:
        if self.spec is None:
            raise_not_offered(self.connection, [self.name], "")

    def _call(self, report_progress: ProgressReporter | None = None, **arguments: Any) -> dict[str, Any]:
        # A run someone listens to gives the call a reporter: the server's progress notices are its events.
        return result_value(self.name, self.connection.call(self.name, arguments, _heard(report_progress)))

    async def invoke_async(self, **kwargs: Any) -> Any:
        """Call the tool from an event loop: cancelling the caller cancels the call on the server.

        A subclass that overrides ``invoke`` (and not this) has its ``invoke`` run, in a worker thread.
        """
        if type(self).invoke is not Tool.invoke:
            return await super().invoke_async(**kwargs)
        report = _heard(kwargs.pop(REPORT_PROGRESS, None))
        return result_value(self.name, await self.connection.call_async(self.name, kwargs, report))

    def close(self) -> None:
        """End the session of a tool made alone (a toolset's tools are closed with their toolset)."""
        if self._owns_connection:
            self.connection.close()

    async def close_async(self) -> None:
        """Like ``close``, without blocking the event loop."""
        if self._owns_connection:
            await self.connection.close_async()

    def to_dict(self) -> dict[str, Any]:
        """Serialize the server's configuration and this tool's settings (never a secret)."""
        return {
            "type": object_path(type(self)),
            "data": {
                "name": self.name,
                "description": self._description_override,
                "eager_connect": self.eager_connect,
                "trust_annotations": self.trust_annotations,
                "idempotent": self._idempotent_override,
                "destructive": self._destructive_override,
                **({"retry": self.retry.to_dict()} if self.retry is not None else {}),
                **({"reconcile": object_path(self.reconcile)} if self.reconcile is not None else {}),
                **self.connection.to_dict(),
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> MCPTool:
        """Invert ``to_dict``; the server info's class resolves through the allow-list."""
        fields = data["data"]
        connection = MCPConnection.from_dict(fields, allowed_modules)
        return cls(
            fields["name"],
            connection.server_info,
            fields.get("description"),
            eager_connect=fields.get("eager_connect", False),
            **connection.settings(),
            trust_annotations=fields.get("trust_annotations", True),
            idempotent=fields.get("idempotent"),
            destructive=fields.get("destructive"),
            retry=None if fields.get("retry") is None else Retry.from_dict(fields["retry"], allowed_modules),
            reconcile=reconcile_at(fields.get("reconcile"), allowed_modules),
        )

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.server_info.describe()!r})"
