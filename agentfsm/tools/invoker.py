"""ToolInvoker: turns the tool calls of one model reply into tool-result messages.

The work is split so that the runtime stays free of I/O: ``prepare`` (resolve tools, check
arguments, inject State inputs), ``execute_sync`` / ``execute_async`` (run the functions, in
parallel up to ``tool_concurrency``), and ``finish`` (results to strings, ``outputs_to_state`` and
``tool_call_counts`` applied in call order whatever the completion order).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from agentfsm.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    ToolArgumentsError,
    ToolError,
    ToolInvocationError,
    ToolNotFoundError,
)
from agentfsm.messages import (
    RAW_ARGUMENTS_KEY,
    ChatMessage,
    ChatRole,
    ImageContent,
    StreamingCallback,
    TextContent,
    ToolCall,
    ToolCallResult,
    ToolResultContent,
    slot_setters,
)
from agentfsm.serialization import deserialize_value, serialize_value
from agentfsm.state import State, replace_values
from agentfsm.tools.tool import Tool, default_output_to_string
from agentfsm.tools.toolset import Toolset, check_unique_names, flatten_tools
from agentfsm.workers import run_in_worker


@dataclass(slots=True)
class PreparedCall:
    """A tool call ready to run, or the error that stops it from running."""

    call: ToolCall
    tool: Tool | None
    arguments: dict[str, Any]
    error: ToolError | None = None


@dataclass(frozen=True, slots=True, init=False)
class CallOutcome:
    """What running one prepared call produced: a value or an exception."""

    value: Any = None
    error: Exception | None = None

    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        _set_value(self, value)  # one per tool call: faster than a frozen dataclass's generated __init__
        _set_error(self, error)

    def to_dict(self) -> dict[str, Any]:
        """Serialize (kept in snapshots so that a finished call is not run again)."""
        if self.error is not None:
            return {"error_type": error_type_name(self.error), "error": str(self.error)}
        return {"value": serialize_value(self.value)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CallOutcome:
        """Invert ``to_dict``; a recorded exception comes back as a ``RecordedToolError``."""
        if "error_type" in data:
            return cls(error=RecordedToolError(data["error_type"], data["error"]))
        return cls(value=deserialize_value(data["value"]))


_set_value, _set_error = slot_setters(CallOutcome, "value", "error")


class RecordedToolError(Exception):
    """An exception a tool raised before the run was paused, restored from a snapshot."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


def error_type_name(error: Exception) -> str:
    """The exception's class name, also for errors restored from a snapshot."""
    return error.type_name if isinstance(error, RecordedToolError) else type(error).__name__


OnComplete = Callable[[int, CallOutcome], None]

_TOOL_INVOKE = Tool.invoke
_TOOL_ROLE = ChatRole.TOOL  # an enum attribute lookup costs ~0.1 µs; this is one per tool call
#: The outcome of a call that did not run (skipped, or failed preparation); never mutated.
NOT_RUN = CallOutcome()


def _ignore(_index: int, _outcome: CallOutcome) -> None:
    """The default ``on_complete``."""


def _accepts_streaming_callback(function: Callable[..., Any]) -> bool:
    try:
        return "streaming_callback" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


class ToolInvoker:
    """Runs tool calls against a set of tools.

    ``raise_on_failure`` turns every failing call (unknown tool, bad arguments, tool exception) into
    a typed exception instead of an error result the model can react to. ``sync_tools_in_threads``
    (async runs only): tool functions are synchronous, so by default each call runs in a worker
    thread and a blocking tool never stalls the event loop; ``False`` runs them inline on the loop,
    one after another, which saves the thread hand-off for tools that return in microseconds.
    """

    def __init__(
        self,
        tools: Sequence[Tool] | Toolset,
        raise_on_failure: bool = True,
        tool_concurrency: int = 4,
        tool_streaming_callback_passthrough: bool = False,
        sync_tools_in_threads: bool = True,
    ) -> None:
        if not isinstance(tool_concurrency, int) or tool_concurrency < 1:
            raise ConfigurationError(f"tool_concurrency must be an int >= 1, got {tool_concurrency!r}.")
        if not isinstance(sync_tools_in_threads, bool):
            raise ConfigurationTypeError(f"sync_tools_in_threads must be a bool, got {sync_tools_in_threads!r}.")
        self.tools = flatten_tools(tools)
        check_unique_names(self.tools)
        self.raise_on_failure = raise_on_failure
        self.tool_concurrency = tool_concurrency
        self.tool_streaming_callback_passthrough = tool_streaming_callback_passthrough
        self.sync_tools_in_threads = sync_tools_in_threads
        self._by_name = {t.name: t for t in self.tools}
        self._executor: ThreadPoolExecutor | None = None

    # -- prepare ----------------------------------------------------------------------------------

    def prepare(
        self, calls: Iterable[ToolCall], state: State, tools: dict[str, Tool] | None = None
    ) -> list[PreparedCall]:
        """Resolve and check each call; ``tools`` overrides the invoker's tools for this run."""
        by_name = self._by_name if tools is None else tools
        return [self._prepare_one(call, state, by_name) for call in calls]

    def _prepare_one(self, call: ToolCall, state: State, by_name: dict[str, Tool]) -> PreparedCall:
        tool = by_name.get(call.tool_name)
        if tool is None:
            available = ", ".join(sorted(by_name)) or "none"
            error = ToolNotFoundError(f"Tool {call.tool_name!r} not found. Available tools: {available}.")
            return self._failed(call, None, error)
        if RAW_ARGUMENTS_KEY in call.arguments:
            bad_json = ToolArgumentsError(
                f"The arguments for tool {call.tool_name!r} are not a valid JSON object: "
                f"{call.arguments[RAW_ARGUMENTS_KEY]!r}. Send the arguments as a JSON object."
            )
            return self._failed(call, tool, bad_json)
        try:
            tool.validate_arguments(call.arguments)
        except ToolArgumentsError as error:
            return self._failed(call, tool, error)
        arguments = dict(call.arguments)
        if tool.inputs_from_state:
            for state_key, param in tool.inputs_from_state.items():
                if param not in arguments and state.has(state_key):
                    arguments[param] = state.get(state_key)
        return PreparedCall(call, tool, arguments)

    def _failed(self, call: ToolCall, tool: Tool | None, error: ToolError) -> PreparedCall:
        if self.raise_on_failure:
            raise error
        return PreparedCall(call, tool, dict(call.arguments), error)

    # -- execute ----------------------------------------------------------------------------------

    def _call(self, prepared: PreparedCall, streaming_callback: StreamingCallback | None) -> CallOutcome:
        tool = prepared.tool
        assert tool is not None
        arguments = prepared.arguments
        if (
            streaming_callback is not None
            and self.tool_streaming_callback_passthrough
            and _accepts_streaming_callback(tool.function)
        ):
            arguments = {**arguments, "streaming_callback": streaming_callback}
        try:
            # Tool.invoke only calls the function: call it directly unless a subclass (or the
            # instance, as a test's monkeypatch does) has an invoke of its own.
            if type(tool).invoke is _TOOL_INVOKE and "invoke" not in tool.__dict__:
                return CallOutcome(tool.function(**arguments))
            return CallOutcome(tool.invoke(**arguments))
        except Exception as exc:
            return CallOutcome(None, exc)

    def execute_sync(
        self,
        prepared: Sequence[PreparedCall | None],
        streaming_callback: StreamingCallback | None = None,
        on_complete: OnComplete | None = None,
    ) -> list[CallOutcome]:
        """Run the runnable calls (in a thread pool when there are several); outcomes in call order.

        ``None`` entries and calls that failed preparation are skipped. ``on_complete(index, outcome)``
        is called in the calling thread as each call finishes.
        """
        report = on_complete or _ignore
        if len(prepared) == 1:  # the common case: no lists of indexes, no pool
            only = prepared[0]
            if only is None or only.error is not None:
                return [NOT_RUN]
            outcome = self._call(only, streaming_callback)
            report(0, outcome)
            return [outcome]
        runnable = self._runnable(prepared)
        outcomes = [NOT_RUN] * len(prepared)
        if len(runnable) > 1 and self.tool_concurrency > 1:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.tool_concurrency, thread_name_prefix="agentfsm-tool")
            futures = {self._executor.submit(self._call, prepared[i], streaming_callback): i for i in runnable}  # type: ignore[arg-type]
            for future in as_completed(futures):
                outcomes[futures[future]] = outcome = future.result()
                report(futures[future], outcome)
        else:
            self._run_in_order(prepared, runnable, streaming_callback, report, outcomes)
        return outcomes

    def _run_in_order(
        self,
        prepared: Sequence[PreparedCall | None],
        runnable: list[int],
        streaming_callback: StreamingCallback | None,
        report: OnComplete,
        outcomes: list[CallOutcome],
    ) -> None:
        for i in runnable:
            outcomes[i] = outcome = self._call(prepared[i], streaming_callback)  # type: ignore[arg-type]
            report(i, outcome)

    async def execute_async(
        self,
        prepared: Sequence[PreparedCall | None],
        streaming_callback: StreamingCallback | None = None,
        on_complete: OnComplete | None = None,
    ) -> list[CallOutcome]:
        """Like ``execute_sync``, on the event loop: calls run in worker threads, at most ``tool_concurrency`` at once.

        With ``sync_tools_in_threads=False`` they run inline, one after another.
        """
        # No closures, bound methods or index lists while a call waits for its thread: what it holds
        # counts towards the garbage collector's next collection, and a thousand runs may be waiting.
        if len(prepared) == 1:
            only = prepared[0]
            if not self.sync_tools_in_threads or only is None or only.error is not None:
                return self.execute_sync(prepared, streaming_callback, on_complete)  # inline, or nothing to run
            outcome = await run_in_worker(_call, self, only, streaming_callback)
            (on_complete or _ignore)(0, outcome)
            return [outcome]
        runnable = self._runnable(prepared)
        outcomes = [NOT_RUN] * len(prepared)
        report = on_complete or _ignore
        if not self.sync_tools_in_threads:
            self._run_in_order(prepared, runnable, streaming_callback, report, outcomes)
        elif len(runnable) > 1 and self.tool_concurrency > 1:
            await self._run_in_threads_at_once(prepared, runnable, streaming_callback, report, outcomes)
        else:
            for i in runnable:
                outcomes[i] = outcome = await run_in_worker(_call, self, prepared[i], streaming_callback)
                report(i, outcome)
        return outcomes

    async def _run_in_threads_at_once(
        self,
        prepared: Sequence[PreparedCall | None],
        runnable: list[int],
        streaming_callback: StreamingCallback | None,
        report: OnComplete,
        outcomes: list[CallOutcome],
    ) -> None:
        semaphore = asyncio.Semaphore(self.tool_concurrency)

        async def run_one(i: int) -> None:
            async with semaphore:
                outcomes[i] = outcome = await run_in_worker(_call, self, prepared[i], streaming_callback)
                report(i, outcome)

        await asyncio.gather(*(run_one(i) for i in runnable))

    @staticmethod
    def _runnable(prepared: Sequence[PreparedCall | None]) -> list[int]:
        """Indexes of the calls to run: not completed before (``None``) and not failed in ``prepare``."""
        return [i for i, p in enumerate(prepared) if p is not None and p.error is None]

    def close(self) -> None:
        """Release the worker threads of the sync thread pool."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- finish -----------------------------------------------------------------------------------

    def finish(
        self, prepared: Sequence[PreparedCall], outcomes: Sequence[CallOutcome], state: State
    ) -> list[ChatMessage]:
        """Tool-result messages in call order; State updated through its handlers."""
        if len(outcomes) != len(prepared):
            raise ValueError(f"finish needs one outcome per prepared call: {len(outcomes)} for {len(prepared)} calls.")
        messages = []
        definition = state.schema.get("tool_call_counts")
        in_place = definition is not None and definition["handler"] is replace_values
        current = state.data.get("tool_call_counts") if definition is not None else None
        # With replace_values, counting into the live dict gives what State.set would, without a copy per step.
        counts: dict[str, int] = (current if in_place else dict(current)) if isinstance(current, dict) else {}
        for i, p in enumerate(prepared):  # not zip(strict=True): ~0.2 µs more per step
            result = self._result(p, outcomes[i], state)
            tool = p.tool
            if tool is not None and p.error is None:
                counts[tool.name] = counts.get(tool.name, 0) + 1
            messages.append(ChatMessage(_TOOL_ROLE, (result,)))
        if definition is not None and counts is not current:
            state.set("tool_call_counts", counts)
        return messages

    def _result(self, p: PreparedCall, outcome: CallOutcome, state: State) -> ToolCallResult:
        if p.error is not None:
            return ToolCallResult(str(p.error), p.call, error=True)
        tool = p.tool
        assert tool is not None
        if outcome.error is not None:
            error = ToolInvocationError(
                f"Failed to invoke tool {tool.name!r} with arguments {p.call.arguments}: "
                f"{error_type_name(outcome.error)}: {outcome.error}"
            )
            if self.raise_on_failure:
                raise error from outcome.error
            return ToolCallResult(str(error), p.call, error=True)
        try:
            if tool.outputs_to_state:
                self._write_state(tool, outcome.value, state)
            text = (
                self._to_string(tool, outcome.value)
                if tool.outputs_to_string
                else default_output_to_string(outcome.value)
            )
        except (KeyError, TypeError, ValueError) as exc:
            error = ToolInvocationError(f"Tool {tool.name!r} returned a result that could not be used: {exc}")
            if self.raise_on_failure:
                raise error from exc
            return ToolCallResult(str(error), p.call, error=True)
        return ToolCallResult(text, p.call)

    @staticmethod
    def _pick(result: Any, source: str | None) -> Any:
        if source is None:
            return result
        if not isinstance(result, dict) or source not in result:
            raise KeyError(f"the result has no key {source!r}")
        return result[source]

    def _write_state(self, tool: Tool, result: Any, state: State) -> None:
        for state_key, spec in (tool.outputs_to_state or {}).items():
            state.set(state_key, self._pick(result, spec.get("source")), handler_override=spec.get("handler"))

    def _to_string(self, tool: Tool, result: Any) -> ToolResultContent:
        config = tool.outputs_to_string
        if not config:
            return default_output_to_string(result)
        if config.get("raw_result"):
            handler = config.get("handler")
            raw = self._pick(result, config.get("source"))
            raw = handler(raw) if handler else raw
            if not isinstance(raw, list) or not all(isinstance(p, (TextContent, ImageContent)) for p in raw):
                raise TypeError("a raw_result tool (or its handler) must return a list of TextContent/ImageContent")
            return raw
        if "source" in config or "handler" in config or "raw_result" in config:
            handler = config.get("handler") or default_output_to_string
            return str(handler(self._pick(result, config.get("source"))))
        parts = {
            key: (spec.get("handler") or default_output_to_string)(self._pick(result, spec.get("source")))
            for key, spec in config.items()
        }
        return default_output_to_string(parts)


#: ``ToolInvoker._call`` as a plain function: handed to a worker thread without a bound method.
_call = ToolInvoker._call
