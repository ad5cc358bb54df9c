"""Host and origin names: what a ``Host`` or ``Origin`` header names, and which names a server answers to.

A page on another site can make a browser send requests to ``127.0.0.1``; by rebinding its own
name to that address it can read the answers too, but its requests still carry its name as
``Host`` and its origin as ``Origin``. The review page and the served endpoints check both.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from agentfsm.errors import ConfigurationError

#: The host names a server always answers to: this machine's loopback names (any port).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

#: What an allowed host may be: a DNS name or IPv4 address, or an IPv6 address in brackets.
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?|\[[0-9a-f:.]+\]")


def host_name(host: str) -> str | None:
    """The name in a ``Host`` value (``name``, ``name:port``, ``[v6]:port``), lower-case; None when malformed."""
    name, port = host, ""
    if host.startswith("["):
        name, bracket, port = host.partition("]")
        name += bracket
        if not bracket or (port and not port.startswith(":")):
            return None
        port = port[1:]
    elif ":" in host:
        name, _, port = host.partition(":")
    if not name or (port and not (port.isascii() and port.isdigit())):
        return None
    return name.lower()


def allowed_host_names(allowed_hosts: Iterable[str]) -> frozenset[str]:
    """The names given as ``allowed_hosts``, lower-case, IPv6 addresses bracketed as ``Host`` carries them.

    Raises:
        ConfigurationError: for an entry that is not a host name (a URL, a name with a port).
    """
    names = set()
    for given in allowed_hosts:
        name = given.lower()
        if name.count(":") > 1 and not name.startswith("["):  # a bare IPv6 address
            name = f"[{name}]"
        if not HOST_NAME.fullmatch(name):
            raise ConfigurationError(
                f"Allowed host {given!r} is not a host name: give a name or address as browsers reach the page, "
                "without a scheme, a port or a path (e.g. review.example.com)."
            )
        names.add(name)
    return frozenset(names)


def origin_of(url: str) -> str | None:
    """``host[:port]`` of an ``Origin`` or ``Referer`` value (lower-case), or None for ``null``, another scheme or a malformed one."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        return None
    return parts.netloc.lower()


def allowed_origins_of(origins: Iterable[str]) -> frozenset[str]:
    """The origins given (``scheme://host[:port]``), lower-case, as browsers send them in ``Origin``.

    Raises:
        ConfigurationError: for an entry that is not an origin (no scheme, a path, a user name).
    """
    found = set()
    for given in origins:
        origin = given.lower().rstrip("/")
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or origin_of(origin) is None or parts.path or parts.query:
            raise ConfigurationError(
                f"Allowed origin {given!r} is not an origin: give the scheme, host and port a page is served "
                "from, as browsers send it (e.g. http://localhost:3000)."
            )
        found.add(origin)
    return frozenset(found)


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` (a name or an address, as given to a server) is reachable from this machine only."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
