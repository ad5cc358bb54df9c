"""Secrets: API keys that never reach a log, a repr, a snapshot or ``to_dict`` output.

``Secret.from_env_var("OPENAI_API_KEY")`` serializes as the variable's name and reads the value
when it is needed; ``Secret.from_token("sk-...")`` holds the value in memory and refuses to be
serialized (there is nothing safe to write).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from agentfsm.errors import ConfigurationError, SerializationError


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
    def from_dict(cls, data: dict[str, Any]) -> Secret:
        """Invert ``to_dict``."""
        if data.get("type") != "env_var":
            raise ConfigurationError(f"Only environment-variable secrets can be deserialized, got {data!r}.")
        return cls.from_env_var(data["env_vars"], strict=data.get("strict", True))

    def __repr__(self) -> str:
        return "Secret(token=***)" if self._token is not None else f"Secret(env_vars={list(self._env_vars)})"

    def __reduce__(self) -> Any:
        raise SerializationError("Secrets are never pickled.")
