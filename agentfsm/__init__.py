"""agentfsm: tool-using LLM agents as explicit, declared finite-state machines."""

from agentfsm.agent import Agent
from agentfsm.errors import (
    AgentFSMError,
    BreakpointException,
    ConfigurationError,
    ConfigurationTypeError,
    DeserializationError,
    MachineError,
    ModelClientError,
    SchemaError,
    SchemaGenerationError,
    ScriptExhaustedError,
    SerializationError,
    SnapshotError,
    ToolArgumentsError,
    ToolError,
    ToolInvocationError,
    ToolNotFoundError,
)
from agentfsm.logs import configure_logging
from agentfsm.machine import TRANSITIONS, Phase, Transition
from agentfsm.messages import (
    ChatMessage,
    ChatRole,
    ReasoningContent,
    StreamingChunk,
    TextContent,
    ToolCall,
    ToolCallResult,
)
from agentfsm.runtime import TransitionRecord
from agentfsm.snapshot import AgentBreakpoint, AgentSnapshot, Breakpoint, ToolBreakpoint
from agentfsm.state import State, merge_lists, replace_values
from agentfsm.tools import ComponentTool, PipelineTool, Tool, ToolInvoker, Toolset, create_tool_from_function, tool

__all__ = [
    "TRANSITIONS",
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
    "ConfigurationTypeError",
    "DeserializationError",
    "MachineError",
    "ModelClientError",
    "Phase",
    "PipelineTool",
    "ReasoningContent",
    "SchemaError",
    "SchemaGenerationError",
    "ScriptExhaustedError",
    "SerializationError",
    "SnapshotError",
    "State",
    "StreamingChunk",
    "TextContent",
    "Tool",
    "ToolArgumentsError",
    "ToolBreakpoint",
    "ToolCall",
    "ToolCallResult",
    "ToolError",
    "ToolInvocationError",
    "ToolInvoker",
    "ToolNotFoundError",
    "Toolset",
    "Transition",
    "TransitionRecord",
    "configure_logging",
    "create_tool_from_function",
    "merge_lists",
    "replace_values",
    "tool",
]
