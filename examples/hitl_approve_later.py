"""Approve later, in another process: a run pauses for a human decision, and a reviewer decides.

Run it with ``python examples/hitl_approve_later.py`` (the scripted model: no API key, no network).
The agent wants to make two payments. A BreakpointConfirmationStrategy pauses the run in CONFIRM
and saves its snapshot; a second process (the "reviewer") reads the pending calls from the file,
approves one and rejects the other; the run then completes, and only the approved payment is made.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import (
    BreakpointConfirmationStrategy,
    HITLBreakpointException,
    ToolExecutionDecision,
    call_fingerprint,
    get_tool_calls_and_descriptions_from_snapshot,
)
from agentfsm.snapshot import AgentSnapshot

PAID: list[str] = []


@tool
def pay(to: Annotated[str, "Who is paid"], amount: Annotated[int, "How much, in euros"]) -> str:
    """Send a payment."""
    PAID.append(f"{amount} to {to}")
    return f"paid {amount} to {to}"


def make_agent(snapshot_dir: str, position: int = 0) -> Agent:
    """The paying agent: every payment waits for a decision."""
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(
                tool_calls=[
                    ToolCall("pay", {"to": "ann", "amount": 30}, id="p1"),
                    ToolCall("pay", {"to": "bob", "amount": 9000}, id="p2"),
                ]
            ),
            "Paid Ann; the payment to Bob was refused.",
        ],
        position=position,
    )
    return Agent(
        chat_generator=model,
        tools=[pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(snapshot_dir)},
    )


def reviewer(snapshot_file: str, decisions_file: str) -> None:
    """The second process: read the pending calls, approve small payments, reject large ones."""
    snapshot = AgentSnapshot.from_file(snapshot_file)
    calls, descriptions = get_tool_calls_and_descriptions_from_snapshot(snapshot, breakpoint_tool_only=False)
    decisions = []
    for call in calls:
        print(f"  reviewer: {descriptions[call['tool_name']]} {call['arguments']}")
        fingerprint = call_fingerprint(call["tool_name"], call["arguments"])
        if call["arguments"]["amount"] <= 100:
            decision = ToolExecutionDecision(call["tool_name"], True, call["id"], call_fingerprint=fingerprint)
        else:
            decision = ToolExecutionDecision(
                call["tool_name"], False, call["id"], "over the 100 EUR limit", call_fingerprint=fingerprint
            )
        decisions.append(decision.to_dict())
    Path(decisions_file).write_text(json.dumps(decisions), encoding="utf-8")


def main() -> None:
    """Pause, let another process decide, resume."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            make_agent(tmp).run([ChatMessage.from_user("Pay Ann 30 and Bob 9000.")])
        except HITLBreakpointException as paused:
            print(f"paused: {paused.tool_name} {paused.tool_call_id} waits for a decision")
            snapshot_file = paused.snapshot_file_path
        assert snapshot_file is not None
        decisions_file = str(Path(tmp) / "decisions.json")
        subprocess.run([sys.executable, __file__, "--review", snapshot_file, decisions_file], check=True)
        decisions = [ToolExecutionDecision.from_dict(d) for d in json.loads(Path(decisions_file).read_text())]
        result = make_agent(tmp, position=1).run(snapshot=AgentSnapshot.from_file(snapshot_file), decisions=decisions)
        for message in result["messages"]:
            for r in message.tool_call_results:
                print(f"  tool result {r.origin.id}: {r.result}")
        print(f"paid: {PAID}")
        print(f"assistant: {result['last_message'].text}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--review"]:
        reviewer(sys.argv[2], sys.argv[3])
    else:
        main()
