"""A real PostgreSQL server for tests: Debian's binaries, a cluster in a temporary directory, 127.0.0.1 only.

``make test`` installs the ``postgresql`` package when it is missing. Without it the tests that need
the server are skipped, or fail under CI (``CI`` set), which must run them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def postgres_bindir() -> Path | None:
    """Where Debian's PostgreSQL binaries are, if installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A PostgreSQL cluster of its own, run as the ``postgres`` user when the tests run as root."""

    def __init__(self, bindir: Path, directory: Path, fsync: bool = False) -> None:
        self.bindir, self.data, self.port = bindir, directory / "data", free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        directory.mkdir(parents=True, exist_ok=True)
        if self.user:
            shutil.chown(directory, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "agentfsm", "--auth=trust", "-E", "UTF8", "--no-sync")
        # The tests kill workers, never this server: it need not wait for the disk (a benchmark's does).
        self._options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {directory} -c max_connections=300"
        if not fsync:
            self._options += " -c fsync=off"
        self.start()

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start the server (again) and wait until it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-o", self._options, "-w", "-l", str(self.data / "log"), "start")

    def stop(self) -> None:
        """Stop it at once: every connection is cut."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str) -> str:
        """The URL of ``database`` on this server (DBOS creates it when it launches)."""
        return f"postgresql://agentfsm@127.0.0.1:{self.port}/{database}"


@contextlib.contextmanager
def temporary_server(fsync: bool = False) -> Iterator[PostgresServer]:
    """A PostgreSQL server in a directory of its own (pytest's are closed to the postgres user), removed after."""
    bindir = postgres_bindir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL is not installed (make test installs Debian's postgresql package)")
    directory = Path(tempfile.mkdtemp(prefix="agentfsm-postgres-"))
    try:
        server = PostgresServer(bindir, directory, fsync)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server."""
    if postgres_bindir() is None:
        message = "PostgreSQL is not installed (make test installs Debian's postgresql package)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must run the PostgreSQL tests")
        pytest.skip(message)
    with temporary_server() as server:
        yield server
