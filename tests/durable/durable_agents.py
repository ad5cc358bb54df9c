"""Durable agents for the tests of agentfsm.durable: importable by name, so that worker processes run them.

Their model answers from the conversation alone (as a real model does), so that any worker, in any
process and after any crash, gives the same reply at the same point of a run. Their tools log each
attempt and each effect to the files named by environment variables, so that a test can count
them across processes, and each time a call did its work to the effect log (``JOURNAL``) that
``agentfsm.testing.check_journal`` reads.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.durable import DurableAgent
from agentfsm.hitl import BreakpointConfirmationStrategy
from agentfsm.interrupts import AskUser
from agentfsm.reconcile import Happened, InDoubtCall, NotHappened, Reconciled
from agentfsm.testing import EffectLog

#: A file of one line per tool attempt: ``<label> <idempotency key>``.
ATTEMPTS = "AGENTFSM_TEST_ATTEMPTS"
#: A SQLite file whose ``effects`` table holds one row per call's effect (by idempotency key).
EFFECTS = "AGENTFSM_TEST_EFFECTS"
#: An ``EffectLog``: one line each time a call did its work (the idempotent tool may do it again).
JOURNAL = "AGENTFSM_TEST_JOURNAL"
#: While the file it names exists, a call whose label ends in ``-slow`` waits (a worker can be killed there).
BLOCK = "AGENTFSM_TEST_BLOCK"


class TurnModel:
    """Replies from the conversation: the user's ``N`` -> calls ``N-a``, ``N-b`` (and ``N-slow``), then a summary."""

    def __init__(self, slow: bool = False, tool: str = "effect", argument: str = "label") -> None:
        self.slow = slow
        self.tool = tool
        self.argument = argument

    def run(
        self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None
    ) -> dict[str, list[ChatMessage]]:
        last = messages[-1]
        if last.role.value == "user":
            n = last.text
            labels = [f"{n}-a", f"{n}-b"] + ([f"{n}-slow"] if self.slow else [])
            calls = [ToolCall(self.tool, {self.argument: label}, id=f"call-{label}") for label in labels]
            return {"replies": [ChatMessage.from_assistant(tool_calls=calls)]}
        results = [m.tool_call_result.result for m in messages if m.tool_call_result is not None]
        return {"replies": [ChatMessage.from_assistant("done: " + ", ".join(str(r) for r in results))]}


def _attempt(label: str, key: str) -> None:
    path = os.environ.get(ATTEMPTS)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{label} {key}\n")
    block = os.environ.get(BLOCK)
    while label.endswith("-slow") and block and Path(block).exists():
        time.sleep(0.02)


def _effect(tool_name: str, label: str, key: str) -> None:
    journal = os.environ.get(JOURNAL)
    if journal:
        EffectLog(journal).record(key, tool_name, label.upper())
    path = os.environ.get(EFFECTS)
    if path:
        with sqlite3.connect(path, timeout=30) as db:
            db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, label TEXT)")
            db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (key, label))


@tool(idempotent=True)
def effect(label: str, idempotency_key: str) -> str:
    """Do the call's effect once, by its idempotency key (a second attempt finds it done)."""
    _attempt(label, idempotency_key)
    _effect("effect", label, idempotency_key)
    return label.upper()


@tool
def once(label: str, idempotency_key: str) -> str:
    """Like ``effect``, for a tool that is not idempotent: an attempt in doubt waits for a decision."""
    _attempt(label, idempotency_key)
    _effect("once", label, idempotency_key)
    return label.upper()


def _effect_done(key: str) -> str | None:
    """The label of the effect recorded under ``key``, if any."""
    path = os.environ.get(EFFECTS)
    if not path or not Path(path).exists():
        return None
    with sqlite3.connect(path, timeout=30) as db:
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, label TEXT)")
        row = db.execute("SELECT label FROM effects WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def find_effect(call: InDoubtCall) -> Reconciled:
    """Look the call's effect up by its idempotency key: done, with the tool's result, or not."""
    label = _effect_done(call.idempotency_key)
    return NotHappened() if label is None else Happened(label.upper())


@tool(reconcile=find_effect)
def charge_first(label: str, idempotency_key: str) -> str:
    """Not idempotent: its effect comes first, then the attempt is logged (a slow one waits there)."""
    _effect("charge_first", label, idempotency_key)
    _attempt(label, idempotency_key)
    return label.upper()


@tool(idempotent=True)
def which_account(label: str, ask_user: AskUser) -> str:
    """Ask a person which account pays (asked before any effect: running it again repeats nothing)."""
    account = ask_user(f"Which account pays {label}?", {"type": "string", "enum": ["savings", "checking"]})
    return f"{label} from {account}"


def _agent(model: TurnModel, tools: list[Any], **kwargs: Any) -> Agent:
    return Agent(chat_generator=model, tools=tools, tool_concurrency=4, **kwargs)


#: Two parallel calls per run: the workload of the many-workers test.
parallel = DurableAgent(_agent(TurnModel(), [effect]), "parallel")
#: Three parallel calls, one slow: a worker can be killed while it runs.
killable = DurableAgent(_agent(TurnModel(slow=True), [effect]), "killable")
#: The same, with a tool that is not idempotent.
killable_once = DurableAgent(_agent(TurnModel(slow=True, tool="once"), [once]), "killable_once")
#: The same, with a tool whose reconcile function finds the effect of a call in doubt.
killable_reconciled = DurableAgent(
    _agent(TurnModel(slow=True, tool="charge_first"), [charge_first]), "killable_reconciled"
)
#: Each of its two parallel calls asks a person a question (the run pauses for their answers).
asking = DurableAgent(_agent(TurnModel(tool="which_account"), [which_account]), "asking")
#: Every call waits for a person's decision (the run pauses; no snapshot file is written).
confirmed = DurableAgent(
    _agent(TurnModel(), [effect], confirmation_strategies={"effect": BreakpointConfirmationStrategy("")}),
    "confirmed",
)
