"""Files: written atomically, read with errors that name the file."""

from __future__ import annotations

import os
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


def read_file(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of ``path``; ``SnapshotError`` naming ``what`` and the file when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SnapshotError(f"Cannot read {what} {os.fspath(path)!r}: {exc.strerror}.") from None
