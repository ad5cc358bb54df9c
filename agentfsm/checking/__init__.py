"""Checking an agent on every path: bounded exhaustive exploration, invariants and counterexamples.

``check_agent`` explores, ``replay`` runs one counterexample again; the built-in invariants are
named in ``agentfsm.checking.invariants``. ``agentfsm.testing`` re-exports the names a test needs;
see ``docs/checking.md``.
"""

from __future__ import annotations

from agentfsm.checking.explorer import CheckResult, Violation, check_agent, replay
from agentfsm.checking.invariants import BUILTIN_INVARIANTS, Invariant, invariant
from agentfsm.checking.record import Decision, HookFiring, ModelInput, RecordedRun, Segment, ToolExecution
from agentfsm.checking.scenario import Scenario

__all__ = [
    "BUILTIN_INVARIANTS",
    "CheckResult",
    "Decision",
    "HookFiring",
    "Invariant",
    "ModelInput",
    "RecordedRun",
    "Scenario",
    "Segment",
    "ToolExecution",
    "Violation",
    "check_agent",
    "invariant",
    "replay",
]
