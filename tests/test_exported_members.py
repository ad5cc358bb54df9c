"""The public surface: what each public package exports, pinned.

Like httpx's test of the same name: ``__all__`` is sorted, complete (every public name a package
defines or imports is listed, or starts with ``_``), every listed name imports, and the lists
match the ones below, so a name is added or removed on purpose. ``agentfsm`` holds the seeds'
names (Haystack's Agent, State, tools, breakpoints) and what a user needs every day.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

#: The seeds' names, as documented (``from agentfsm import ...``).
SEEDS = {
    "Agent", "State", "merge_lists", "replace_values", "ChatMessage", "ChatRole", "ToolCall", "ToolCallResult",
    "StreamingChunk", "Tool", "Toolset", "tool", "create_tool_from_function", "ComponentTool", "PipelineTool",
    "SearchableToolset", "ToolInvoker", "hook", "Phase", "AgentSnapshot", "Breakpoint", "ToolBreakpoint",
    "AgentBreakpoint", "BreakpointException",
}  # fmt: skip
HITL_SEEDS = {
    "AlwaysAskPolicy", "NeverAskPolicy", "AskOncePolicy", "BlockingConfirmationStrategy",
    "BreakpointConfirmationStrategy", "ConfirmationUIResult", "ToolExecutionDecision", "HITLBreakpointException",
    "RichConsoleUI", "SimpleConsoleUI", "ConfirmationPolicy", "ConfirmationStrategy", "ConfirmationUI",
    "get_tool_calls_and_descriptions_from_snapshot",
}  # fmt: skip
GENERATOR_SEEDS = {"ChatGenerator", "ScriptedChatGenerator", "OpenAIChatGenerator", "AnthropicChatGenerator"}

EXPECTED: dict[str, tuple[str, ...]] = {
    "agentfsm": (
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
    ),
    "agentfsm.tools": (
        "ComponentTool",
        "PipelineTool",
        "ProgressReporter",
        "SearchableToolset",
        "Tool",
        "ToolInvoker",
        "Toolset",
        "create_tool_from_function",
        "tool",
    ),
    "agentfsm.hitl": (
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
    ),
    "agentfsm.generators": (
        "AnthropicChatGenerator",
        "CassetteChatGenerator",
        "CassetteMismatchError",
        "ChatGenerator",
        "FallbackChatGenerator",
        "OpenAIChatGenerator",
        "ScriptedChatGenerator",
        "StreamingCallback",
    ),
    "agentfsm.stores": (
        "DurableSnapshotStore",
        "EventStore",
        "JsonFileStore",
        "RunDelta",
        "RunInfo",
        "SQLiteSnapshotStore",
        "SnapshotInfo",
        "SnapshotStore",
        "StoredEvent",
        "ThreadInfo",
        "ThreadStore",
        "ThreadTurn",
    ),
    "agentfsm.durable": (
        "DEFAULT_QUEUE",
        "DurableAgent",
        "DurableRun",
        "DurableRuns",
        "RunRecord",
        "cancel",
        "continue_run",
        "decide",
        "find_run",
        "launch",
        "list_runs",
        "resume_cancelled",
    ),
    "agentfsm.mcp": (
        "AskDestructiveMCPToolsPolicy",
        "ConnectionState",
        "MCPConnection",
        "MCPConnectionError",
        "MCPConnectionLostError",
        "MCPServerError",
        "MCPServerInfo",
        "MCPTimeoutError",
        "MCPTool",
        "MCPToolError",
        "MCPToolNotFoundError",
        "MCPToolset",
        "SSEServerInfo",
        "StdioServerInfo",
        "StreamableHttpServerInfo",
    ),
    "agentfsm.checking": (
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
    ),
    "agentfsm.builtin_hooks": (
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
    ),
    "agentfsm.a2a": (
        "A2AAgentTool",
        "AgentTaskExecutor",
        "RELAY_ANSWERS",
        "RemoteAgent",
        "RemoteRelay",
        "StoreThreads",
        "ThreadHead",
        "ThreadRuns",
        "agent_card",
        "create_app",
        "serve",
    ),
    "agentfsm.ag_ui": (
        "AGUIEndpoint",
        "EventStream",
        "StoreThreads",
        "ThreadHead",
        "ThreadRuns",
        "create_app",
        "serve",
    ),
    "agentfsm.web": (
        "LOOPBACK_HOSTS",
        "MAX_FORM_BYTES",
        "RequestChecks",
        "Resume",
        "ReviewApp",
        "Runs",
        "SECURITY_HEADERS",
        "SESSION_COOKIE",
        "TOKEN_COOKIE",
        "allowed_host_names",
        "create_app",
        "resume_here",
    ),
}


#: Public modules with an ``__all__`` of their own (their imports are not checked for completeness).
EXPECTED_MODULES: dict[str, tuple[str, ...]] = {
    "agentfsm.telemetry": ("current_trace_context", "instrument", "uninstrument"),
    "agentfsm.threads": ("ThreadInfo", "ThreadStore", "ThreadTurn", "thread_store", "turn_messages"),
}


@pytest.mark.parametrize("package", sorted(EXPECTED | EXPECTED_MODULES))
def test_all_is_sorted_and_the_expected_list(package: str) -> None:
    exported = importlib.import_module(package).__all__
    assert exported == sorted(exported)
    assert tuple(exported) == (EXPECTED | EXPECTED_MODULES)[package]


@pytest.mark.parametrize("package", sorted(EXPECTED | EXPECTED_MODULES))
def test_every_exported_name_imports(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert set(module.__all__) <= set(namespace)


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_is_complete(package: str) -> None:
    """Every public name bound in the package's ``__init__`` (not a submodule, not a typing helper) is exported."""
    module = importlib.import_module(package)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }
    assert public == set(module.__all__)


def test_the_seeds_names_are_exported_where_the_seeds_say() -> None:
    assert set(EXPECTED["agentfsm"]) >= SEEDS
    assert set(EXPECTED["agentfsm.hitl"]) >= HITL_SEEDS
    assert set(EXPECTED["agentfsm.generators"]) >= GENERATOR_SEEDS


def test_exported_errors_are_the_ones_of_agentfsm_errors() -> None:
    errors = importlib.import_module("agentfsm.errors")
    for package in EXPECTED:
        module = importlib.import_module(package)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                assert getattr(errors, name) is value, f"{package}.{name}"


#: ``agentfsm.events``, a module of its own: the event classes, their union and handler type.
EVENTS = (
    "CallChanged",
    "CallReconciled",
    "DecisionTaken",
    "Event",
    "EventHandler",
    "GuardrailChecked",
    "HookRan",
    "ModelChunk",
    "ModelEnded",
    "ModelFailed",
    "ModelStarted",
    "PhaseChanged",
    "RunEnded",
    "RunPaused",
    "RunResumed",
    "RunStarted",
    "RunWarning",
    "ToolEnded",
    "ToolProgress",
    "ToolStarted",
    "event_from_dict",
    "event_from_stored",
    "stored_dict",
)


def test_the_events_module_exports_every_event_kind() -> None:
    events = importlib.import_module("agentfsm.events")
    assert tuple(events.__all__) == EVENTS
    defined = {
        name
        for name, value in vars(events).items()
        if inspect.isclass(value) and value.__module__ == events.__name__ and not name.startswith("_")
    }
    assert defined <= set(events.__all__)
    assert {cls.kind for cls in events.Event.__args__} == set(events._KINDS)
