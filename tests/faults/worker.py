"""Another process that finishes runs: ``python -m tests.faults.worker`` reads one request a line, answers one a line.

A request names the store (``kind``, ``dir``), the run (``None``: a new one) and the effect log;
the answer is the run's id and ``summary`` once ``finish`` took it to its end, or the error that
stopped it. Optional: ``lease_seconds`` (the store's), ``stall`` (``world.STALL``: where this
process stalls) and ``until_failure`` (stop at the first failure: the answer lists the failures
and has no summary). The fault tests start one such process for a whole module and send it every
run to resume "in a new process"; the stalled-worker tests stop one with SIGSTOP.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

from agentfsm.serialization import allow_modules, dump_json, load_json
from agentfsm.stores import JsonFileStore, SnapshotStore, SQLiteSnapshotStore
from tests.faults import world


def store_of(kind: str, directory: str, lease_seconds: float | None = None) -> SnapshotStore:
    """The plain store (no fault layer) of a fault test's directory (``lease_seconds``: the store's default)."""
    lease = {} if lease_seconds is None else {"lease_seconds": lease_seconds}
    if kind == "sqlite":
        return SQLiteSnapshotStore(Path(directory) / "runs.db", durable=True, **lease)
    return JsonFileStore(Path(directory) / "json", durable=True, **lease)


def main() -> None:
    allow_modules("tests")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # a worker's log: the runs' warnings and errors
    for line in sys.stdin.buffer:
        request = load_json(line)
        os.environ[world.EFFECTS] = request["effects"]
        if request.get("stall"):
            os.environ[world.STALL] = request["stall"]
        try:
            store = store_of(request["kind"], request["dir"], request.get("lease_seconds"))
            failures: list[BaseException] = []
            until_failure = bool(request.get("until_failure"))
            run_id, result = world.finish(
                lambda store=store: store,  # type: ignore[misc]
                request["run_id"],
                failures=failures,
                until_failure=until_failure,
            )
            assert result is not None or until_failure
            answer = {
                "run_id": run_id,
                "summary": None if result is None else world.summary(result),
                "failures": [f"{type(f).__name__}: {f}" for f in failures],
            }
        except Exception as exc:  # the test reports it
            answer = {"error": "".join(traceback.format_exception(exc))[-3000:]}
        sys.stdout.buffer.write(dump_json(answer) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
