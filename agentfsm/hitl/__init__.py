"""Human-in-the-loop confirmation: CONFIRM is a guard state of the machine.

``Agent(confirmation_strategies={"tool": strategy, ("a", "b"): strategy, "*": strategy})`` sends
the calls a strategy covers through CONFIRM; the most specific key wins (a tool's name, then a
tuple naming it, then ``"*"``). A blocking strategy asks while the run waits; a breakpoint
strategy pauses the run (CONFIRM -> PAUSED) until ``agent.run(snapshot=..., decisions=[...])``.
"""

from agentfsm.decisions import ToolExecutionDecision, call_fingerprint
from agentfsm.errors import DecisionError, HITLBreakpointException
from agentfsm.hitl.breakpoint import get_tool_calls_and_descriptions_from_snapshot
from agentfsm.hitl.policies import AlwaysAskPolicy, AskOncePolicy, ConfirmationPolicy, NeverAskPolicy
from agentfsm.hitl.strategies import (
    BlockingConfirmationStrategy,
    BreakpointConfirmationStrategy,
    ConfirmationStrategy,
)
from agentfsm.hitl.types import ConfirmationUIResult
from agentfsm.hitl.user_interfaces import ConfirmationUI, RichConsoleUI, SimpleConsoleUI

__all__ = [
    "AlwaysAskPolicy",
    "AskOncePolicy",
    "BlockingConfirmationStrategy",
    "BreakpointConfirmationStrategy",
    "ConfirmationPolicy",
    "ConfirmationStrategy",
    "ConfirmationUI",
    "ConfirmationUIResult",
    "DecisionError",
    "HITLBreakpointException",
    "NeverAskPolicy",
    "RichConsoleUI",
    "SimpleConsoleUI",
    "ToolExecutionDecision",
    "call_fingerprint",
    "get_tool_calls_and_descriptions_from_snapshot",
]
