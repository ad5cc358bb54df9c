"""Files: written atomically, read with errors that name the file."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from agentfsm.errors import SnapshotError


def atomic_write(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary file and an atomic rename (never half a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def exclusive_write(target: Path, data: bytes) -> None:
    """Create ``target`` holding ``data``, whole or not at all; ``FileExistsError`` when it exists already.

    The file is written beside its name and linked to it (a link never replaces a file): no process
    ever sees it empty or half written, even when the writer dies or its write fails between the two.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def read_file(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of ``path``; ``SnapshotError`` naming ``what`` and the file when it cannot be read."""
    try:
        return read_regular(path)
    except OSError as exc:
        raise SnapshotError(f"Cannot read {what} {os.fspath(path)!r}: {exc.strerror}.") from None


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file ``path``, never waiting: a FIFO or a device in its place is an ``OSError``.

    Opening a FIFO for reading waits for a writer, for ever if none comes: the file is opened
    without waiting, and anything but a regular file is refused before it is read.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        return file.read()
