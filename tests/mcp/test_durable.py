"""A durable (DBOS) run whose worker is killed during an MCP call: a new worker reconnects and finishes it."""

from __future__ import annotations

from pathlib import Path

from dbos import DBOSClient

from agentfsm import ChatMessage
from tests.durable.test_durable import TIMEOUT, Worker, _env, _wait
from tests.mcp import durable_agents


def test_a_worker_killed_during_an_mcp_call_is_replaced_and_the_call_runs_again(tmp_path: Path) -> None:
    system_db = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    marker, release = tmp_path / "marker", tmp_path / "release"
    env = {**_env(tmp_path), durable_agents.MARKER: str(marker), durable_agents.RELEASE: str(release)}
    worker = Worker(system_db, "tests.mcp.durable_agents:sleeper", "w1", env)
    client = DBOSClient(system_database_url=system_db)
    try:
        # The call lasts until the test releases it (a minute at most): the kill always comes mid-call.
        handle = durable_agents.sleeper.start([ChatMessage.from_user("60")], run_id="m1", client=client)
        _wait(lambda: marker.exists() and marker.read_text() == "started", "the MCP call")
        worker.kill()  # mid-call: its server is left without a client and ends
        _wait(lambda: marker.read_text() != "started", "the killed worker's MCP server to end the call")
        release.touch()  # the call run again ends at once
        worker = Worker(system_db, "tests.mcp.durable_agents:sleeper", "w1", env)
        result = handle.result(timeout=TIMEOUT)
    finally:
        worker.stop()
        client.destroy()
    assert result["last_message"].text == "done: slept"
    assert marker.read_text() == "finished"
