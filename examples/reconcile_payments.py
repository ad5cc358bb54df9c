"""Settling a payment in doubt in code: a process is killed mid-payment, the resumed run asks the bank. No API key.

Run it: ``python examples/reconcile_payments.py``. A worker process runs an agent that pays 25;
the payment tool charges the card (it writes to the bank's ledger, a file) and the process is
killed (``kill -9``) before the result is stored. The call is in doubt: it may have charged. The
tool's reconcile function looks the charge up in the ledger by the call's idempotency key; the
resumed run takes the bank's answer as the call's result, the card is charged once, and the model
reads the result. With the ledger unreachable, the run would pause for a person instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.reconcile import Happened, InDoubtCall, NotHappened, Reconciled, Unknown
from agentfsm.stores import SQLiteSnapshotStore

#: The bank's ledger: one ``<idempotency key> <amount>`` line per charge (a file, so that every process sees it).
LEDGER = "RECONCILE_EXAMPLE_LEDGER"
#: Set in the worker process: it is killed once the card is charged.
DIE_AFTER_CHARGING = "RECONCILE_EXAMPLE_DIE"


def ledger() -> list[str]:
    """The charges the bank recorded."""
    path = Path(os.environ[LEDGER])
    return path.read_text().splitlines() if path.exists() else []


def find_charge(call: InDoubtCall) -> Reconciled:
    """Ask the bank whether the payment in doubt went through (it knows charges by idempotency key)."""
    try:
        charges = dict(line.split() for line in ledger())
    except OSError as exc:
        return Unknown(f"the bank's ledger cannot be read: {exc}")
    if call.idempotency_key in charges:
        return Happened(f"paid {charges[call.idempotency_key]}")  # what pay returns
    return NotHappened()


@tool(reconcile=find_charge)
def pay(amount: int, idempotency_key: str) -> str:
    """Pay an amount by card (not idempotent: paying twice charges twice)."""
    with open(os.environ[LEDGER], "a", encoding="utf-8") as bank:
        bank.write(f"{idempotency_key} {amount}\n")
    if os.environ.get(DIE_AFTER_CHARGING):
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies: the charge is made, its result never stored
    return f"paid {amount}"


SCRIPT = [
    ChatMessage.from_assistant(tool_calls=[ToolCall("pay", {"amount": 25}, id="payment")]),
    "Paid 25 for the order.",
]


def agent(store: SQLiteSnapshotStore, position: int = 0) -> Agent:
    """The paying agent, recording every transition in ``store``."""
    return Agent(chat_generator=ScriptedChatGenerator(SCRIPT, position=position), tools=[pay], snapshot_store=store)


def worker(db: str) -> None:
    """The worker process: start the run (it is killed during the payment)."""
    agent(SQLiteSnapshotStore(db, durable=True)).run([ChatMessage.from_user("Pay 25 for my order.")])


def main() -> None:
    """Kill a worker during the payment, resume the run here, and show the card was charged once."""
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "runs.db")
        os.environ[LEDGER] = str(Path(tmp) / "ledger.txt")
        killed = subprocess.run(
            [sys.executable, __file__, "--worker", db], env={**os.environ, DIE_AFTER_CHARGING: "1"}, check=False
        )
        print(f"worker exited with {killed.returncode} (killed during the payment); the bank has {ledger()}")
        store = SQLiteSnapshotStore(db, durable=True)
        snapshot = store.latest(store.runs()[0].run_id)
        print(f"in doubt after the crash: {snapshot.outcome_unknown_calls()}")

        result = agent(store, position=snapshot.step).run(snapshot=snapshot, take_over=True)
        print(f"the model read: {result['messages'][-2].tool_call_result.result!r}")
        print(f"edges: {' -> '.join(r.trigger for r in result['trace'])}")
        print(result["last_message"].text)
        print(f"charges at the bank: {len(ledger())}")
        assert killed.returncode == -signal.SIGKILL and len(ledger()) == 1
        assert "reconciled" in [r.trigger for r in result["trace"]]
        store.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    else:
        main()
