"""Agent: the configuration of a tool-using agent and its ``run`` / ``run_async`` entry points."""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ParamSpec, TypeVar, cast

from agentfsm._core.config import RunConfig
from agentfsm._core.drivers import SavePause, drive_async, drive_sync, steps_async, steps_sync
from agentfsm._core.iterating import Outbox
from agentfsm._core.records import RunObserver, ending_reason, finished_record
from agentfsm._core.resume import resume_run
from agentfsm._core.runtime import AgentRun
from agentfsm.breakpoints import AgentBreakpoint, Breakpoint
from agentfsm.cancellation import RunHandle
from agentfsm.errors import (
    AgentFSMError,
    BreakpointException,
    ConfigurationError,
    ConfigurationTypeError,
    DeserializationError,
    RunCancelled,
    as_set,
    check_int,
    check_timeout,
)
from agentfsm.events import Event, EventHandler
from agentfsm.generators.base import ChatGenerator
from agentfsm.guardrails import (
    GUARDRAIL,
    Guardrail,
    check_guardrails,
    guardrail_from_dict,
    guardrails_to_data,
    is_guardrail_data,
)
from agentfsm.hitl.strategies import CONFIRMATION_STRATEGY
from agentfsm.hitl.strategy_table import StrategyTable, strategies_from_dict, strategies_to_dict
from agentfsm.hooks import (
    HOOK,
    Hook,
    check_hooks,
    hook_from_dict,
    hook_name,
    hook_state_schema,
    hook_to_dict,
    hooked_strategies,
    is_hook_data,
)
from agentfsm.limits import UsageLimits
from agentfsm.logs import logger
from agentfsm.loops import LoopDetection
from agentfsm.machine import ConstantFacts, Phase, Work, constant_facts
from agentfsm.messages import ChatMessage, StreamingCallback
from agentfsm.output import FINAL_ANSWER_TOOL, OutputType, resolve_output_type
from agentfsm.pauses import RunStatus
from agentfsm.result import AgentResult
from agentfsm.serialization import (
    CHAT_GENERATOR,
    Slot,
    deserialize_callable,
    import_path,
    object_from_dict,
    object_path,
    resolve_class,
    serialize_callable,
)
from agentfsm.signatures import accepted_keywords
from agentfsm.slices import interrupts as interrupts_slice
from agentfsm.snapshot import AgentSnapshot, fingerprint
from agentfsm.state import (
    AGENT_STATE_KEYS,
    State,
    complete_schema,
    schema_from_dict,
    schema_to_dict,
    values_from_dict,
)
from agentfsm.stores import DurableSnapshotStore, EventStore, SnapshotStore
from agentfsm.threads import KnownHead, Turn, TurnPlan, plan_turn, thread_store
from agentfsm.tools.invoker import ToolInvoker
from agentfsm.tools.tool import Tool
from agentfsm.tools.toolset import (
    TOOL_OR_TOOLSET,
    Toolset,
    check_unique_names,
    flatten_tools,
    tools_from_dict,
    tools_to_dict,
)

ToolSelection = Sequence[Tool | Toolset] | Toolset | Sequence[str]
#: How many threads' last turns an agent keeps in memory to continue them without reading them back.
_KNOWN_HEADS = 64
P = ParamSpec("P")
R = TypeVar("R")


def takes_arguments_of(declared: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Give a method ``declared``'s arguments, for type checkers and ``inspect``: they are declared once."""

    def typed(method: Callable[..., R]) -> Callable[P, R]:
        method.__signature__ = inspect.signature(declared)  # type: ignore[attr-defined]
        return method

    return typed


#: Haystack's ToolInvoker options, as ``tool_invoker_kwargs`` names them, and agentfsm's names for them.
_HAYSTACK_INVOKER_NAMES = {
    "max_workers": "tool_concurrency",
    "enable_streaming_callback_passthrough": "tool_streaming_callback_passthrough",
}

#: What ``tool_invoker_kwargs`` may hold: the tool runner's options (under either name) the agent does not set itself.
_INVOKER_OPTIONS = frozenset(
    {
        *_HAYSTACK_INVOKER_NAMES,
        *_HAYSTACK_INVOKER_NAMES.values(),
        "sync_tools_in_threads",
        "convert_result_to_json_string",
        "tool_timeout",
    }
)


@dataclass(frozen=True)
class AgentOutline:
    """What drawings of an agent read (``Agent.outline``), so that nothing outside the agent reads its private parts."""

    #: The agent's own tools (a dynamic toolset's are shown to the model at run time).
    tools: tuple[Tool, ...]
    #: The hooks of each hook point, in the order they run (loop detection's consequence included).
    hooks: Mapping[Work, tuple[Hook, ...]]
    #: The confirmation strategy of each tool a strategy covers.
    confirmation: StrategyTable
    #: The facts the agent's runs can never change: the rule its runs use (``constant_facts``).
    constants: ConstantFacts
    #: Seconds a call of each of its tools may take (``None``: no limit), as its runs apply them.
    timeouts: Mapping[str, float | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """What one call of ``run`` / ``run_async`` asks for."""

    messages: list[ChatMessage] | None = None
    system_prompt: str | None = None
    tools: ToolSelection | None = None
    #: Initial values of ``state_schema`` keys.
    state: dict[str, Any] = field(default_factory=dict)
    break_point: AgentBreakpoint | Breakpoint | None = None
    snapshot: AgentSnapshot | dict[str, Any] | None = None
    strict: bool = False
    #: Confirmation decisions for a resumed run waiting in CONFIRM (or with calls of unknown outcome).
    decisions: Sequence[Any] = ()
    #: Start a new run from the snapshot (its record names the snapshot's run and seq as its parent).
    fork: bool = False
    #: Claim the stored run even though another process's claim on it is live (that process is gone).
    take_over: bool = False
    #: Request-scoped objects for hooks and confirmation strategies (never stored in a snapshot).
    hook_context: dict[str, Any] | None = None
    #: The new run's id (a durable run's is its workflow's); a fresh one when None.
    run_id: str | None = None
    #: Told each event of the run (``agentfsm.events``).
    on_event: EventHandler | None = None
    #: The agent's name in the run's events.
    agent_name: str = "agent"
    #: What this run may use, instead of the agent's ``usage_limits`` (``UsageLimits()``: no limits).
    usage_limits: UsageLimits | None = None
    #: Cancels the run from another thread.
    cancel: RunHandle | None = None
    #: The run may find tool calls that started before a crash and have no result (a durable run's).
    recovers: bool = False
    #: The thread the run is the next turn of (``agentfsm.threads``), in the agent's snapshot store.
    thread: str | None = None


class Agent:
    """A tool-using agent run as a declared state machine (see ``agentfsm.machine``).

    >>> from agentfsm.generators import ScriptedChatGenerator
    >>> agent = Agent(chat_generator=ScriptedChatGenerator(["Hi there."]))
    >>> agent.run([ChatMessage.from_user("Hello")])["last_message"].text
    'Hi there.'
    """

    def __init__(
        self,
        *,
        chat_generator: ChatGenerator,
        tools: Sequence[Tool | Toolset] | Toolset | None = None,
        system_prompt: str | None = None,
        exit_conditions: list[str] | None = None,
        state_schema: dict[str, Any] | None = None,
        max_agent_steps: int = 100,
        streaming_callback: StreamingCallback | None = None,
        raise_on_tool_invocation_failure: bool = False,
        tool_invoker_kwargs: dict[str, Any] | None = None,
        tool_concurrency: int | None = None,
        tool_streaming_callback_passthrough: bool | None = None,
        snapshot_store: SnapshotStore | None = None,
        hooks: dict[str, list[Hook]] | None = None,
        confirmation_strategies: dict[str | tuple[str, ...], Any] | None = None,
        usage_limits: UsageLimits | None = None,
        loop_detection: LoopDetection | None = None,
        output_type: Any = None,
        output_retries: int = 1,
        tool_timeout: float | None = None,
        model_timeout: float | None = None,
        guardrails: Sequence[Guardrail] | None = None,
    ) -> None:
        _check_generator(chat_generator)
        check_int("max_agent_steps", max_agent_steps, 0)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ConfigurationTypeError(f"system_prompt must be a string or None, got {type(system_prompt).__name__}.")
        self.chat_generator = chat_generator
        self.tools = tools
        self._static_items, self._dynamic = _split_dynamic(tools)
        self._tools = flatten_tools(self._static_items)
        known = self.known_tools()
        check_unique_names(known)
        self.system_prompt = system_prompt
        self.exit_conditions = list(exit_conditions) if exit_conditions is not None else ["text"]
        _check_exit_conditions(self.exit_conditions, known)
        self.state_schema = dict(state_schema or {})
        # Checked and completed once per agent; every run's State starts from it.
        self._full_schema = {**_complete_state_schema(self.state_schema), **complete_schema(AGENT_STATE_KEYS)}
        _check_tool_state_keys(known, self._full_schema)
        self.max_agent_steps = max_agent_steps
        self.streaming_callback = streaming_callback
        self.raise_on_tool_invocation_failure = raise_on_tool_invocation_failure
        self.tool_invoker_kwargs = dict(tool_invoker_kwargs or {})
        invoker_kwargs = _invoker_options(
            self.tool_invoker_kwargs,
            tool_concurrency=tool_concurrency,
            tool_streaming_callback_passthrough=tool_streaming_callback_passthrough,
            tool_timeout=tool_timeout,
        )
        self._invoker = ToolInvoker(self._tools, raise_on_failure=raise_on_tool_invocation_failure, **invoker_kwargs)
        # What the tools run with, whichever way it was given.
        self.tool_concurrency = self._invoker.tool_concurrency
        self.tool_streaming_callback_passthrough = self._invoker.tool_streaming_callback_passthrough
        #: Seconds a call of a tool without a ``timeout`` of its own may take (``None``: no limit).
        self.tool_timeout = self._invoker.tool_timeout
        self.hooks = hooks
        self._hooks = check_hooks(hooks)
        for key, definition in hook_state_schema(self._hooks).items():
            if key in self.state_schema and self.state_schema[key]["type"] != definition["type"]:
                raise ConfigurationError(
                    f"state_schema declares {key!r} as {self.state_schema[key]['type']!r}, but a hook writes it as "
                    f"{definition['type']!r}: drop it from state_schema, or rename it."
                )
            self._full_schema.setdefault(key, complete_schema({key: definition})[key])
        #: Hooks that only run_async can run (async functions given to @hook).
        self._async_only_hooks = [hook_name(h) for h in self._every_hook() if getattr(h, "is_async", False)]
        self.confirmation_strategies = dict(confirmation_strategies or {})
        strategies = {**self.confirmation_strategies}
        for key, strategy in hooked_strategies(self._hooks):
            if key in strategies:
                raise ConfigurationError(
                    f"The confirmation strategy for {key!r} is given twice: in confirmation_strategies and in a "
                    "ConfirmationHook. Give it once."
                )
            strategies[key] = strategy
        self._confirmation = StrategyTable.resolve(strategies, [t.name for t in known])
        self.snapshot_store = snapshot_store
        self._set_guard_rails(usage_limits, loop_detection, output_type, output_retries, model_timeout, known)
        #: The guardrails of each point (``agentfsm.guardrails``), in the order given.
        self.guardrails = list(guardrails) if guardrails is not None else None
        self._guardrails = check_guardrails(guardrails)
        self._async_only_guardrails = [g.name for gs in self._guardrails.values() for g in gs if g.is_async]
        self._is_warmed_up = False
        #: The runs of threads this agent runs now, by run id (``agentfsm.threads``).
        self._turns: dict[str, Turn] = {}
        #: The done turns this agent ran last, by thread (the newest last): the next turn need not read them back.
        self._heads: dict[str, KnownHead] = {}

    def _set_guard_rails(
        self,
        usage_limits: UsageLimits | None,
        loop_detection: LoopDetection | None,
        output_type: Any,
        output_retries: int,
        model_timeout: float | None,
        known: list[Tool],
    ) -> None:
        """Check and keep what bounds the agent's runs: usage limits, loop detection, output type, model timeout."""
        #: What each run may use (``agentfsm.limits``); ``run(usage_limits=...)`` overrides it for one run.
        self.usage_limits = _check_usage_limits(usage_limits)
        #: What a run does when the model repeats itself (``agentfsm.loops``); ``None``: nothing, and nothing is read.
        self.loop_detection = _check_loop_detection(loop_detection)
        #: The hooks runs fire: the agent's, and at ``on_loop`` the loop detection's consequence after them.
        self._run_hooks = self._hooks
        if loop_detection is not None and loop_detection.consequence():
            on_loop = (*self._hooks.get(Work.ON_LOOP, ()), *loop_detection.consequence())
            self._run_hooks = {**self._hooks, Work.ON_LOOP: on_loop}
        #: The hook points with a hook that may ask a person (``ask_user``), worked out once.
        self._asking_hooks = interrupts_slice.asking_hooks(self._run_hooks)
        #: The type the final answer must fit: a pydantic model, a dataclass or a JSON schema (``agentfsm.output``).
        self.output_type = output_type
        #: Seconds a model call may take before the run stops waiting and fails (``ModelDeadlineError``).
        self.model_timeout = check_timeout("model_timeout", model_timeout)
        #: How often an answer that does not fit is sent back to the model before the run fails.
        self.output_retries = check_int("output_retries", output_retries, 0)
        self._output = None if output_type is None else OutputType(output_type)
        if self._output is not None and FINAL_ANSWER_TOOL in {t.name for t in known}:
            raise ConfigurationError(
                f"A tool is named {FINAL_ANSWER_TOOL!r}, the name of the tool an agent with an output_type may "
                "give the model for its answer: rename the tool."
            )

    @property
    def output_spec(self) -> OutputType | None:
        """The ``output_type`` as a JSON schema and a check of answers against it (``None`` without one)."""
        return self._output

    @property
    def snapshot_store(self) -> SnapshotStore | None:
        """Where runs keep their snapshots: pauses, every transition for a durable store, events for one that records them."""
        return self._snapshot_store

    @snapshot_store.setter
    def snapshot_store(self, store: SnapshotStore | None) -> None:
        if store is not None and not isinstance(store, SnapshotStore):
            raise ConfigurationTypeError(
                f"snapshot_store must be a SnapshotStore (save, claim, release, latest, load, history, runs), "
                f"got {type(store).__name__}."
            )
        self._snapshot_store = store
        # A durable store records the run at every transition; every store keeps pause snapshots.
        durable = isinstance(store, DurableSnapshotStore) and store.durable
        self._observers: tuple[RunObserver, ...] = (store,) if durable else ()  # type: ignore[assignment]
        self._save_pause: SavePause | None = store.save if store is not None else None

    def outline(self) -> AgentOutline:
        """What a drawing of this agent reads (``agentfsm.diagrams``): its tools, hooks, strategies and constant facts."""
        # Drawn as any of its runs may go, a stored one recovered after a crash included.
        config = replace(self._run_config(RunRequest()), recovers=True)
        return AgentOutline(
            tools=tuple(self._tools),
            hooks=self._run_hooks,
            confirmation=self._confirmation,
            constants=constant_facts(config),
            timeouts={t.name: self._invoker.timeout_of(t) for t in self._tools},
        )

    # -- lifecycle --------------------------------------------------------------------------------

    def known_tools(self) -> list[Tool]:
        """Every tool this agent can call: its own and every tool its dynamic toolsets can show."""
        return [*self._tools, *(t for toolset in self._dynamic for t in toolset.catalog_tools())]

    def _every_hook(self) -> list[Any]:
        """Each hook object once, whatever the number of points it is given for."""
        seen: dict[int, Any] = {}
        for hooks in self._hooks.values():
            for h in hooks:
                seen.setdefault(id(h), h)
        return list(seen.values())

    def _warm_tools(self, warmed: frozenset[int] = frozenset()) -> None:
        """Warm the tools and toolsets up, but those (by ``id``) ``warm_up_async`` warmed already."""
        for item in [*self._static_items, *self._dynamic]:
            if id(item) not in warmed:
                item.warm_up()
        # Toolsets may build their tools in warm_up.
        self._tools = flatten_tools(self._static_items)
        check_unique_names(self.known_tools())
        self._is_warmed_up = True

    def warm_up(self) -> None:
        """Warm up the chat generator, the hooks, the toolsets and the tools; idempotent. ``run`` calls it."""
        if self._is_warmed_up:
            return
        for part in [self.chat_generator, *self._every_hook()]:
            warm = getattr(part, "warm_up", None)
            if callable(warm):
                warm()
        self._warm_tools()

    async def warm_up_async(self) -> None:
        """Like ``warm_up``; the generator's and hooks' ``warm_up_async`` are awaited where they have one."""
        if self._is_warmed_up:
            return
        for part in [self.chat_generator, *self._every_hook()]:
            warm_async = getattr(part, "warm_up_async", None)
            warm = getattr(part, "warm_up", None)
            if callable(warm_async):
                await warm_async()
            elif callable(warm):
                warm()
        warmed = set()
        for part in self._tool_parts():  # tools that connect somewhere (MCP) do it without blocking the loop
            tool_warm_async = getattr(part, "warm_up_async", None)
            if callable(tool_warm_async):
                await tool_warm_async()
                warmed.add(id(part))
        self._warm_tools(frozenset(warmed))

    def _tool_parts(self) -> list[Any]:
        """The tools and toolsets given to the agent, and the tools inside its toolsets, each once."""
        seen: dict[int, Any] = {}
        for part in [*self._static_items, *self._dynamic, *self._tools]:
            seen.setdefault(id(part), part)
        return list(seen.values())

    def close(self) -> None:
        """Release what the agent holds: the generator's, hooks' and tools' resources (MCP sessions), the thread pool."""
        for part in [self.chat_generator, *self._every_hook(), *self._tool_parts()]:
            close = getattr(part, "close", None)
            if callable(close):
                close()
        self._invoker.close()
        self._is_warmed_up = False

    async def close_async(self) -> None:
        """Like ``close``; ``close_async`` is awaited where the generator, a hook or a tool has one."""
        for part in [self.chat_generator, *self._every_hook(), *self._tool_parts()]:
            close_async = getattr(part, "close_async", None)
            close = getattr(part, "close", None)
            if callable(close_async):
                await close_async()
            elif callable(close):
                close()
        self._invoker.close()
        self._is_warmed_up = False

    def __enter__(self) -> Agent:
        self.warm_up()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Agent:
        await self.warm_up_async()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close_async()

    # -- running ----------------------------------------------------------------------------------

    def _select_tools(self, tools: ToolSelection | None) -> tuple[list[Tool], tuple[Toolset, ...]]:
        if tools is None:
            return self._tools, self._dynamic
        names = [t for t in tools if isinstance(t, str)]
        dynamic: tuple[Toolset, ...] = ()
        if not names:
            static, dynamic = _split_dynamic(cast("Sequence[Tool | Toolset] | Toolset", tools))
            for toolset in dynamic:
                toolset.warm_up()
            selected = flatten_tools(static)
        elif len(names) == len(tools) and not isinstance(tools, str):
            by_name = {t.name: t for t in self._tools}
            unknown = [name for name in names if name not in by_name]
            if unknown:
                # Haystack's sentences first: its users' tests match them.
                opening = (
                    f"The following tool names are not valid: {as_set(unknown)}. Valid tool names are: "
                    f"{as_set(by_name)}."
                    if by_name
                    else "No tools were configured for the Agent at initialization."
                )
                raise ConfigurationError(
                    f"{opening} Unknown tool names {unknown} in run(tools=...). The agent's tools are: "
                    f"{sorted(by_name)}."
                )
            selected = [by_name[name] for name in names]
        else:
            raise ConfigurationTypeError(
                "tools must be a list of Tool and/or Toolset objects, a Toolset, or a list of tool names "
                "(strings). run(tools=...) takes one of those, not a mix, nor one name without a list."
            )
        every = [*selected, *(t for toolset in dynamic for t in toolset.catalog_tools())]
        check_unique_names(every)
        _check_tool_state_keys(every, self._full_schema)
        for t in selected:
            t.warm_up()
        return selected, dynamic

    @property
    def async_only_hooks(self) -> list[str]:
        """The names of the hooks only ``run_async`` can run (async functions given to ``@hook``)."""
        return list(self._async_only_hooks)

    def state_values(self, data: Any) -> dict[str, Any]:
        """State values for this agent's runs from serialized ones (``serialize_value`` of a dict of them).

        Each key is checked against the agent's State schema (its declared keys and the agent's own,
        such as ``messages``) before any value is deserialized: an unknown key raises
        ``DeserializationError``.
        """
        return values_from_dict(data, self._full_schema)

    @property
    def state_keys(self) -> frozenset[str]:
        """The keys the State of this agent's runs declares: its ``state_schema``'s, its hooks' and its own."""
        return frozenset(self._full_schema)

    @property
    def fingerprint(self) -> str:
        """A hash of the configuration a snapshot depends on (tools, schema, exit conditions, limits)."""
        return self._fingerprint()

    def _fingerprint(self) -> str:
        shape = {
            "generator": f"{type(self.chat_generator).__module__}.{type(self.chat_generator).__qualname__}",
            "tools": [
                {
                    **t.tool_spec,
                    "inputs_from_state": t.inputs_from_state,
                    "outputs_to_state": sorted(t.outputs_to_state or {}),
                    # A run settles its calls in doubt as its tools say: with a reconcile function, or not.
                    **({"reconcile": _code_name(t.reconcile)} if t.reconcile is not None else {}),
                }
                for t in self.known_tools()
            ],
            "exit_conditions": self.exit_conditions,
            "state_schema": {key: repr(definition["type"]) for key, definition in self.state_schema.items()},
            "max_agent_steps": self.max_agent_steps,
            "system_prompt": self.system_prompt,
            "hooks": {point.value: [hook_name(h) for h in hooks] for point, hooks in self._hooks.items()},
            "confirmation": {name: type(s).__qualname__ for name, s in self._confirmation.entries()},
        }
        if self._guardrails:
            shape["guardrails"] = {point: [g.settings() for g in gs] for point, gs in self._guardrails.items()}
        if self._output is not None:
            shape["output"] = {"schema": self._output.schema, "retries": self.output_retries}
        return fingerprint(shape)

    def _output_config(self, tools: dict[str, Tool], exits: frozenset[str]) -> dict[str, Any]:
        """What a run needs for the output type: how the schema reaches the model, and the check of the answer.

        A generator with ``supports_response_format = True`` is given the schema as its
        ``response_format``; any other is shown the final-answer tool, which ends the run once called.
        """
        output = self._output
        if output is None:
            return {"tools": tools, "tool_exits": exits}
        settings: dict[str, Any] = {"output": output, "output_retries": self.output_retries}
        if getattr(self.chat_generator, "supports_response_format", False) is True:
            native = {"response_format": output.response_format()}
            return {**settings, "tools": tools, "tool_exits": exits, "generation_kwargs": native}
        final = output.final_answer_tool()
        return {**settings, "tools": {**tools, final.name: final}, "tool_exits": exits | {final.name}}

    def _event_recorder(self) -> EventHandler | None:
        """What keeps a run's events: the snapshot store, when it records them (``record_events=True``)."""
        store = self._snapshot_store
        if store is not None and isinstance(store, EventStore) and store.record_events:
            return store.record_event
        return None

    def _run_config(self, request: RunRequest) -> RunConfig:
        """What the run a request asks for needs from this agent."""
        selected, dynamic = self._select_tools(request.tools)
        return RunConfig(
            **self._output_config({t.name: t for t in selected}, frozenset(self.exit_conditions) - {"text"}),
            dynamic=dynamic,
            max_agent_steps=self.max_agent_steps,
            invoker=self._invoker,
            fingerprint=self._fingerprint,
            break_point=_unwrap(request.break_point),
            observers=self._observers,
            hooks=self._run_hooks,
            confirmation=self._confirmation,
            hook_context=request.hook_context,
            on_event=request.on_event,
            record_event=self._event_recorder(),
            agent_name=request.agent_name,
            usage_limits=self.usage_limits
            if request.usage_limits is None
            else _check_usage_limits(request.usage_limits),
            cancel=_check_handle(request.cancel, resuming=request.snapshot is not None),
            loop_detection=self.loop_detection,
            model_timeout=self.model_timeout,
            recovers=request.recovers,
            guardrails=self._guardrails,
            asking_hooks=self._asking_hooks,
        )

    def new_run(self, request: RunRequest) -> AgentRun:
        """The run a request asks for, ready for a driver (``run`` and the durable workflows use it)."""
        self.warm_up()
        if request.thread is not None:
            return self._thread_run(request)
        config = self._run_config(request)
        if request.snapshot is None and (request.decisions or request.fork or request.take_over):
            raise ConfigurationError(
                "decisions=, fork= and take_over= are about a stored or paused run: pass its snapshot= too."
            )
        if request.take_over and self.snapshot_store is None:
            raise ConfigurationError("take_over=True takes a run over in a snapshot store: give the agent one.")
        if request.snapshot is not None:
            if request.system_prompt is not None or request.state:
                raise ConfigurationError(
                    "A resumed run continues the snapshot's conversation and State: do not pass "
                    "system_prompt or state values together with snapshot=."
                )
            snapshot = request.snapshot
            if not isinstance(snapshot, AgentSnapshot):
                snapshot = AgentSnapshot.from_dict(snapshot)
            if request.messages:  # as in Haystack, where messages is a required argument of run()
                logger.warning(
                    "messages given with snapshot= are not used: the resumed run continues the snapshot's conversation",
                    run_id=snapshot.run_id,
                    messages=len(request.messages),
                )
            parent = (snapshot.run_id, snapshot.seq) if request.fork else None
            if request.fork:
                snapshot = snapshot.fork()
            store = self.snapshot_store

            def claim(checked: AgentSnapshot) -> None:
                if store is not None:
                    store.claim(checked.run_id, checked.seq, take_over=request.take_over, parent=parent)

            return self._resumed(config, request, snapshot, claim)
        messages = request.messages
        if not isinstance(messages, list) or not all(isinstance(m, ChatMessage) for m in messages):
            raise ConfigurationTypeError("messages must be a list of ChatMessage.")
        prompt = request.system_prompt if request.system_prompt is not None else self.system_prompt
        conversation = [ChatMessage.from_system(prompt), *messages] if prompt is not None else list(messages)
        return self._fresh(config, request, conversation)

    def _resumed(
        self, config: RunConfig, request: RunRequest, snapshot: AgentSnapshot, claim: Callable[[AgentSnapshot], None]
    ) -> AgentRun:
        """The run ``snapshot`` holds, resumed as ``request`` asks, once ``claim`` took it in the store."""
        return resume_run(
            config, self._full_schema, snapshot, strict=request.strict, decisions=request.decisions, before_resume=claim
        )

    def _fresh(
        self,
        config: RunConfig,
        request: RunRequest,
        conversation: list[ChatMessage],
        carried: Mapping[str, Any] | None = None,
    ) -> AgentRun:
        """A new run on ``conversation``, its State the ``carried`` values, then the request's merged in."""
        reserved = sorted(set(request.state) & {*AGENT_STATE_KEYS, "messages"})
        if reserved:
            raise ConfigurationError(f"{reserved} are maintained by the agent; pass the conversation as `messages`.")
        state = State.from_complete_schema(self._full_schema, {**(carried or {}), "messages": conversation})
        for key, value in request.state.items():
            state.set(key, value)
        state.set("step_count", 0)
        return AgentRun(config, state, request.run_id)

    def _thread_run(self, request: RunRequest) -> AgentRun:
        """The next run of the request's thread (``agentfsm.threads``): a new turn, or its head run going on."""
        if request.snapshot is not None or request.fork:
            raise ConfigurationError(
                "thread= goes on from where the thread stands: pass no snapshot= or fork= with it (fork a thread "
                "with store.fork_thread(...))."
            )
        plan = plan_turn(
            thread_store(self.snapshot_store),
            request.thread,
            request.messages,
            system_prompt=request.system_prompt,
            decisions=bool(request.decisions),
            take_over=request.take_over,
            state_values=self.state_values,
            known=self._heads.get(request.thread) if isinstance(request.thread, str) else None,
        )
        store, config = plan.store, self._run_config(request)
        if plan.snapshot is None:  # a new turn
            messages = plan.conversation
            if plan.head is None:
                return self._turn(plan, self.new_run(replace(request, thread=None, messages=messages)), flat=True)
            assert messages is not None
            run = self._fresh(config, replace(request, system_prompt=None), messages, plan.carried)
            store.begin_turn(plan.thread_id, run.run_id, head=plan.head, base_messages=plan.base_messages)
            run.continues(plan.base_messages)
            return self._turn(plan, run, flat=True)
        snapshot = plan.snapshot
        if plan.fork:  # a thread forked mid-run goes on from its point, as a new run: the branch's next turn

            def begin(checked: AgentSnapshot) -> None:
                store.begin_turn(
                    plan.thread_id, checked.run_id, head=plan.head, base_messages=plan.base_messages, fork=True
                )

            return self._turn(plan, self._resumed(config, request, snapshot.fork(), begin), flat=True)
        resumed = self.new_run(replace(request, thread=None, snapshot=snapshot))
        if snapshot.phase is not Phase.FAILED:
            resumed.continues(len(snapshot.messages), len(snapshot.trace))
        return self._turn(plan, resumed, flat=snapshot.phase is not Phase.FAILED)

    def _turn(self, plan: TurnPlan, run: AgentRun, *, flat: bool) -> AgentRun:
        """Keep ``run`` as a turn of ``plan``'s thread until it is released; a thread's first run begins it here."""
        if plan.head is None:
            plan.store.begin_turn(plan.thread_id, run.run_id, head=None, base_messages=0)
        self._turns[run.run_id] = Turn(plan.store, plan.thread_id, flat, run.state.version("messages"))
        return run

    def _saver(self, run: AgentRun) -> SavePause | None:
        """What keeps ``run``'s pause: its thread's store, keeping what the run added, or the agent's store."""
        turn = self._turns.get(run.run_id)
        return turn.save(run) if turn is not None else self._save_pause

    def run(
        self,
        messages: list[ChatMessage] | None = None,
        streaming_callback: StreamingCallback | None = None,
        *,
        break_point: AgentBreakpoint | Breakpoint | None = None,
        snapshot: AgentSnapshot | dict[str, Any] | None = None,
        system_prompt: str | None = None,
        tools: ToolSelection | None = None,
        strict: bool = False,
        decisions: Sequence[Any] = (),
        fork: bool = False,
        take_over: bool = False,
        hook_context: dict[str, Any] | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
        on_event: EventHandler | None = None,
        usage_limits: UsageLimits | None = None,
        cancel: RunHandle | None = None,
        thread: str | None = None,
        **kwargs: Any,
    ) -> AgentResult:
        """Run until an exit condition is met or ``max_agent_steps`` model calls were made.

        Returns an ``AgentResult``: ``{"messages": [...], "last_message": ChatMessage, <state keys>...,
        "step_count": int, "tool_call_counts": {...}, "exit_reason": str, "trace": [TransitionRecord, ...]}``,
        where a ``state_schema`` key named ``last_message``, ``exit_reason`` or ``trace`` holds the
        State's value and the attributes of the same names keep agentfsm's.
        ``kwargs`` initialise State keys declared in ``state_schema``. ``break_point`` pauses the run
        by raising ``BreakpointException`` (its ``snapshot`` resumes it: ``run(snapshot=...)``); a
        snapshot from a differently configured agent logs a warning, or raises with ``strict=True``.
        ``decisions`` decide the calls a resumed run waits for in CONFIRM (``agentfsm.hitl``), or
        whose outcome a crash left unknown.

        With a snapshot store, a stored run resumes only from its newest snapshot, in one process
        at a time (``StaleSnapshotError`` otherwise, and nothing runs); ``take_over=True`` takes over
        a run whose process is gone before its claim expires; ``fork=True`` starts a new run from any
        snapshot, leaving the snapshot's run as it is.

        ``hook_context`` reaches the hooks and confirmation strategies that take a ``hook_context``
        keyword (a websocket, a queue, a user id...); it is never written into a snapshot, so a
        resumed run is given its own. ``confirmation_strategy_context`` is Haystack's name for it:
        give one or the other; strategies may take it under either name.

        ``on_event`` is called with each event of the run (``agentfsm.events``), in the run's
        thread, as it happens; ``iter`` hands them out as an iterator instead.

        ``thread`` names a conversation that goes on across runs, in the snapshot store: the run
        continues the conversation and State of the thread's last run, and is recorded as its next
        turn; without messages, it resumes the thread's paused run (with ``decisions``). See
        ``agentfsm.threads``.
        """
        arguments = locals()  # run's arguments, as given: the one declaration of every way to run (``_request``)
        request, callback = self._request("run", arguments)
        run = self.new_run(request)
        try:
            return cast(AgentResult, drive_sync(run, self.chat_generator, callback, self._saver(run)))
        except RunCancelled as exc:
            if request.cancel is not None:
                request.cancel.snapshot = exc.snapshot
            raise
        finally:
            self._release(run)

    @takes_arguments_of(run)
    async def run_async(self, *args: Any, **kwargs: Any) -> AgentResult:
        """Async twin of ``run``: same arguments and decisions, same result; the streaming callback and ``on_event`` may be async."""
        request, callback = self._request("run_async", RUN_ARGUMENTS.bind(self, *args, **kwargs))
        run = self.new_run(request)
        try:
            return cast(AgentResult, await drive_async(run, self.chat_generator, callback, self._saver(run)))
        except RunCancelled as exc:
            if request.cancel is not None:
                request.cancel.snapshot = exc.snapshot
            raise
        finally:
            self._release(run)

    @takes_arguments_of(run)
    def iter(self, *args: Any, **kwargs: Any) -> Iterator[Event]:
        """The run's events (``agentfsm.events``) as the run goes: ``run``'s arguments, an iterator instead of a result.

        The run takes a step only when the loop asks for the next event, in the loop's own thread.
        The last event is ``RunEnded`` (``result`` is what ``run`` returns) or ``RunPaused`` (its
        ``snapshot`` resumes the run; the iteration ends without raising); a failed run raises its
        error after its ``RunEnded``. Stopping the loop early (``break``, or closing the iterator)
        cancels the run where it stands: it pauses (``cancel`` edge), its snapshot kept in the
        snapshot store and in ``cancel=``'s ``RunHandle``.
        """
        outbox = Outbox()
        request, callback = self._request("iter", RUN_ARGUMENTS.bind(self, *args, **kwargs), outbox.put)
        return self._events(request, callback, outbox)

    def _events(self, request: RunRequest, callback: StreamingCallback | None, outbox: Outbox) -> Iterator[Event]:
        run = self.new_run(request)
        try:
            yield from steps_sync(run, self.chat_generator, callback, self._saver(run), outbox)
        except BreakpointException as exc:  # its RunPaused event was the last
            if isinstance(exc, RunCancelled) and request.cancel is not None:
                request.cancel.snapshot = exc.snapshot
        finally:
            self._release(run)

    @takes_arguments_of(run)
    def iter_async(self, *args: Any, **kwargs: Any) -> AsyncIterator[Event]:
        """Async twin of ``iter`` (``run_async``'s arguments), stepped in the loop's own task.

        Close it when leaving the loop early (``contextlib.aclosing``) to end the run there and then;
        otherwise it ends when the iterator is collected.
        """
        outbox = Outbox()
        request, callback = self._request("iter_async", RUN_ARGUMENTS.bind(self, *args, **kwargs), outbox.put)
        return self._events_async(request, callback, outbox)

    async def _events_async(
        self, request: RunRequest, callback: StreamingCallback | None, outbox: Outbox
    ) -> AsyncIterator[Event]:
        run = self.new_run(request)
        try:
            steps = steps_async(run, self.chat_generator, callback, self._saver(run), outbox, [])
            async with contextlib.aclosing(steps):  # closing the loop over the events closes the run's steps
                async for event in steps:
                    yield event
        except BreakpointException as exc:
            if isinstance(exc, RunCancelled) and request.cancel is not None:
                request.cancel.snapshot = exc.snapshot
        finally:
            self._release(run)

    def _request(
        self, method: str, arguments: Mapping[str, Any] | inspect.BoundArguments, on_event: EventHandler | None = None
    ) -> tuple[RunRequest, StreamingCallback | None]:
        """What ``method`` (``run``, ``run_async``, ``iter`` or ``iter_async``) was asked, checked, and its streaming callback.

        ``arguments`` are ``run``'s, as given; ``on_event``: the handler ``iter`` hands its events to.
        """
        if isinstance(arguments, inspect.BoundArguments):
            arguments.apply_defaults()
            arguments = arguments.arguments
        options = dict(arguments)
        state = options.pop("kwargs")
        sync = method in ("run", "iter")
        if on_event is not None:
            if options["on_event"] is not None:
                raise ConfigurationError(
                    f"{method}() hands the events out itself: use run(on_event=...) for a handler."
                )
            options["on_event"] = on_event
        else:
            _check_handler(options["on_event"], sync=sync)
        unknown = [name for name in state if name not in self._full_schema]
        if unknown:
            keywords = [name for name in RUN_ARGUMENTS.parameters if name not in ("self", "kwargs")]
            close = difflib.get_close_matches(unknown[0], [*keywords, *self._full_schema], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigurationError(
                f"State: Key {unknown[0]!r} not found in schema. {method}() got it, and it is neither an argument "
                f"of run() ({', '.join(keywords)}) nor a key of the agent's state_schema.{hint}"
            )
        callback = options.pop("streaming_callback") or self.streaming_callback
        if sync:
            if callback is not None and inspect.iscoroutinefunction(callback):
                raise ConfigurationTypeError(
                    f"An async streaming_callback needs {method}_async(); pass a sync callback to {method}()."
                )
            if self._async_only_hooks:
                raise ConfigurationTypeError(
                    f"Hooks {self._async_only_hooks} are async functions: run the agent with {method}_async()."
                )
            if self._async_only_guardrails:
                raise ConfigurationTypeError(
                    f"Guardrails {self._async_only_guardrails} are async: run the agent with {method}_async()."
                )
        context = _context(options.pop("hook_context"), options.pop("confirmation_strategy_context"))
        del options["self"]
        return RunRequest(**options, state=state, hook_context=context), callback

    def _release(self, run: AgentRun) -> None:
        """Give up the store's claim on the run, keeping a finished run's record (a no-op once a pause did).

        A durable store recorded the finished run at its last edge; any other is given its record.
        """
        turn = self._turns.pop(run.run_id, None)
        if turn is not None:
            record = None if self._observers else finished_record(run)
            status, reason = RunStatus.ended_in(run.phase), ending_reason(run)
            turn.store.release(run.run_id, status, reason, snapshot=record, appended=turn.appended(run))
            self._heads.pop(turn.thread_id, None)
            if status is RunStatus.DONE:
                self._heads[turn.thread_id] = KnownHead.of(run)
                if len(self._heads) > _KNOWN_HEADS:
                    del self._heads[next(iter(self._heads))]
        elif self.snapshot_store is not None:
            record = None if self._observers else finished_record(run)
            self.snapshot_store.release(run.run_id, RunStatus.ended_in(run.phase), ending_reason(run), snapshot=record)

    def draw(self, format: str = "mermaid", *, trace: Any = None, snapshot: Any = None) -> str | bytes:
        """This agent's state diagram (``mermaid``, ``dot``, ``svg`` or ``png``); see ``agentfsm.diagrams``."""
        from agentfsm.diagrams import machine_diagram

        return machine_diagram(format, agent=self, trace=trace, snapshot=snapshot)  # type: ignore[arg-type]

    # -- serialization ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Serialize the agent's configuration (generator, tools, schema, settings)."""
        generator_to_dict = getattr(self.chat_generator, "to_dict", None)
        if not callable(generator_to_dict):
            raise ConfigurationTypeError(
                f"{type(self.chat_generator).__name__} has no to_dict(); give it to_dict/from_dict to serialize the agent."
            )
        return {
            "type": object_path(type(self)),
            "init_parameters": {
                "chat_generator": generator_to_dict(),
                "tools": tools_to_dict(self.tools),
                "system_prompt": self.system_prompt,
                "exit_conditions": self.exit_conditions,
                "state_schema": schema_to_dict(self.state_schema),
                "max_agent_steps": self.max_agent_steps,
                "streaming_callback": serialize_callable(self.streaming_callback) if self.streaming_callback else None,
                "raise_on_tool_invocation_failure": self.raise_on_tool_invocation_failure,
                "tool_invoker_kwargs": self.tool_invoker_kwargs,
                "tool_concurrency": self.tool_concurrency,
                "tool_streaming_callback_passthrough": self.tool_streaming_callback_passthrough,
                "hooks": {
                    point.value: [hook_to_dict(h, point.value) for h in hooks] for point, hooks in self._hooks.items()
                }
                or None,
                "confirmation_strategies": strategies_to_dict(self.confirmation_strategies) or None,
                "usage_limits": self.usage_limits.to_dict() if self.usage_limits is not None else None,
                "loop_detection": self.loop_detection.to_dict() if self.loop_detection is not None else None,
                **({"guardrails": guardrails_to_data(self._guardrails)} if self._guardrails else {}),
                **({"tool_timeout": self.tool_timeout} if self.tool_timeout is not None else {}),
                **({"model_timeout": self.model_timeout} if self.model_timeout is not None else {}),
                **(
                    {"output_type": self._output.to_data(), "output_retries": self.output_retries}
                    if self._output is not None
                    else {}
                ),
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Agent:
        """Rebuild an agent from ``to_dict`` output; see ``agentfsm.serialization`` for ``allowed_modules``.

        The document's structure is checked, and every class and function it names is resolved
        through the allow-list, before any of them is called: bad data raises
        ``DeserializationError`` (or the ``ConfigurationError`` of the argument it makes wrong).
        """
        params = _agent_parameters(data)
        _check_named_code(params, allowed_modules)
        try:
            params["state_schema"] = schema_from_dict(params.get("state_schema") or {}, allowed_modules)
            if params.get("streaming_callback"):
                params["streaming_callback"] = deserialize_callable(params["streaming_callback"], allowed_modules)
            generator = params["chat_generator"]
            params["chat_generator"] = object_from_dict(generator, allowed_modules, CHAT_GENERATOR, whole=True)
            params["tools"] = tools_from_dict(params.get("tools"), allowed_modules)
            if params.get("confirmation_strategies"):
                params["confirmation_strategies"] = strategies_from_dict(
                    params["confirmation_strategies"], allowed_modules
                )
            if params.get("loop_detection") is not None:
                params["loop_detection"] = LoopDetection.from_dict(params["loop_detection"])
            if params.get("usage_limits") is not None:
                params["usage_limits"] = UsageLimits.from_dict(params["usage_limits"])
            if params.get("output_type") is not None:
                params["output_type"] = resolve_output_type(params["output_type"], allowed_modules)
            if params.get("hooks"):
                params["hooks"] = {
                    point: [hook_from_dict(h, allowed_modules) for h in hooks]
                    for point, hooks in params["hooks"].items()
                }
            if params.get("guardrails"):
                params["guardrails"] = [guardrail_from_dict(g, allowed_modules) for g in params["guardrails"]]
            return cls(**params)
        except AgentFSMError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # A part's own from_dict met data it cannot read: the document is malformed there.
            raise DeserializationError(f"Malformed agent data: {exc!r}") from exc


#: The arguments of ``run``, and so of ``run_async``, ``iter`` and ``iter_async`` (``takes_arguments_of``).
RUN_ARGUMENTS = inspect.signature(Agent.run)

#: The ``init_parameters`` that ``Agent.to_dict`` writes.
_AGENT_PARAMETERS = frozenset(
    {
        "chat_generator",
        "tools",
        "system_prompt",
        "exit_conditions",
        "state_schema",
        "max_agent_steps",
        "streaming_callback",
        "raise_on_tool_invocation_failure",
        "tool_invoker_kwargs",
        "tool_concurrency",
        "tool_streaming_callback_passthrough",
        "hooks",
        "confirmation_strategies",
        "usage_limits",
        "loop_detection",
        "output_type",
        "output_retries",
        "tool_timeout",
        "model_timeout",
        "guardrails",
    }
)


def _agent_parameters(data: Any) -> dict[str, Any]:
    """A copy of an agent document's ``init_parameters``, once its structure is checked (nothing resolved yet)."""

    def refuse(problem: str) -> DeserializationError:
        return DeserializationError(f"Not an agent as Agent.to_dict() writes it: {problem}.")

    def is_object(value: Any) -> bool:  # a part written as {"type": <class path>, ...}
        return isinstance(value, dict) and isinstance(value.get("type"), str)

    if not isinstance(data, dict) or not isinstance(data.get("init_parameters"), dict):
        raise refuse("expected an object with 'init_parameters'")
    params = dict(data["init_parameters"])
    unknown = sorted(set(params) - _AGENT_PARAMETERS, key=str)
    if unknown:
        raise refuse(f"unknown init_parameters {unknown}")
    if not is_object(params.get("chat_generator")):
        raise refuse("'chat_generator' must be an object with a 'type'")
    tools = params.get("tools")
    if not (tools is None or is_object(tools) or (isinstance(tools, list) and all(map(is_object, tools)))):
        raise refuse("'tools' must be a toolset, or a list of tools and toolsets, each an object with a 'type'")
    schema = params.get("state_schema")
    if not (schema is None or (isinstance(schema, dict) and all(isinstance(e, dict) for e in schema.values()))):
        raise refuse("'state_schema' must map State keys to {'type': ..., 'handler': ...}")
    if not isinstance(params.get("streaming_callback"), str | None):
        raise refuse("'streaming_callback' must be a function path or null")
    hooks = params.get("hooks")
    if not (
        hooks is None
        or (isinstance(hooks, dict) and all(isinstance(h, list) and all(map(is_hook_data, h)) for h in hooks.values()))
    ):
        raise refuse("'hooks' must map hook points to lists of {'function': ...} or {'type': ..., 'data': ...}")
    guardrails = params.get("guardrails")
    if not (guardrails is None or (isinstance(guardrails, list) and all(map(is_guardrail_data, guardrails)))):
        raise refuse("'guardrails' must be a list of {'function': ..., 'point': ...} or {'type': ..., 'data': ...}")
    strategies = params.get("confirmation_strategies")
    if not (
        strategies is None
        or (
            isinstance(strategies, list)
            and all(isinstance(e, dict) and "key" in e and is_object(e.get("strategy")) for e in strategies)
        )
    ):
        raise refuse("'confirmation_strategies' must be a list of {'key': ..., 'strategy': {'type': ...}}")
    return params


def _check_named_code(params: dict[str, Any], allowed_modules: Iterable[str] | None) -> None:
    """Resolve every class and function an agent document's ``init_parameters`` name, and check each fits its slot.

    Nothing found is called: a path that is refused, or names what its slot cannot use, stops the
    document before any part of it is rebuilt.
    """
    tools = params.get("tools")
    classes: list[tuple[str, Slot]] = [(params["chat_generator"]["type"], CHAT_GENERATOR)]
    classes += [(t["type"], TOOL_OR_TOOLSET) for t in ([tools] if isinstance(tools, dict) else tools or [])]
    hooks = [h for entries in (params.get("hooks") or {}).values() for h in entries]
    classes += [(h["type"], HOOK) for h in hooks if "function" not in h]
    guards = params.get("guardrails") or []
    classes += [(g["type"], GUARDRAIL) for g in guards if "function" not in g]
    classes += [(e["strategy"]["type"], CONFIRMATION_STRATEGY) for e in params.get("confirmation_strategies") or []]
    # import_path checks what a callable slot may name (a function, a class, agentfsm's @tool or @hook of one).
    callables = [h["function"] for h in hooks if "function" in h]
    callables += [g["function"] for g in guards if "function" in g]
    callables += [e["handler"] for e in (params.get("state_schema") or {}).values() if e.get("handler")]
    callables += [params["streaming_callback"]] if params.get("streaming_callback") else []
    for path, slot in classes:
        resolve_class(path, allowed_modules, slot)
    if params.get("output_type") is not None:
        resolve_output_type(params["output_type"], allowed_modules)
    for path in callables:
        import_path(path, allowed_modules, expect="callable")


def _invoker_options(kwargs: dict[str, Any], **given: Any) -> dict[str, Any]:
    """The tool runner's options from ``tool_invoker_kwargs`` and the agent's own parameters (``None``: not given).

    Each option may be given under one name or several, with one value: different values for the
    same option, and names the tool runner has no option for, raise ``ConfigurationError``.
    """
    unknown = sorted(set(kwargs) - _INVOKER_OPTIONS, key=str)
    if unknown:
        hint = (
            " The agent sets raise_on_failure itself: pass raise_on_tool_invocation_failure= instead."
            if "raise_on_failure" in unknown
            else ""
        )
        raise ConfigurationError(
            f"tool_invoker_kwargs has names the tool runner does not take: {unknown}; it takes "
            f"{sorted(_INVOKER_OPTIONS)}.{hint}"
        )
    options: dict[str, Any] = {}
    named: dict[str, str] = {}
    given_names = [(name, f"{name}=", value) for name, value in given.items() if value is not None]
    kwarg_names = [(_HAYSTACK_INVOKER_NAMES.get(k, k), f"tool_invoker_kwargs[{k!r}]", v) for k, v in kwargs.items()]
    for option, where, value in [*given_names, *kwarg_names]:
        if option in options and options[option] != value:
            raise ConfigurationError(
                f"{named[option]} {options[option]!r} and {where} {value!r} set the same option to different "
                "values: give it once."
            )
        options[option], named[option] = value, where
    return options


def _check_loop_detection(detection: Any) -> LoopDetection | None:
    """``detection`` when it is a ``LoopDetection`` or ``None``; else ``ConfigurationTypeError``.

    Without it, ``on_loop`` hooks never run: nothing detects a loop (they are drawn nowhere either).
    """
    if detection is not None and not isinstance(detection, LoopDetection):
        raise ConfigurationTypeError(f"loop_detection must be a LoopDetection or None, got {type(detection).__name__}.")
    return detection


def _check_handle(handle: Any, *, resuming: bool) -> RunHandle | None:
    """``handle`` when it is a ``RunHandle`` or ``None``; else ``ConfigurationTypeError``.

    A handle cancels once: one that was cancelled cannot be given to a resumed run (which would
    stop again at once), nor to any run once it stopped one (``ConfigurationError``).
    """
    if handle is None:
        return None
    if not isinstance(handle, RunHandle):
        raise ConfigurationTypeError(f"cancel must be a RunHandle or None, got {type(handle).__name__}.")
    if handle.cancelled and (resuming or handle.snapshot is not None):
        raise ConfigurationError(
            "This RunHandle was cancelled already: a run given it would stop again at once. "
            "Pass a new RunHandle() to the resumed run (cancel=RunHandle())."
        )
    return handle


def _check_usage_limits(limits: Any) -> UsageLimits | None:
    """``limits`` when it is a ``UsageLimits`` or ``None``; else ``ConfigurationTypeError``."""
    if limits is not None and not isinstance(limits, UsageLimits):
        raise ConfigurationTypeError(f"usage_limits must be a UsageLimits or None, got {type(limits).__name__}.")
    return limits


def _context(hook_context: dict[str, Any] | None, strategy_context: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's request-scoped objects, given under agentfsm's name or Haystack's (not both)."""
    if hook_context is not None and strategy_context is not None:
        raise ConfigurationError(
            "hook_context and confirmation_strategy_context are two names for the run's context: give one."
        )
    return hook_context if hook_context is not None else strategy_context


def _check_handler(on_event: Any, *, sync: bool) -> None:
    """Refuse an ``on_event`` that is not callable, or an async one under ``run``."""
    if on_event is None:
        return
    if not callable(on_event):
        raise ConfigurationTypeError(f"on_event must be a callable taking an event, got {on_event!r}.")
    if sync and inspect.iscoroutinefunction(on_event):
        raise ConfigurationTypeError("An async on_event needs run_async(); pass a sync handler to run().")


def _split_dynamic(
    tools: Sequence[Tool | Toolset] | Toolset | None,
) -> tuple[list[Tool | Toolset], tuple[Toolset, ...]]:
    """Tools and static toolsets, and the dynamic toolsets (asked for their tools at every step)."""
    items: list[Tool | Toolset] = [tools] if isinstance(tools, Toolset) else list(tools or [])
    dynamic = tuple(i for i in items if isinstance(i, Toolset) and i.dynamic)
    return [i for i in items if not (isinstance(i, Toolset) and i.dynamic)], dynamic


def _unwrap(break_point: AgentBreakpoint | Breakpoint | None) -> Breakpoint | None:
    if break_point is None or isinstance(break_point, Breakpoint):
        return break_point
    if isinstance(break_point, AgentBreakpoint):
        return break_point.break_point
    raise ConfigurationTypeError(
        f"break_point must be an AgentBreakpoint or a Breakpoint, got {type(break_point).__name__}."
    )


def _check_generator(generator: Any) -> None:
    run = getattr(generator, "run", None)
    if not callable(run):
        raise ConfigurationTypeError(f"chat_generator must have a run() method, got {type(generator).__name__}.")
    function = getattr(run, "__func__", run)  # one signature per generator class, not per instance
    try:
        accepts = _accepts_tools(function)
    except TypeError:  # an unhashable callable: not cached
        accepts = _accepts_tools.__wrapped__(function)
    if not accepts:
        name = type(generator).__name__
        raise ConfigurationTypeError(
            f"{name} does not accept tools parameter in its run method. {name}.run() does not accept a 'tools' "
            "parameter; the agent's chat generator must support tools, even when the agent has none of its "
            "own (run(tools=...) and an output_type give it some)."
        )


@functools.lru_cache(maxsize=256)
def _accepts_tools(function: Callable[..., Any]) -> bool:
    keywords = accepted_keywords(function)
    return keywords is None or "tools" in keywords


def _check_exit_conditions(exit_conditions: list[str], tools: list[Tool]) -> None:
    valid = ["text", *(t.name for t in tools)]
    if not exit_conditions or not all(c in valid for c in exit_conditions):
        raise ConfigurationError(
            f"Invalid exit conditions provided: {exit_conditions}. Valid exit conditions must be a subset of "
            f"{valid}. Ensure that each exit condition corresponds to either 'text' or a valid tool name."
        )


def _complete_state_schema(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    complete = complete_schema(schema)
    clash = sorted(set(schema) & set(AGENT_STATE_KEYS))
    if clash:
        raise ConfigurationError(
            f"state_schema keys {clash} are reserved: the agent keeps them up to date itself; rename them."
        )
    return complete


def _check_tool_state_keys(tools: list[Tool], schema: dict[str, Any]) -> None:
    known = {*schema, "messages"}
    for t in tools:
        for key in [*(t.outputs_to_state or {}), *(t.inputs_from_state or {})]:
            if key not in known:
                raise ConfigurationError(
                    f"Tool {t.name!r} maps State key {key!r}, which is not in the agent's state_schema; "
                    f"declare it, e.g. state_schema={{'{key}': {{'type': ...}}}}."
                )


def _code_name(code: Any) -> str:
    """How the fingerprint names user code a tool holds (its reconcile function): its qualified name."""
    return str(getattr(code, "__qualname__", None) or type(code).__qualname__)
