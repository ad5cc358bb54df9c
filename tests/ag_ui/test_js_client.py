"""The official JavaScript client (@ag-ui/client, run by Node) drives the endpoint through an approval."""

from __future__ import annotations

import json
import subprocess

from agentfsm import Agent
from agentfsm.ag_ui import create_app
from tests.ag_ui.conftest import PAID
from tests.servers import NODE, ROOT, needs_node_package, serving

SCRIPT = ROOT / "tests" / "ag_ui" / "approval_loop.mjs"


def test_the_official_client_runs_a_loop_with_an_approval_in_the_middle(agent: Agent) -> None:
    needs_node_package("@ag-ui/client")
    assert NODE is not None
    with serving(create_app(agent, token="s3cret")) as url:
        done = subprocess.run(
            [NODE, str(SCRIPT), url + "/", "s3cret"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    first, second = seen["first"], seen["second"]
    # The first run streams the model's text and its call, then ends waiting for the approval.
    assert first["error"] is None and first["outcome"] == "interrupt"
    assert first["text"] == "I will pay Ann."
    assert first["events"][0] == "RUN_STARTED" and first["events"][-1] == "RUN_FINISHED"
    assert {"TEXT_MESSAGE_START", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "STEP_STARTED"} <= set(
        first["events"]
    )
    assert first["events"].index("MESSAGES_SNAPSHOT") < first["events"].index("RUN_FINISHED")
    assert "STATE_SNAPSHOT" in first["events"]
    assert seen["pending"] == [{"id": "p1", "reason": "tool_call", "toolCallId": "p1"}]
    # The second run answers it through resume[]: the payment runs once, the model reads its result.
    assert second["error"] is None and second["outcome"] == "success" and seen["left"] == 0
    assert "TOOL_CALL_RESULT" in second["events"] and "TOOL_CALL_START" not in second["events"]
    assert second["text"] == "Done: paid 30 EUR to Ann." and second["result"] == "Done: paid 30 EUR to Ann."
    assert PAID == ["ann:30"]
    # The client's conversation is the run's: the user's message, the call, its result, the answer.
    assert [m["role"] for m in seen["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert seen["messages"][2] == {"role": "tool", "content": "paid 30 EUR to ann", "toolCallId": "p1"}
    assert seen["state"]["tool_call_counts"] == {"pay": 1} and seen["state"]["step_count"] == 2
