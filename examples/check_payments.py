"""check_agent finds a real bug: a payment tool marked idempotent that is not.

Marked idempotent, a call that was under way when the process died runs again on resume, without
asking anyone: the card is charged twice. ``check_agent`` kills the run before every write to its
store, resumes it, and checks the invariant the shop states (each payment call charges once); it
reports the shortest path that breaks it, as a regression test and a drawing. Unmarked, a call in
doubt waits for a person's decision instead, and every path passes.

Run it with ``python examples/check_payments.py`` (no API key, no network).
"""

from __future__ import annotations

from collections import Counter

from agentfsm import Agent, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.testing import RecordedRun, check_agent, invariant

#: The payment provider's ledger: one entry per charge.
LEDGER: list[int] = []


@tool(idempotent=True)  # the bug: charging again is not harmless
def pay(amount: int) -> str:
    """Charge the customer's card."""
    LEDGER.append(amount)
    return f"charged {amount} EUR"


@tool
def pay_safely(amount: int) -> str:
    """Charge the customer's card (not idempotent: after a crash, a person decides)."""
    LEDGER.append(amount)
    return f"charged {amount} EUR"


@invariant("each payment call charges once")
def charged_once(run: RecordedRun) -> bool | str:
    """A payment call charges once, whatever crashes happen, unless a person decided to charge again."""
    charged = Counter((e.step, e.call_key) for e in run.tool_executions if e.outcome == "returns")
    again = {(d.step, d.call_key) for d in run.decisions if d.verb == "rerun"}
    twice = [call for call, count in charged.items() if count > 1 and call not in again]
    return not twice or f"charged twice without a decision: {twice}"


def shop(payment_tool: object) -> Agent:
    """The shop's agent: the checker answers in the model's place, so the script is never used."""
    return Agent(chat_generator=ScriptedChatGenerator(["unused"]), tools=[payment_tool])


broken = check_agent(shop(pay), max_steps=1, invariants=[charged_once], progress=False)
print(broken.summary())
[violation] = broken.violations
print(f"violated: {violation.invariant}: {violation.message}")
print(f"the process was killed before write {violation.scenario.crash_at} to the store")
print("regression test:")
print(violation.regression_test)

fixed = check_agent(shop(pay_safely), max_steps=1, invariants=[charged_once], progress=False)
print(f"with pay_safely: {'no violation' if fixed.ok else fixed.violations[0].message}")
