"""Checking an agent on every path, and a store's record of runs against what their tools did.

``check_agent`` explores, ``replay`` runs one counterexample again; the built-in invariants are
named in ``agentfsm.checking.invariants``. ``check_journal`` checks the record runs left (in a
store, or DBOS) against an ``EffectLog`` their tools kept, by the rules of ``agentfsm.checking.journal.RULES``. ``agentfsm.testing`` re-exports the names a test needs;
see ``docs/checking.md``.
"""

from __future__ import annotations

from agentfsm.checking.explorer import CheckResult, Violation, check_agent, replay
from agentfsm.checking.invariants import BUILTIN_INVARIANTS, Invariant, invariant
from agentfsm.checking.journal import Effect, EffectLog, JournalProblem, JournalReport, RunRecords, check_journal
from agentfsm.checking.record import Decision, HookFiring, ModelInput, RecordedRun, Segment, ToolExecution
from agentfsm.checking.scenario import Scenario

__all__ = [
    "BUILTIN_INVARIANTS",
    "CheckResult",
    "Decision",
    "Effect",
    "EffectLog",
    "HookFiring",
    "Invariant",
    "JournalProblem",
    "JournalReport",
    "ModelInput",
    "RecordedRun",
    "RunRecords",
    "Scenario",
    "Segment",
    "ToolExecution",
    "Violation",
    "check_agent",
    "check_journal",
    "invariant",
    "replay",
]
