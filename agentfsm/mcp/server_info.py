"""Where an MCP server is and how to reach it: a command to start (stdio) or a URL (HTTP).

A server info is configuration only: it serializes with ``to_dict`` (secrets as the names of
their environment variables, never a value) and opens a transport for the SDK's ``Client``.

Credentials written into an HTTP server's URL (``https://user:password@host/mcp``,
``?api_key=...``) are used to connect and shown nowhere: ``describe()``, ``repr`` and every error
message give the URL with them as ``***`` (``redact``), and ``to_dict`` refuses such a URL with
``SerializationError``, as it refuses a token held in memory.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agentfsm.errors import ConfigurationError, ConfigurationTypeError, SerializationError
from agentfsm.secrets import Secret
from agentfsm.serialization import import_path, object_path

#: The read and write streams a transport hands the SDK's client.
Streams = tuple[Any, Any]


def _check_values(name: str, values: Mapping[str, str | Secret] | None) -> None:
    if values is None:
        return
    if not isinstance(values, Mapping):
        raise ConfigurationTypeError(f"{name} must be a dict of strings or Secrets, got {type(values).__name__}.")
    for key, value in values.items():
        if not isinstance(key, str) or not isinstance(value, (str, Secret)):
            raise ConfigurationTypeError(f"{name}[{key!r}] must be a string or a Secret, got {type(value).__name__}.")


def _resolve(values: Mapping[str, str | Secret] | None) -> dict[str, str]:
    """The values to send: each Secret read now (a non-strict secret that is not set is left out)."""
    resolved: dict[str, str] = {}
    for key, value in (values or {}).items():
        text = value.resolve_value() if isinstance(value, Secret) else value
        if text is not None:
            resolved[key] = text
    return resolved


def _values_to_dict(values: Mapping[str, str | Secret] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    return {k: {"secret": v.to_dict()} if isinstance(v, Secret) else v for k, v in values.items()}


def _values_from_dict(data: Mapping[str, Any] | None) -> dict[str, str | Secret] | None:
    if data is None:
        return None
    return {k: Secret.from_dict(v["secret"]) if isinstance(v, dict) else v for k, v in data.items()}


#: Words in a query parameter's name that make its value a credential (``api_key``, ``access_token``...).
_CREDENTIAL_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "sig", "credential", "session")
_HIDDEN = "***"


def _url_credentials(url: str) -> list[str]:
    """The credentials written into ``url``: its user name and password, and the values of its query's credential parameters."""
    parts = urlsplit(url)
    found = [part for part in (parts.username, parts.password) if part]
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if value and any(word in name.lower() for word in _CREDENTIAL_WORDS):
            found.append(value)
    return found


def redacted_url(url: str) -> str:
    """``url`` with its user name, password and every query value shown as ``***``: what messages show of it."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    if parts.username or parts.password:
        netloc = f"{_HIDDEN}@{netloc}"
    query = "&".join(
        f"{name.partition('=')[0]}={_HIDDEN}" if "=" in name else name for name in parts.query.split("&") if name
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class MCPServerInfo:
    """Base class of server infos: how to open a transport to one MCP server."""

    def redact(self, text: str) -> str:
        """``text`` (an error's message) with this server's credentials shown as ``***``."""
        return text

    def holds_credentials(self) -> bool:
        """Whether the server's address holds credentials that ``redact`` hides (a URL's ``user:password@``...)."""
        return False

    def transport(self) -> Any:
        """An async context manager that yields the (read, write) streams of a new connection."""
        raise NotImplementedError(f"{type(self).__name__} must implement transport().")

    def describe(self) -> str:
        """The server in a few words for error messages (never a secret)."""
        raise NotImplementedError(f"{type(self).__name__} must implement describe().")

    def to_dict(self) -> dict[str, Any]:
        """Serialize (the subclass's configuration)."""
        raise NotImplementedError(f"{type(self).__name__} must implement to_dict().")


@dataclass
class StdioServerInfo(MCPServerInfo):
    """A server started as a child process that speaks MCP over its stdin and stdout.

    ``env`` is added to a minimal default environment (``PATH``, ``HOME`` …, as the SDK does); a
    value may be a ``Secret`` (read when the process starts). The process's stderr goes to ours.
    """

    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str | Secret] | None = None
    cwd: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise ConfigurationError(f"StdioServerInfo needs a command (a non-empty string), got {self.command!r}.")
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            raise ConfigurationTypeError(f"StdioServerInfo args must be a list of strings, got {self.args!r}.")
        _check_values("StdioServerInfo env", self.env)

    def transport(self) -> Any:
        """The SDK's stdio transport: starts the process; closing it ends the process and its children."""
        parameters = StdioServerParameters(command=self.command, args=self.args, env=_resolve(self.env), cwd=self.cwd)
        return stdio_client(parameters, errlog=sys.stderr)

    def describe(self) -> str:
        """The command line."""
        return " ".join([self.command, *self.args])

    def to_dict(self) -> dict[str, Any]:
        """Serialize; ``Secret`` values as their environment variables' names."""
        return {
            "type": object_path(type(self)),
            "command": self.command,
            "args": list(self.args),
            "env": _values_to_dict(self.env),
            "cwd": self.cwd,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StdioServerInfo:
        """Invert ``to_dict``."""
        return cls(
            command=data["command"],
            args=list(data.get("args") or []),
            env=_values_from_dict(data.get("env")),
            cwd=data.get("cwd"),
        )


@dataclass(repr=False)
class _HttpServerInfo(MCPServerInfo):
    """What the HTTP transports share: a URL, a bearer token and headers that may be secrets."""

    url: str
    token: Secret | None = None
    headers: dict[str, str | Secret] | None = None
    timeout: float = 30.0

    def __post_init__(self) -> None:
        kind = type(self).__name__
        try:
            parts = urlsplit(self.url) if isinstance(self.url, str) else None
        except ValueError:  # an unreadable host or port
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            shown = (
                redacted_url(self.url) if isinstance(self.url, str) and parts is not None else type(self.url).__name__
            )
            raise ConfigurationError(f"{kind} needs an http(s) URL, got {shown!r}.")
        if self.token is not None and not isinstance(self.token, Secret):
            raise ConfigurationTypeError(
                f"{kind} token must be a Secret (Secret.from_env_var('MY_TOKEN')), so that it is never written "
                f"out; got {type(self.token).__name__}."
            )
        _check_values(f"{kind} headers", self.headers)
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or self.timeout <= 0:
            raise ConfigurationError(f"{kind} timeout must be a number > 0, got {self.timeout!r}.")

    def resolved_headers(self) -> dict[str, str]:
        """The headers to send, secrets read now, with ``Authorization: Bearer <token>`` when there is a token."""
        headers = _resolve(self.headers)
        if self.token is not None:
            token = self.token.resolve_value()
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    def describe(self) -> str:
        """The URL, its credentials (user name, password, query values) shown as ``***``."""
        return redacted_url(self.url)

    def redact(self, text: str) -> str:
        """``text`` with the credentials of the URL (as written, and percent-decoded) shown as ``***``."""
        for credential in sorted(_url_credentials(self.url), key=len, reverse=True):
            text = text.replace(credential, _HIDDEN)
            text = text.replace(unquote(credential), _HIDDEN)
        return text.replace(self.url, self.describe())

    def holds_credentials(self) -> bool:
        """Whether the URL holds credentials: a user name or password, or a query parameter such as ``api_key``."""
        return bool(_url_credentials(self.url))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.describe()!r})"

    def to_dict(self) -> dict[str, Any]:
        """Serialize; the token and ``Secret`` headers as their environment variables' names.

        Raises:
            SerializationError: the URL holds credentials (``user:password@``, ``?api_key=``), which
                are never written out.
        """
        if self.holds_credentials():
            raise SerializationError(
                f"The URL of MCP server {self.describe()} holds credentials (a user name or password, or a query "
                "parameter such as api_key), which are never written out: give them as "
                "token=Secret.from_env_var(...) or headers={...: Secret.from_env_var(...)} instead."
            )
        return {
            "type": object_path(type(self)),
            "url": self.url,
            "token": None if self.token is None else self.token.to_dict(),
            "headers": _values_to_dict(self.headers),
            "timeout": self.timeout,
        }

    @classmethod
    def _fields_from_dict(cls, data: dict[str, Any]) -> dict[str, Any]:
        token = data.get("token")
        return {
            "url": data["url"],
            "token": None if token is None else Secret.from_dict(token),
            "headers": _values_from_dict(data.get("headers")),
            "timeout": data.get("timeout", 30.0),
        }


@dataclass(repr=False)
class StreamableHttpServerInfo(_HttpServerInfo):
    """A server reached over MCP's streamable HTTP transport at ``url``.

    ``token`` is sent as ``Authorization: Bearer <token>``; ``headers`` are added to every request
    (values may be ``Secret``). ``timeout`` (Haystack's name) bounds each HTTP request's connect
    and write; a response stream may stay open as long as the call it answers (the call has its
    own timeout). The toolset's ``connection_timeout`` bounds opening the whole session.
    """

    @asynccontextmanager
    async def transport(self) -> AsyncIterator[Streams]:
        """The SDK's streamable HTTP transport over an HTTP client that sends the headers."""
        # A response stream may stay open as long as the tool runs: reads are bounded by the call's timeout.
        timeout = httpx2.Timeout(self.timeout, read=None)
        async with (
            httpx2.AsyncClient(headers=self.resolved_headers(), timeout=timeout) as client,
            streamable_http_client(self.url, http_client=client) as streams,
        ):
            yield streams

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamableHttpServerInfo:
        """Invert ``to_dict``."""
        return cls(**cls._fields_from_dict(data))


@dataclass(repr=False)
class SSEServerInfo(_HttpServerInfo):
    """A server reached over MCP's older HTTP+SSE transport (deprecated by MCP; for servers that only have it).

    As for ``StreamableHttpServerInfo``; ``sse_read_timeout`` is how long the event stream may stay
    silent before it counts as dropped (the next call then reconnects).
    """

    sse_read_timeout: float = 300.0

    def transport(self) -> Any:
        """The SDK's SSE transport."""
        return sse_client(
            self.url, headers=self.resolved_headers(), timeout=self.timeout, sse_read_timeout=self.sse_read_timeout
        )

    def to_dict(self) -> dict[str, Any]:
        """Serialize; the token and ``Secret`` headers as their environment variables' names."""
        return {**super().to_dict(), "sse_read_timeout": self.sse_read_timeout}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SSEServerInfo:
        """Invert ``to_dict``."""
        return cls(**cls._fields_from_dict(data), sse_read_timeout=data.get("sse_read_timeout", 300.0))


def server_info_from_dict(data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> MCPServerInfo:
    """Deserialize any server info from its ``to_dict`` output (the class through the allow-list)."""
    cls = import_path(data["type"], allowed_modules)
    if not (isinstance(cls, type) and issubclass(cls, MCPServerInfo)):
        raise ConfigurationError(f"{data['type']!r} is not an MCP server info class.")
    info: MCPServerInfo = cls.from_dict(data)  # type: ignore[attr-defined]
    return info
