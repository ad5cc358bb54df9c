"""agentfsm: tool-using LLM agents as explicit, declared finite-state machines.

The names here are the seeds' (Haystack's Agent, State, tools, breakpoints) and what a user needs
every day; ``tests/test_exported_members.py`` pins them. The rest is one import away:
``agentfsm.errors`` (every error and signal, drawn as trees), ``agentfsm.machine`` (the transition tables),
``agentfsm.hitl`` (its decision type: ``agentfsm.decisions``), ``agentfsm.generators``, ``agentfsm.stores``, ``agentfsm.builtin_hooks``,
``agentfsm.durable``, ``agentfsm.mcp``, ``agentfsm.limits``, ``agentfsm.loops``, ``agentfsm.cancellation``. The run's machinery lives in ``agentfsm._core``.
"""

from agentfsm._core.records import TransitionRecord
from agentfsm.agent import Agent
from agentfsm.breakpoints import AgentBreakpoint, Breakpoint, ToolBreakpoint
from agentfsm.cancellation import RunHandle
from agentfsm.errors import (
    AgentFSMError,
    BreakpointException,
    ConfigurationError,
    ModelClientError,
    OutputValidationError,
    RunCancelled,
    SnapshotError,
    StaleSnapshotError,
    StoreError,
    ToolError,
    ToolInvocationError,
)
from agentfsm.guardrails import Guardrail, GuardrailResult, guardrail
from agentfsm.hooks import Hook, hook
from agentfsm.limits import UsageLimits
from agentfsm.logs import configure_logging, use_standard_logging
from agentfsm.loops import LoopDetection
from agentfsm.machine import Phase
from agentfsm.messages import (
    ChatMessage,
    ChatRole,
    ImageContent,
    ReasoningContent,
    StreamingChunk,
    TextContent,
    ToolCall,
    ToolCallResult,
)
from agentfsm.retries import Retry
from agentfsm.snapshot import AgentSnapshot
from agentfsm.state import State, merge_lists, replace_values
from agentfsm.tools import (
    ComponentTool,
    PipelineTool,
    SearchableToolset,
    Tool,
    ToolInvoker,
    Toolset,
    create_tool_from_function,
    tool,
)

__all__ = [
    "Agent",
    "AgentBreakpoint",
    "AgentFSMError",
    "AgentSnapshot",
    "Breakpoint",
    "BreakpointException",
    "ChatMessage",
    "ChatRole",
    "ComponentTool",
    "ConfigurationError",
    "Guardrail",
    "GuardrailResult",
    "Hook",
    "ImageContent",
    "LoopDetection",
    "ModelClientError",
    "OutputValidationError",
    "Phase",
    "PipelineTool",
    "ReasoningContent",
    "Retry",
    "RunCancelled",
    "RunHandle",
    "SearchableToolset",
    "SnapshotError",
    "StaleSnapshotError",
    "State",
    "StoreError",
    "StreamingChunk",
    "TextContent",
    "Tool",
    "ToolBreakpoint",
    "ToolCall",
    "ToolCallResult",
    "ToolError",
    "ToolInvocationError",
    "ToolInvoker",
    "Toolset",
    "TransitionRecord",
    "UsageLimits",
    "configure_logging",
    "create_tool_from_function",
    "guardrail",
    "hook",
    "merge_lists",
    "replace_values",
    "tool",
    "use_standard_logging",
]
