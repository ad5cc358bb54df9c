"""What a run needs from its agent, fixed for the run's duration: ``RunConfig``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentfsm.hitl.strategy_table import StrategyTable

if TYPE_CHECKING:
    from agentfsm._core.phases import Work
    from agentfsm._core.records import RunObserver
    from agentfsm.breakpoints import Breakpoint
    from agentfsm.cancellation import RunHandle
    from agentfsm.events import EventHandler
    from agentfsm.guardrails import Guardrail, GuardrailPoint
    from agentfsm.hooks import Hook
    from agentfsm.limits import UsageLimits
    from agentfsm.loops import LoopDetection
    from agentfsm.output import OutputType
    from agentfsm.tools.invoker import ToolInvoker
    from agentfsm.tools.tool import Tool
    from agentfsm.tools.toolset import Toolset


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What a run needs from its agent, fixed for the run's duration."""

    tools: dict[str, Tool]
    #: The exit conditions that name tools (a text reply always ends the run).
    tool_exits: frozenset[str]
    max_agent_steps: int
    invoker: ToolInvoker
    #: Works out the agent's fingerprint; called once, by the run's first snapshot.
    fingerprint: Callable[[], str]
    dynamic: tuple[Toolset, ...] = ()
    break_point: Breakpoint | None = None
    #: Told what changed (``RunDelta``), by the drivers: the run records deltas only when it has some.
    observers: tuple[RunObserver, ...] = ()
    #: The hooks of each hook point, in the order they run.
    hooks: Mapping[Work, tuple[Hook, ...]] = field(default_factory=dict)
    #: The confirmation strategy of each tool a strategy covers (``agentfsm.hitl``).
    confirmation: StrategyTable = field(default_factory=StrategyTable)
    #: Request-scoped objects for hooks and confirmation strategies (``Agent.run(hook_context=...)``):
    #: never in a snapshot.
    hook_context: dict[str, Any] | None = None
    #: Told each event of the run (``agentfsm.events``), by the drivers: the run records events only when
    #: one is given, or when it logs (its log reads them).
    on_event: EventHandler | None = None
    #: Keeps each event of the run, beside ``on_event``: the agent's snapshot store, when it records
    #: events (``record_events=True``, for other processes to read).
    record_event: EventHandler | None = None
    #: The agent's name in the run's ``RunStarted`` event.
    agent_name: str = "agent"
    #: What the run may use (``Agent(usage_limits=...)`` or ``run(usage_limits=...)``).
    usage_limits: UsageLimits | None = None
    #: Cancels the run from another thread (``run(cancel=...)``).
    cancel: RunHandle | None = None
    #: Detects a model that repeats itself (``Agent(loop_detection=...)``): ``then="tell"`` is an ``on_loop``
    #: hook in ``hooks``, ``then="stop"`` the ``loop_stop`` rule (``agentfsm.slices.loops``).
    loop_detection: LoopDetection | None = None
    #: The type the final answer must fit (``Agent(output_type=...)``), and how often the model may try again.
    output: OutputType | None = None
    output_retries: int = 0
    #: Given to the chat generator with every call (the output type's ``response_format``).
    generation_kwargs: dict[str, Any] | None = None
    #: Seconds a model call may take before the run stops waiting for it (``Agent(model_timeout=...)``).
    model_timeout: float | None = None
    #: The run may find tool calls that started before a crash and have no result (it resumes from a
    #: snapshot recorded while its tools ran, or it is durable): it reads ``calls_in_doubt``.
    recovers: bool = False
    #: The guardrails of each point that has some (``Agent(guardrails=...)``, ``agentfsm.slices.guardrails``).
    guardrails: Mapping[GuardrailPoint, tuple[Guardrail, ...]] = field(default_factory=dict)
    #: The hook points with a hook that may ask a person (``ask_user``; ``agentfsm.slices.interrupts``).
    asking_hooks: frozenset[Work] = frozenset()
