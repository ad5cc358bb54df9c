"""Small agents the checker is tested on (module-level, so ``agentfsm check`` can name them)."""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from pathlib import Path

from agentfsm import Agent, State, hook, tool
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, SimpleConsoleUI
from agentfsm.mcp import MCPToolset, StdioServerInfo
from agentfsm.reconcile import InDoubtCall, Reconciled, Unknown
from agentfsm.testing import RecordedRun, invariant

#: What the payment tools charged, by call: the external system a payment changes.
CHARGES: list[int] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def search(query: str) -> str:
    """Look something up."""
    return f"results for {query}"


@tool
def pay(amount: int) -> str:
    """Charge a card (not idempotent: each run charges again)."""
    CHARGES.append(amount)
    return f"charged {amount}"


@tool(idempotent=True)
def pay_marked_idempotent(amount: int) -> str:
    """Charge a card; wrongly marked idempotent, so a crash makes it charge twice."""
    CHARGES.append(amount)
    return f"charged {amount}"


def look_up_charge(call: InDoubtCall) -> Reconciled:
    """Look a charge in doubt up (the checker's world answers in its place)."""
    return Unknown("no ledger here")


@tool(reconcile=look_up_charge)
def pay_looked_up(amount: int) -> str:
    """Charge a card (not idempotent); a charge in doubt after a crash is looked up."""
    CHARGES.append(amount)
    return f"charged {amount}"


@hook
def count_llm_calls(state: State) -> None:
    """Count the model calls in State."""
    state.set("llm_calls", (state.get("llm_calls") or 0) + 1)


@hook
def keep_going(state: State) -> None:
    """A broken on_exit hook: it keeps the run going past every exit."""
    state.set("continue_run", True)


def confirm() -> BlockingConfirmationStrategy:
    """A strategy that asks about every call (the checker's world answers in its place)."""
    return BlockingConfirmationStrategy(AlwaysAskPolicy(), SimpleConsoleUI())


def _model() -> ScriptedChatGenerator:
    return ScriptedChatGenerator(["unused: the checker answers in the model's place"])


#: 3 tools, a hook and a confirmation strategy: the default check must finish quickly and find nothing.
shop = Agent(
    chat_generator=_model(),
    tools=[add, search, pay],
    state_schema={"llm_calls": {"type": int}},
    hooks={"before_llm": [count_llm_calls]},
    confirmation_strategies={"pay": confirm()},
)

#: A tool agent without hooks or confirmation.
plain = Agent(chat_generator=_model(), tools=[add, search])

#: An on_exit hook that keeps the run going: it never ends on the model's answer.
endless = Agent(chat_generator=_model(), tools=[add], hooks={"on_exit": [keep_going]})

#: A payment tool marked idempotent that is not.
double_charge = Agent(chat_generator=_model(), tools=[pay_marked_idempotent])

#: The same shop with its payment tool not marked idempotent: a call in doubt waits for a decision.
single_charge = Agent(chat_generator=_model(), tools=[pay])


@invariant("each payment call charges once")
def charged_once(run: RecordedRun) -> bool | str:
    """A payment call charges once, whatever crashes happen, unless a decision said to charge again."""
    charged = Counter((e.step, e.call_key) for e in run.tool_executions if e.outcome == "returns")
    again = {(d.step, d.call_key) for d in run.decisions if d.verb == "rerun"}
    twice = [call for call, count in charged.items() if count > 1 and call not in again]
    return not twice or f"charged twice without a decision: {twice}"


#: The tools the runs of a check executed (``tools_executed`` records them).
EXECUTED: list[str] = []


@invariant("records the tools executed")
def tools_executed(run: RecordedRun) -> bool:
    """Record the tools each checked run executed (played or run), and hold."""
    EXECUTED.extend(e.tool_name for e in run.tool_executions)
    return True


def lazy_mcp() -> Agent:
    """An agent whose MCP toolset connects at warm-up; its ``mark`` tool writes to ``$AGENTFSM_TEST_MARKER`` when called."""
    server = Path(__file__).resolve().parents[1] / "mcp" / "hostile_server.py"
    info = StdioServerInfo(command=sys.executable, args=[str(server), "marking", os.environ["AGENTFSM_TEST_MARKER"]])
    return Agent(chat_generator=_model(), tools=[MCPToolset(info)])


#: Set to let ``wait_for_ever`` return (a test sets it when it is done).
RELEASED = threading.Event()


@tool
def wait_for_ever() -> str:
    """A tool that blocks until the test lets it go."""
    RELEASED.wait()
    return "released"


#: An agent whose one tool blocks: a check must bound its calls.
blocking = Agent(chat_generator=_model(), tools=[wait_for_ever])

#: Charges whose calls in doubt are looked up.
reconciling = Agent(chat_generator=ScriptedChatGenerator(["unused"]), tools=[pay_looked_up])
