"""The checkpoint thread of an SQLite store in WAL mode: no commit of a run waits for a checkpoint."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading

#: Commits between two checkpoints: ~1,500 WAL pages here, about SQLite's own default of 1,000 pages.
#: Rarer checkpoints cost less per commit (a page written by many commits is copied once).
CHECKPOINT_EVERY = 1024


class Checkpointer:
    """Checkpoints a WAL database from a background thread, every ``every`` commits and when stopped."""

    def __init__(self, path: str, every: int = CHECKPOINT_EVERY) -> None:
        self._every = every
        self._commits = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=_checkpoint_loop,
            args=(path, self._wake, self._stopping),
            name="agentfsm-sqlite-checkpoint",
            daemon=True,
        )
        self._thread.start()

    def committed(self) -> None:
        """Count a commit; wake the thread every ``every`` commits."""
        self._commits += 1
        if self._commits % self._every == 0:
            self._wake.set()

    def stop(self) -> None:
        """Checkpoint one last time and end the thread."""
        self._stopping.set()
        self._wake.set()
        self._thread.join()


#: Past this size, the checkpoint thread makes the writer start the WAL over (see _checkpoint_loop).
#: Below the WAL's growth between two checkpoints, so that every checkpoint starts it over.
WAL_RESTART_BYTES = 4 * 1024 * 1024


def _checkpoint_loop(path: str, wake: threading.Event, stopping: threading.Event) -> None:
    # A RESTART checkpoint waits for readers of other processes while the writer waits for it:
    # after 0.1 s it gives up (the WAL then grows until they are gone) and the writer goes on.
    # This connection keeps SQLite's default synchronous=FULL, whatever the store's setting: its
    # checkpoints sync the WAL and the database. Measured without those syncs, a commit waited
    # ~15-20 ms at each checkpoint, against ~1 ms with them.
    db = sqlite3.connect(path, isolation_level=None, timeout=0.1)
    try:
        while True:
            wake.wait()
            wake.clear()
            # A failed checkpoint loses nothing: the WAL keeps the commits, and the next one copies them.
            with contextlib.suppress(sqlite3.Error, OSError):
                # PASSIVE copies what it can without waiting for (or blocking) the writer.
                db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                # The writer starts the WAL over only when it finds every frame copied, which never
                # happens while commits keep coming: the WAL would grow without end. Past the limit,
                # RESTART copies the frames added since the passive pass (the writer waits for it, a
                # few milliseconds) and makes the next commit start the WAL from the beginning.
                if os.path.getsize(f"{path}-wal") > WAL_RESTART_BYTES:
                    db.execute("PRAGMA wal_checkpoint(RESTART)")
            if stopping.is_set():
                return
    finally:
        db.close()
