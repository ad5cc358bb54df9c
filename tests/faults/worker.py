"""Another process that finishes runs: ``python -m tests.faults.worker`` reads one request a line, answers one a line.

A request names the store (``kind``, ``dir``), the run and the effect log; the answer is the run's
``summary`` once ``finish`` took it to its end, or the error that stopped it. The fault tests start
one such process for a whole module and send it every run to resume "in a new process".
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from agentfsm.serialization import allow_modules, dump_json, load_json
from agentfsm.stores import JsonFileStore, SnapshotStore, SQLiteSnapshotStore
from tests.faults import world


def store_of(kind: str, directory: str) -> SnapshotStore:
    """The plain store (no fault layer) of a fault test's directory."""
    if kind == "sqlite":
        return SQLiteSnapshotStore(Path(directory) / "runs.db", durable=True)
    return JsonFileStore(Path(directory) / "json", durable=True)


def main() -> None:
    allow_modules("tests")
    for line in sys.stdin.buffer:
        request = load_json(line)
        os.environ[world.EFFECTS] = request["effects"]
        try:
            store = store_of(request["kind"], request["dir"])
            run_id, result = world.finish(lambda store=store: store, request["run_id"])  # type: ignore[misc]
            assert result is not None
            answer = {"run_id": run_id, "summary": world.summary(result)}
        except Exception as exc:  # the test reports it
            answer = {"error": "".join(traceback.format_exception(exc))[-3000:]}
        sys.stdout.buffer.write(dump_json(answer) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
