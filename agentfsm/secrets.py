"""Secrets: API keys that never reach a log, a repr, a snapshot or ``to_dict`` output.

``Secret.from_env_var("OPENAI_API_KEY")`` serializes as the variable's name and reads the value
when it is needed; ``Secret.from_token("sk-...")`` holds the value in memory and refuses to be
serialized (there is nothing safe to write).

A secret read back from data (``Secret.from_dict``) may name only environment variables the user
allowed, so that an untrusted document cannot send any variable of the process to a server of its
choosing. The variables a model client reads by default (``OPENAI_API_KEY``...) are allowed where
that client is rebuilt; users allow others like modules:

- process-wide: ``agentfsm.secrets.allow_env_vars("MY_KEY")``
- by environment: ``AGENTFSM_ALLOWED_ENV_VARS=MY_KEY,OTHER_KEY``

Nor may such a document choose where the key goes: a model client read back from data sends its
key only to its API's own server, a loopback address (the key stays on the machine) or a server
the user allowed (``allow_endpoints("https://llm.internal:8443")``, ``AGENTFSM_ALLOWED_ENDPOINTS``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from agentfsm.errors import ConfigurationError, DeserializationError, SerializationError

ENV_ALLOWED_ENV_VARS = "AGENTFSM_ALLOWED_ENV_VARS"
ENV_ALLOWED_ENDPOINTS = "AGENTFSM_ALLOWED_ENDPOINTS"
_user_allowed: set[str] = set()
_user_endpoints: set[str] = set()
_DEFAULT_PORTS = {"http": 80, "https": 443}


def allow_env_vars(*names: str) -> None:
    """Allow secrets read back from data (``Secret.from_dict``) to name the environment variables ``names``."""
    for name in names:
        if not isinstance(name, str) or not name or "," in name:
            raise ValueError(f"{name!r} is not an environment variable name; pass names such as 'MY_API_KEY'.")
        _user_allowed.add(name)


def allowed_env_vars(extra: Iterable[str] = ()) -> frozenset[str]:
    """All variable names secrets read from data may name (process-wide, environment and ``extra``)."""
    env = [n.strip() for n in os.environ.get(ENV_ALLOWED_ENV_VARS, "").split(",") if n.strip()]
    return frozenset((*_user_allowed, *env, *extra))


def origin(url: str) -> str | None:
    """``scheme://host:port`` of ``url`` (lowercased, the default port written out); ``None`` if it has none."""
    parts = httpx.URL(url) if "://" in url else None
    if parts is None or parts.scheme not in _DEFAULT_PORTS or not parts.host:
        return None
    host = f"[{parts.host}]" if ":" in parts.host else parts.host
    return f"{parts.scheme}://{host}:{parts.port or _DEFAULT_PORTS[parts.scheme]}"


def allow_endpoints(*urls: str) -> None:
    """Allow model clients read back from data to send their key to the servers of ``urls`` (their origins)."""
    for url in urls:
        found = origin(url) if isinstance(url, str) else None
        if found is None:
            raise ValueError(f"{url!r} is not an http(s) URL; pass URLs such as 'https://llm.internal:8443'.")
        _user_endpoints.add(found)


def endpoint_allowed(url: str, own: str) -> bool:
    """Whether a client read back from data may send its key to ``url``: its API's ``own`` server, loopback, or allowed."""
    target = origin(url)
    if target is None:
        return False
    if target == origin(own) or _is_loopback(httpx.URL(url).host):
        return True
    env = (origin(u.strip()) for u in os.environ.get(ENV_ALLOWED_ENDPOINTS, "").split(",") if u.strip())
    return target in _user_endpoints or target in set(env)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Secret:
    """A value that is needed to talk to a service and must never be shown or stored."""

    __slots__ = ("_env_vars", "_strict", "_token")

    def __init__(self, *, token: str | None = None, env_vars: Sequence[str] = (), strict: bool = True) -> None:
        if (token is None) == (not env_vars):
            raise ConfigurationError("A Secret is a token or environment variable names, not both and not neither.")
        self._token = token
        self._env_vars = tuple(env_vars)
        self._strict = strict

    @classmethod
    def from_token(cls, token: str) -> Secret:
        """A secret held in memory (it cannot be serialized)."""
        if not isinstance(token, str) or not token:
            raise ConfigurationError("Secret.from_token needs a non-empty string.")
        return cls(token=token)

    @classmethod
    def from_env_var(cls, env_vars: str | Sequence[str], *, strict: bool = True) -> Secret:
        """A secret read from the first of ``env_vars`` that is set, when it is needed.

        With ``strict=False`` a secret none of whose variables is set resolves to ``None`` (for
        servers that need no key) instead of raising.
        """
        names = [env_vars] if isinstance(env_vars, str) else list(env_vars)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigurationError("Secret.from_env_var needs one or more environment variable names.")
        return cls(env_vars=names, strict=strict)

    def resolve_value(self) -> str | None:
        """The secret's value: the token, or the first set variable (``ConfigurationError`` if none is, when strict)."""
        if self._token is not None:
            return self._token
        for name in self._env_vars:
            value = os.environ.get(name)
            if value:
                return value
        if self._strict:
            raise ConfigurationError(f"None of the environment variables {list(self._env_vars)} is set.")
        return None

    def to_dict(self) -> dict[str, Any]:
        """The variable names (never a value); a token-held secret cannot be serialized."""
        if self._token is not None:
            raise SerializationError(
                "A Secret made with from_token cannot be serialized: use Secret.from_env_var so that only the "
                "variable's name is stored."
            )
        return {"type": "env_var", "env_vars": list(self._env_vars), "strict": self._strict}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, also_allowed: Iterable[str] = ()) -> Secret:
        """Invert ``to_dict``; the variables must be allowed (``allow_env_vars``) or in ``also_allowed``.

        Raises:
            DeserializationError: ``data`` is not a serialized secret, or names a variable not allowed.
        """
        if not isinstance(data, dict) or data.get("type") != "env_var":
            raise DeserializationError(
                f"Only environment-variable secrets can be deserialized ({{'type': 'env_var', 'env_vars': [...]}}), "
                f"got {type(data).__name__}."
            )
        names, strict = data.get("env_vars"), data.get("strict", True)
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise DeserializationError("A serialized secret's 'env_vars' must be a non-empty list of names.")
        if not isinstance(strict, bool):
            raise DeserializationError(f"A serialized secret's 'strict' must be a bool, got {type(strict).__name__}.")
        allowed = allowed_env_vars(also_allowed)
        refused = [n for n in names if n not in allowed]
        if refused:
            raise DeserializationError(
                f"The data names the environment variable(s) {refused}, which are not allowed to be read into a "
                f"secret (an untrusted document could send any variable to a server it chooses). Allow them with "
                f"agentfsm.secrets.allow_env_vars({refused[0]!r}) or {ENV_ALLOWED_ENV_VARS}={','.join(refused)}."
            )
        return cls.from_env_var(names, strict=strict)

    def __repr__(self) -> str:
        return "Secret(token=***)" if self._token is not None else f"Secret(env_vars={list(self._env_vars)})"

    def __reduce__(self) -> Any:
        raise SerializationError("Secrets are never pickled.")
