"""A durable (DBOS) run whose worker is killed during an MCP call: a new worker reconnects and finishes it."""

from __future__ import annotations

from pathlib import Path

from dbos import DBOSClient

from agentfsm import ChatMessage
from tests.durable.test_durable import TIMEOUT, Worker, _env, _wait
from tests.mcp import durable_agents


def test_a_worker_killed_during_an_mcp_call_is_replaced_and_the_call_runs_again(tmp_path: Path) -> None:
    system_db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    marker = tmp_path / "marker"
    env = {**_env(tmp_path), durable_agents.MARKER: str(marker)}
    worker = Worker(system_db, "tests.mcp.durable_agents:sleeper", "w1", env)
    client = DBOSClient(system_database_url=system_db)
    try:
        handle = durable_agents.sleeper.start([ChatMessage.from_user("3")], run_id="m1", client=client)
        _wait(lambda: marker.exists() and marker.read_text() == "started", "the MCP call")
        worker.kill()  # mid-call: its server is left without a client and ends
        worker = Worker(system_db, "tests.mcp.durable_agents:sleeper", "w1", env)
        result = handle.result(timeout=TIMEOUT)
    finally:
        worker.stop()
        client.destroy()
    assert result["last_message"].text == "done: slept"
    assert marker.read_text() == "finished"
