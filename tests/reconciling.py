"""A payment agent whose tool settles its calls in doubt in code: importable by name, for the processes of tests.

The model answers from the conversation alone, so a resumed run in any process gives the same
reply at the same point. The tool writes each charge to the ledger file ``LEDGER`` names (one
line per charge: its idempotency key and amount), and the process dies (``kill -9`` of itself)
``before`` or ``after`` the charge when ``DIE`` says so. Its reconcile function looks the call up
in the ledger, or says it cannot tell while ``LEDGER_DOWN`` is set.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.reconcile import Happened, InDoubtCall, NotHappened, Reconciled, Unknown

#: The ledger file: one ``<idempotency key> <amount>`` line per charge.
LEDGER = "AGENTFSM_TEST_LEDGER"
#: ``before`` or ``after``: the process kills itself while a call runs, before or after its charge.
DIE = "AGENTFSM_TEST_DIE"
#: While set, the reconcile function cannot read the ledger.
LEDGER_DOWN = "AGENTFSM_TEST_LEDGER_DOWN"


def charges(ledger: Path) -> list[str]:
    """The ledger's lines."""
    return ledger.read_text().splitlines() if ledger.exists() else []


def _die_if(moment: str) -> None:
    if os.environ.get(DIE) == moment:
        os.kill(os.getpid(), signal.SIGKILL)


def find_charge(call: InDoubtCall) -> Reconciled:
    """Look the call's charge up in the ledger by its idempotency key."""
    if os.environ.get(LEDGER_DOWN):
        return Unknown("the ledger does not answer")
    for line in charges(Path(os.environ[LEDGER])):
        key, amount = line.split()
        if key == call.idempotency_key:
            return Happened(f"charged {amount}")
    return NotHappened()


@tool(reconcile=find_charge)
def pay(amount: int, idempotency_key: str) -> str:
    """Charge a card (not idempotent)."""
    _die_if("before")
    with open(os.environ[LEDGER], "a", encoding="utf-8") as ledger:
        ledger.write(f"{idempotency_key} {amount}\n")
    _die_if("after")
    return f"charged {amount}"


class PayingModel:
    """``pay N`` from the user -> a call of ``pay``; after its result -> ``done: <result>``."""

    def run(
        self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None
    ) -> dict[str, list[ChatMessage]]:
        last = messages[-1]
        if last.tool_call_result is not None:
            return {"replies": [ChatMessage.from_assistant(f"done: {last.tool_call_result.result}")]}
        amount = int((last.text or "pay 0").split()[-1])
        return {"replies": [ChatMessage.from_assistant(tool_calls=[ToolCall("pay", {"amount": amount}, id="c1")])]}


agent = Agent(chat_generator=PayingModel(), tools=[pay])
