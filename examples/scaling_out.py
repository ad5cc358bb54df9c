"""Durable runs across processes: a worker runs them from a DBOS queue; a person approves a payment later.

Run it with ``python examples/scaling_out.py`` (a SQLite system database in a temporary directory;
no API key, no network), or ``python examples/scaling_out.py postgresql://user@host/db``. It starts
``agentfsm worker --agent examples.durable_clerk:durable ...`` in a process of its own, puts three runs
on the queue as an application would, and approves the one that waits with ``agentfsm decide``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def agentfsm(*args: str) -> list[str]:
    """The command line ``agentfsm ARGS...``."""
    return [sys.executable, "-m", "agentfsm.cli", *args]


if __name__ == "__main__":
    from dbos import DBOSClient

    sys.path.insert(0, str(ROOT))
    from agentfsm import ChatMessage
    from examples.durable_clerk import durable

    tmp = tempfile.mkdtemp()
    url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tmp}/dbos.sqlite"
    log = Path(tmp) / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            agentfsm(
                "worker", "--agent", "examples.durable_clerk:durable", "--system-db", url, "--executor-id", "worker-1"
            ),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        while "running" not in log.read_text():  # the worker says so once DBOS is launched
            time.sleep(0.1)
        client = DBOSClient(system_database_url=url)
        suffix = str(time.time_ns())
        handles = [
            durable.start([ChatMessage.from_user(text)], run_id=f"{name}-{suffix}", client=client)
            for name, text in (("ann", "balance ann"), ("bob", "balance bob"), ("rent", "pay landlord 900"))
        ]
        for handle in handles:
            try:
                print(f"{handle.run_id.split('-')[0]}: {handle.result()['last_message'].text}")
            except Exception as paused:  # HITLBreakpointException: the run waits, as rows in the database
                print(f"{handle.run_id.split('-')[0]}: waiting: {paused}".split(" (")[0])
        listing = subprocess.run(agentfsm("runs", "--system-db", url), capture_output=True, text=True, check=True)
        print(
            "paused runs:",
            [line.split()[0].split("-")[0] for line in listing.stdout.splitlines() if " paused " in line],
        )
        approved = subprocess.run(
            agentfsm("decide", f"rent-{suffix}", "--system-db", url, "--approve-all"),
            capture_output=True,
            text=True,
            check=True,
        )
        print(approved.stdout.strip().replace(f"-{suffix}", ""))
        print(
            "rent:",
            durable.outcome(client.retrieve_workflow(f"rent-{suffix}/1").get_result(), f"rent-{suffix}/1")[
                "last_message"
            ].text,
        )
        client.destroy()
    finally:
        worker.terminate()
        worker.wait(30)
