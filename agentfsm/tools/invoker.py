"""ToolInvoker: turns the tool calls of one model reply into tool-result messages.

The work is split so that the runtime stays free of I/O: ``prepare`` (resolve tools, check
arguments, inject State inputs), ``execute_sync`` / ``execute_async`` (run the ready calls, in
parallel up to ``tool_concurrency``), and ``finish`` (results to strings, ``outputs_to_state`` and
``tool_call_counts`` applied in call order whatever the completion order).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from itertools import islice
from typing import Any

from agentfsm.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    MachineError,
    ToolArgumentsError,
    ToolError,
    ToolInvocationError,
    ToolNotFoundError,
    ToolTimeoutError,
    check_timeout,
)
from agentfsm.interrupts import ASK_USER, AskUser, outside_run
from agentfsm.machine import (
    CALL_DISPATCH,
    CALL_DONE,
    CALL_FAILED,
    CALL_PROPOSED,
    CALL_READY,
    CALL_REJECTED,
    CallStatus,
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
)
from agentfsm.pauses import InputQuestion
from agentfsm.reconcile import Reconciled
from agentfsm.serialization import deserialize_value, serialize_value
from agentfsm.signatures import names_keyword
from agentfsm.state import State
from agentfsm.tools.progress import ProgressReporter, unheard
from agentfsm.tools.tool import REPORT_PROGRESS, Tool, default_output_to_string
from agentfsm.tools.toolset import Toolset, check_unique_names, flatten_tools
from agentfsm.workers import result_within, run_in_own_thread


@dataclass(slots=True)
class CallOutcome:
    """What running one call produced: a value or an exception."""

    value: Any = None
    error: Exception | None = None

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


@dataclass(slots=True)
class PreparedCall:
    """One tool call of a reply on its way to a result: the checked call, its tool, and where it stands."""

    call: ToolCall
    #: How the call is known in snapshots: its id, or ``#<position>`` in the reply without one.
    key: str
    tool: Tool | None
    arguments: dict[str, Any]
    status: CallStatus
    error: ToolError | None = None
    outcome: CallOutcome | None = None
    #: The confirmation decision taken for it (a ``ToolExecutionDecision``), if one was needed.
    decision: Any = None
    #: What its tool's ``report_progress`` is given, set by the driver of a run someone listens to
    #: (``None``: the reports are checked and dropped). Never stored: progress is live only.
    reporter: ProgressReporter | None = None
    #: Attempts that failed and were retried (its tool's ``Retry``): kept in snapshots, so a resumed run counts on.
    attempts: int = 0
    #: What its tool's reconcile function answered for it in doubt (``agentfsm.reconcile``), in this run object.
    reconciled: Reconciled | None = None
    #: What its tool's ``ask_user`` is given (``agentfsm.interrupts.Asker``), set by the run for the
    #: call's attempt (``None``: asking raises ``ConfigurationError``, no run can pause for it).
    asker: AskUser | None = None
    #: The question it asked and waits for an answer to (an ``InputQuestion``), while it waits.
    question: InputQuestion | None = None


def blocked(outcome: CallOutcome | None) -> bool:
    """Whether ``outcome`` is a tool-call guardrail's refusal (the call never ran), as given or restored from a snapshot."""
    return (
        outcome is not None and outcome.error is not None and error_type_name(outcome.error) == "ToolCallBlockedError"
    )


class RecordedToolError(Exception):
    """An exception a tool raised before the run was paused, restored from a snapshot."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


def error_type_name(error: Exception) -> str:
    """The exception's class name, also for errors restored from a snapshot."""
    return error.type_name if isinstance(error, RecordedToolError) else type(error).__name__


def timed_out(outcome: CallOutcome | None) -> bool:
    """Whether a call's outcome is that it did not finish within its timeout (also as restored from a snapshot)."""
    return outcome is not None and outcome.error is not None and error_type_name(outcome.error) == "ToolTimeoutError"


def _timeout_error(tool: Tool, timeout: float) -> ToolTimeoutError:
    return ToolTimeoutError(
        f"Tool {tool.name!r} did not finish within its timeout of {timeout:g} s; the run stopped waiting for it "
        "(a call that cannot be cancelled may still finish: its result is dropped).",
        tool.name,
        timeout,
    )


def call_key(call: ToolCall, position: int) -> str:
    """How a call is known in ``completed_tool_results``: its id, or its position in the reply."""
    return key_of(call.id, position)


def key_of(call_id: str | None, position: int) -> str:
    """A call's key from its id (``None`` when the model gave none) and its position in the reply."""
    return call_id if call_id is not None else f"#{position}"


#: Records each call as it finishes (its ``outcome`` set), in the thread that runs the invoker: it
#: takes the call's ``finish`` edge (``finish_call``; a run's ``AgentRun.tool_completed``).
OnComplete = Callable[[PreparedCall], None]
#: ``execute_async``'s ``on_complete`` may also return an awaitable (a run's write of the finished
#: call): it is awaited before another call starts in the same slot, and once one fails no call starts.
AsyncOnComplete = Callable[[PreparedCall], Awaitable[None] | None]


def finish_call(call: PreparedCall) -> None:
    """The default ``on_complete`` of an invoker used on its own: the call takes its declared ``finish`` edge to DONE.

    A run never uses it: ``AgentRun.tool_completed`` takes the edge through ``AgentRun.move_call``.
    """
    call.status = CALL_DISPATCH.next(call.status, "finish")


class ToolInvoker:
    """Runs tool calls against a set of tools.

    ``raise_on_failure`` turns every failing call (unknown tool, bad arguments, tool exception) into
    a typed exception instead of an error result the model can react to. ``sync_tools_in_threads``
    (async runs only): tool functions are synchronous, so by default each call runs in a worker
    thread and a blocking tool never stalls the event loop; ``False`` runs them inline on the loop,
    one after another, which saves the thread hand-off for tools that return in microseconds (a
    tool with an ``invoke_async`` of its own, such as an MCP tool, is awaited either way).
    A result without ``outputs_to_string`` reaches the model as itself when it is a string, else
    as JSON; ``convert_result_to_json_string=False`` makes it ``str(result)``, as Haystack's
    ToolInvoker does by default. ``tool_timeout`` (seconds) bounds each call of a tool without a
    ``timeout`` of its own: past it, an awaitable tool is cancelled and a sync one abandoned in its
    thread, and the call's outcome is a ``ToolTimeoutError``.
    """

    def __init__(
        self,
        tools: Sequence[Tool] | Toolset,
        raise_on_failure: bool = True,
        tool_concurrency: int = 4,
        tool_streaming_callback_passthrough: bool = False,
        sync_tools_in_threads: bool = True,
        convert_result_to_json_string: bool = True,
        tool_timeout: float | None = None,
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
        self.convert_result_to_json_string = convert_result_to_json_string
        #: Seconds a call of a tool without a ``timeout`` of its own may take (``None``: no limit).
        self.tool_timeout = check_timeout("tool_timeout", tool_timeout)
        self._to_text: Callable[[Any], str] = default_output_to_string if convert_result_to_json_string else str
        self._by_name = {t.name: t for t in self.tools}
        self._executor: ThreadPoolExecutor | None = None

    # -- Haystack's component API -------------------------------------------------------------------

    def run(
        self,
        messages: list[ChatMessage],
        state: State | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, Any]:
        """Run the tool calls of ``messages``: ``{"tool_messages": [...], "state": state}``, as Haystack's ToolInvoker.

        The calls of every message run (a message without calls has none), in parallel up to
        ``tool_concurrency``; ``state`` (a new empty one when None) gives inputs and takes outputs.
        """
        state = State({}) if state is None else state
        calls = self.prepare([call for message in messages for call in message.tool_calls], state)
        self.execute_sync(calls, streaming_callback)
        return {"tool_messages": self.finish(calls, state), "state": state}

    async def run_async(
        self,
        messages: list[ChatMessage],
        state: State | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, Any]:
        """``run`` on the event loop: the calls run in worker threads (or are awaited), never blocking it."""
        state = State({}) if state is None else state
        calls = self.prepare([call for message in messages for call in message.tool_calls], state)
        await self.execute_async(calls, streaming_callback)
        return {"tool_messages": self.finish(calls, state), "state": state}

    # -- prepare ----------------------------------------------------------------------------------

    def check(
        self, calls: Iterable[ToolCall], state: State, tools: dict[str, Tool] | None = None
    ) -> list[PreparedCall]:
        """Resolve and check each call: all are ``PROPOSED``, a refused one with its ``error``.

        ``tools`` overrides the invoker's tools for this run. The caller moves each call on: a run
        takes its ``check`` or ``refuse`` edge through ``AgentRun.move_call``.
        """
        by_name = self._by_name if tools is None else tools
        return [self._prepare_one(call, key_of(call.id, i), state, by_name) for i, call in enumerate(calls)]

    def prepare(
        self, calls: Iterable[ToolCall], state: State, tools: dict[str, Tool] | None = None
    ) -> list[PreparedCall]:
        """``check`` the calls, each then ``READY`` or ``FAILED``: for an invoker used on its own, without a run."""
        checked = self.check(calls, state, tools)
        for c in checked:
            c.status = CALL_DISPATCH.next(c.status, "check" if c.error is None else "refuse")
        return checked

    def _prepare_one(self, call: ToolCall, key: str, state: State, by_name: dict[str, Tool]) -> PreparedCall:
        tool = by_name.get(call.tool_name)
        if tool is None:
            available = ", ".join(sorted(by_name)) or "none"
            error = ToolNotFoundError(f"Tool {call.tool_name!r} not found. Available tools: {available}.")
            return self._failed(call, key, None, error)
        if RAW_ARGUMENTS_KEY in call.arguments:
            bad_json = ToolArgumentsError(
                f"The arguments for tool {call.tool_name!r} are not a valid JSON object: "
                f"{call.arguments[RAW_ARGUMENTS_KEY]!r}. Send the arguments as a JSON object."
            )
            return self._failed(call, key, tool, bad_json)
        try:
            tool.validate_arguments(call.arguments)
        except ToolArgumentsError as error:
            return self._failed(call, key, tool, error)
        arguments = dict(call.arguments)
        if tool.inputs_from_state:
            for state_key, param in tool.inputs_from_state.items():
                if param not in arguments and state.has(state_key):
                    arguments[param] = state.get(state_key)
        return PreparedCall(call, key, tool, arguments, CALL_PROPOSED)

    def _failed(self, call: ToolCall, key: str, tool: Tool | None, error: ToolError) -> PreparedCall:
        if self.raise_on_failure:
            raise error
        return PreparedCall(call, key, tool, dict(call.arguments), CALL_PROPOSED, error)

    # -- execute ----------------------------------------------------------------------------------

    def _arguments(
        self, tool: Tool, prepared: PreparedCall, streaming_callback: StreamingCallback | None
    ) -> dict[str, Any]:
        """The call's arguments, with what the run passes to a tool that declares it: the streaming callback, a reporter."""
        arguments = prepared.arguments
        if (
            streaming_callback is not None
            and self.tool_streaming_callback_passthrough
            and names_keyword(tool.function, "streaming_callback")
        ):
            arguments = {**arguments, "streaming_callback": streaming_callback}
        if tool.takes_progress:
            arguments = {**arguments, REPORT_PROGRESS: unheard if prepared.reporter is None else prepared.reporter}
        if tool.takes_ask:
            arguments = {**arguments, ASK_USER: outside_run if prepared.asker is None else prepared.asker}
        return arguments

    def timeout_of(self, tool: Tool) -> float | None:
        """Seconds a call of ``tool`` may take: its own ``timeout``, else the invoker's ``tool_timeout``."""
        return tool.timeout if tool.timeout is not None else self.tool_timeout

    def invoke(self, prepared: PreparedCall, streaming_callback: StreamingCallback | None = None) -> CallOutcome:
        """Run one ready call: what its tool returned, or the exception it raised.

        A call with a timeout runs in a thread of its own, waited for that long: past it, the outcome
        is a ``ToolTimeoutError`` and the thread is abandoned (its result, if it comes, is dropped).
        """
        tool = prepared.tool
        assert tool is not None
        # Without a streaming callback or a reporter to pass: the call's own arguments.
        arguments = (
            prepared.arguments
            if streaming_callback is None and not tool.takes_progress and not tool.takes_ask
            else self._arguments(tool, prepared, streaming_callback)
        )
        timeout = self.timeout_of(tool)
        try:
            if timeout is None:
                return CallOutcome(tool.invoke(**arguments))
            done, value = result_within(run_in_own_thread(tool.invoke, **arguments), timeout)
            return CallOutcome(value) if done else CallOutcome(None, _timeout_error(tool, timeout))
        except Exception as exc:
            return CallOutcome(None, exc)

    async def invoke_async(
        self, prepared: PreparedCall, streaming_callback: StreamingCallback | None = None, *, inline: bool = False
    ) -> CallOutcome:
        """Like ``invoke``, awaiting the tool's ``invoke_async`` (by default ``invoke`` in a worker thread).

        ``inline``: a tool without an ``invoke_async`` of its own runs on the event loop instead; an
        awaitable one (an MCP tool) is awaited all the same, so it never blocks the loop.
        """
        tool = prepared.tool
        assert tool is not None
        arguments = self._arguments(tool, prepared, streaming_callback)
        timeout = self.timeout_of(tool)
        try:
            if timeout is None:
                if inline and not tool.awaitable:
                    return CallOutcome(tool.invoke(**arguments))
                return CallOutcome(await tool.invoke_async(**arguments))
            # A timed call never runs inline (the loop could not stop waiting): an awaitable tool is
            # cancelled at the timeout, a sync one runs in a thread of its own that is abandoned then.
            running = tool.invoke_async(**arguments) if tool.awaitable else self._wrapped(tool, arguments)
            try:
                async with asyncio.timeout(timeout) as bound:
                    return CallOutcome(await running)
            except TimeoutError:
                if not bound.expired():
                    raise  # the tool's own: its outcome, as any error it raises
                return CallOutcome(None, _timeout_error(tool, timeout))
        except Exception as exc:
            return CallOutcome(None, exc)

    @staticmethod
    async def _wrapped(tool: Tool, arguments: dict[str, Any]) -> Any:
        return await asyncio.wrap_future(run_in_own_thread(tool.invoke, **arguments))

    @staticmethod
    def _done(call: PreparedCall, outcome: CallOutcome, on_complete: OnComplete) -> None:
        call.outcome = outcome
        on_complete(call)

    def execute_sync(
        self,
        calls: Sequence[PreparedCall],
        streaming_callback: StreamingCallback | None = None,
        on_complete: OnComplete = finish_call,
    ) -> None:
        """Run the ready calls, in a thread pool when several may run at once; each gets its outcome.

        ``on_complete(call)`` is called in the calling thread as each call finishes: it records the
        call as done (the default, ``finish_call``, moves it to DONE). A call starts in a finished
        one's place once that one is recorded; when ``on_complete`` raises, no further call starts.
        """
        ready = [c for c in calls if c.status is CALL_READY]
        if len(ready) > 1 and self.tool_concurrency > 1:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.tool_concurrency, thread_name_prefix="agentfsm-tool")
            # A call starts once a running one is recorded (as under execute_async): a failed
            # on_complete leaves the calls not started yet unstarted.
            waiting = iter(ready)
            running = {
                self._executor.submit(self.invoke, c, streaming_callback): c
                for c in islice(waiting, self.tool_concurrency)
            }
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    self._done(running.pop(future), future.result(), on_complete)
                    following = next(waiting, None)
                    if following is not None:
                        running[self._executor.submit(self.invoke, following, streaming_callback)] = following
        else:
            for c in ready:
                self._done(c, self.invoke(c, streaming_callback), on_complete)

    async def execute_async(
        self,
        calls: Sequence[PreparedCall],
        streaming_callback: StreamingCallback | None = None,
        on_complete: AsyncOnComplete = finish_call,
    ) -> None:
        """Like ``execute_sync``, on the event loop: calls run in worker threads, at most ``tool_concurrency`` at once.

        With ``sync_tools_in_threads=False`` they run inline, one after another. An ``on_complete``
        that returns an awaitable is awaited before the next call starts in its place: when it fails,
        no further call starts, as with ``execute_sync``, and its error is raised.
        """
        ready = [c for c in calls if c.status is CALL_READY]
        if not self.sync_tools_in_threads:
            for c in ready:
                c.outcome = await self.invoke_async(c, streaming_callback, inline=True)
                if (pending := on_complete(c)) is not None:
                    await pending
        elif len(ready) > 1 and self.tool_concurrency > 1:
            semaphore = asyncio.Semaphore(self.tool_concurrency)
            failed: list[BaseException] = []

            async def run_one(c: PreparedCall) -> None:
                async with semaphore:
                    if failed:  # a call's on_complete failed: as in execute_sync, nothing more starts or is recorded
                        return
                    outcome = await self.invoke_async(c, streaming_callback)
                    if failed:
                        return
                    try:
                        await self._done_async(c, outcome, on_complete)
                    except BaseException as exc:
                        failed.append(exc)

            # Every task ends before this returns (none is left running unseen); the first failure is raised.
            await asyncio.gather(*(run_one(c) for c in ready))
            if failed:
                raise failed[0]
        else:
            for c in ready:
                c.outcome = await self.invoke_async(c, streaming_callback)
                if (pending := on_complete(c)) is not None:
                    await pending

    @staticmethod
    async def _done_async(call: PreparedCall, outcome: CallOutcome, on_complete: AsyncOnComplete) -> None:
        call.outcome = outcome
        pending = on_complete(call)
        if pending is not None:
            await pending

    def close(self) -> None:
        """Release the worker threads of the sync thread pool."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- finish -----------------------------------------------------------------------------------

    def finish(self, calls: Sequence[PreparedCall], state: State) -> list[ChatMessage]:
        """Tool-result messages in call order; State updated through its handlers."""
        messages = []
        counts: dict[str, int] = dict(state.data.get("tool_call_counts") or {})
        for c in calls:
            result = self._result(c, state)
            if c.status is CALL_DONE and c.tool is not None and not c.tool.is_answer and not blocked(c.outcome):
                counts[c.tool.name] = counts.get(c.tool.name, 0) + 1
            meta = {} if c.decision is None else {"confirmation": c.decision.to_dict()}
            messages.append(ChatMessage(ChatRole.TOOL, (result,), None, meta))
        if "tool_call_counts" in state.schema:
            state.set("tool_call_counts", counts)
        return messages

    def _result(self, c: PreparedCall, state: State) -> ToolCallResult:
        if c.status is not CALL_DONE or c.outcome is None or c.tool is None:
            return self._result_without_run(c)  # most calls ran: theirs is read below
        tool, outcome = c.tool, c.outcome
        if blocked(outcome):  # it never ran: a guardrail's reason is its result, never raised
            return ToolCallResult(str(outcome.error), c.call, error=True)
        if outcome.error is not None and self.raise_on_failure and isinstance(outcome.error, ToolTimeoutError):
            raise outcome.error
        if outcome.error is not None:
            error = ToolInvocationError(
                f"Failed to invoke tool {tool.name!r} with arguments {c.call.arguments}: "
                f"{error_type_name(outcome.error)}: {outcome.error}"
            )
            if self.raise_on_failure:
                raise error from outcome.error
            return ToolCallResult(str(error), c.call, error=True)
        try:
            if tool.outputs_to_state:
                self._write_state(tool, outcome.value, state)
            text = self._to_string(tool, outcome.value) if tool.outputs_to_string else self._to_text(outcome.value)
        except (KeyError, TypeError, ValueError) as exc:
            error = ToolInvocationError(f"Tool {tool.name!r} returned a result that could not be used: {exc}")
            if self.raise_on_failure:
                raise error from exc
            return ToolCallResult(str(error), c.call, error=True)
        return ToolCallResult(text, c.call)

    @staticmethod
    def _result_without_run(c: PreparedCall) -> ToolCallResult:
        """The result of a call that did not run: refused, or rejected by a person."""
        if c.status is CALL_FAILED:
            return ToolCallResult(str(c.error), c.call, error=True)
        if c.status is CALL_REJECTED:
            feedback = c.decision.feedback if c.decision is not None else None
            rejection = f"Tool execution for {c.call.tool_name!r} was rejected by the user." + (
                f" With feedback: {feedback}" if feedback else ""
            )
            return ToolCallResult(rejection, c.call, error=True)
        raise MachineError(f"Tool call {c.key} to {c.call.tool_name!r} has no result yet: it is {c.status}.")

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
            return self._to_text(result)
        if config.get("raw_result"):
            handler = config.get("handler")
            raw = self._pick(result, config.get("source"))
            raw = handler(raw) if handler else raw
            if not isinstance(raw, list) or not all(isinstance(p, (TextContent, ImageContent)) for p in raw):
                raise TypeError("a raw_result tool (or its handler) must return a list of TextContent/ImageContent")
            return raw
        if "source" in config or "handler" in config or "raw_result" in config:
            handler = config.get("handler") or self._to_text
            return str(handler(self._pick(result, config.get("source"))))
        parts = {
            key: (spec.get("handler") or self._to_text)(self._pick(result, spec.get("source")))
            for key, spec in config.items()
        }
        return self._to_text(parts)
