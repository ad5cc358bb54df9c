"""Ready hooks: budgets, history compaction, tool-result offloading, and confirmation as a hook.

Each is an ordinary hook on a declared hook point (its class's ``points`` says which): it is
drawn on the agent's diagram, serializes with the agent (``to_dict``/``from_dict``) and, like
every hook, runs exactly once across pauses and resumes.
"""

from agentfsm.builtin_hooks.budget import StepBudgetHook, TokenBudgetHook, total_tokens
from agentfsm.builtin_hooks.compaction import (
    COMPACTED_KEY,
    CompactionHook,
    Compactor,
    EstimatedTokens,
    MessageCount,
    SlidingWindowCompactor,
    SummarizationCompactor,
    ToolResultPruningCompactor,
    estimate_tokens,
)
from agentfsm.builtin_hooks.confirmation import ConfirmationHook
from agentfsm.builtin_hooks.offload import (
    DirectoryToolResultStore,
    ReadOffloadedResultTool,
    SQLiteToolResultStore,
    ToolResultOffloadHook,
    ToolResultStore,
)

__all__ = [
    "COMPACTED_KEY",
    "CompactionHook",
    "Compactor",
    "ConfirmationHook",
    "DirectoryToolResultStore",
    "EstimatedTokens",
    "MessageCount",
    "ReadOffloadedResultTool",
    "SQLiteToolResultStore",
    "SlidingWindowCompactor",
    "StepBudgetHook",
    "SummarizationCompactor",
    "TokenBudgetHook",
    "ToolResultOffloadHook",
    "ToolResultPruningCompactor",
    "ToolResultStore",
    "estimate_tokens",
    "total_tokens",
]
