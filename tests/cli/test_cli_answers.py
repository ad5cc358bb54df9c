"""``agentfsm decide RUN --answer ID=JSON``: a stored run's questions answered from another process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfsm import ChatMessage
from agentfsm.cli import main
from agentfsm.errors import InputBreakpointException
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore
from tests.cli.test_cli import cli

AGENT = ("--agent", "examples.interrupts:transfer_agent")


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``agentfsm ARGS`` run in this process: its exit code and what it printed to stderr."""
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("kind", ["sqlite", "json"])
def test_decide_answers_the_questions_of_a_stored_run(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.interrupts import transfer_agent

    where = tmp_path / "runs.db" if kind == "sqlite" else tmp_path / "runs"
    store = SQLiteSnapshotStore(where, durable=True) if kind == "sqlite" else JsonFileStore(where)
    with pytest.raises(InputBreakpointException) as paused:
        transfer_agent(store, position=0).run([ChatMessage.from_user("Pay the rent.")])
    getattr(store, "close", lambda: None)()
    run_id = paused.value.snapshot.run_id
    source = (run_id, "--store", str(where), *AGENT)

    code, said = in_process(capsys, "decide", *source)
    assert code == 1 and "waits for answers to t1.0: --answer ID=JSON" in said
    code, said = in_process(capsys, "decide", *source, "--answer", "t1.0=savings")
    assert code == 1 and "is not JSON" in said
    code, said = in_process(capsys, "decide", *source, "--answer", 't1.0="gold"')
    assert code == 1 and "does not fit its schema" in said, said
    code, said = in_process(capsys, "decide", *source, "--answer", 't1.0="savings"')
    assert code == 3 and "asks: t1.1: The 6-digit code the bank sent?" in said, said
    assert f"agentfsm decide {run_id}" in said and "--answer ID=JSON" in said
    # The last answer from another process, as a person at another terminal would give it.
    done = cli("decide", *source, "--answer", 't1.1="271828"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Rent is paid."
    rows = json.loads(cli("runs", "--store", str(where), "--json").stdout)
    assert [(r["run_id"], r["status"]) for r in rows] == [(run_id, "done")]
