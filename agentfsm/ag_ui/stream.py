"""A run's events as AG-UI events: ``EventStream`` translates, event by event, and does no I/O.

- a model call's streamed text is a text message (``TEXT_MESSAGE_START``, ``_CONTENT`` per chunk,
  ``_END`` when the call ends), named ``<run id>-<its index in the conversation>``;
- a tool call is ``TOOL_CALL_START``, ``_ARGS`` (its arguments as JSON) and ``_END``, as soon as
  the run knows it (a streamed reply's calls, else when the call starts, or when the run pauses
  for it), then ``TOOL_CALL_RESULT`` when it ends (for a call that ran no tool, rejected say, with
  the conversation at the end: the result the model reads);
- each active phase the run is in is a step (``STEP_STARTED`` / ``STEP_FINISHED``, named by the
  phase: ``LLM_CALL``, ``TOOL_RUN``...); a tool's progress is a ``CUSTOM`` event
  (``agentfsm:tool_progress``);
- a pause ends the run with the conversation (``MESSAGES_SNAPSHOT``) and the State
  (``STATE_SNAPSHOT``), then ``RUN_FINISHED`` with the interrupt outcome: one interrupt per question
  (``agentfsm._serving.questions``), or the cancelled outcome for a cancelled run;
- the end is the conversation, the State as a patch against the state it started from
  (``STATE_DELTA``), and ``RUN_FINISHED`` (its ``result``: the last message's text; ``usage``: the
  model calls of this run, per model); a failed run ends with ``RUN_ERROR``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from agentfsm._serving.questions import Question
from agentfsm.ag_ui.messages import call_id, message_id, result_id, result_text, to_ag_ui_messages
from agentfsm.ag_ui.state import client_state, json_patch
from agentfsm.events import (
    Event,
    ModelChunk,
    ModelEnded,
    ModelFailed,
    ModelStarted,
    PhaseChanged,
    RunEnded,
    RunPaused,
    RunStarted,
    ToolEnded,
    ToolProgress,
    ToolStarted,
)
from agentfsm.machine import ACTIVE_PHASES
from agentfsm.messages import ChatMessage, ToolCall
from agentfsm.pauses import Cancelled

#: The phases that are steps (``STEP_STARTED`` on entering one, ``STEP_FINISHED`` on leaving it).
STEP_PHASES = frozenset(p.value for p in ACTIVE_PHASES)


def _now() -> int:
    return int(time.time() * 1000)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class EventStream:
    """Translates one AG-UI run's agentfsm events (``translate``) into AG-UI events, in order.

    ``thread_id`` and ``run_id`` are the AG-UI input's; ``base_state`` the state the client holds
    (what State deltas patch); ``declared`` the State keys the agent's schema declares;
    ``questions`` turns a paused run's snapshot into its open questions. A failed run's error is
    told by its type only, unless ``expose_errors`` (its message may hold what a tool or model said).
    ``announced``: the ids of calls the client was told of already (a resumed run's pending calls,
    which an earlier run announced: their results come against them, and they are not announced again).
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        base_state: Any,
        declared: Iterable[str],
        questions: Any,
        expose_errors: bool = False,
        announced: Iterable[str] = (),
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.base_state = base_state
        self.declared = frozenset(declared)
        self.questions = questions
        self.expose_errors = expose_errors
        #: The agentfsm run's id, once it started.
        self.agent_run_id: str | None = None
        self._text: str | None = None
        self._reply: str | None = None
        self._step: str | None = None
        self._announced: set[str] = set(announced)
        self._resulted: set[str] = set()
        self._usage: dict[str, dict[str, int]] = {}

    # -- one event ------------------------------------------------------------------------------

    def translate(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events ``event`` stands for (none for those the protocol has no word for)."""
        match event:
            case RunStarted():
                self.agent_run_id = event.run_id
                return [self.started(event.resumed)]
            case PhaseChanged():
                return self._phase(event.source, event.dest)
            case ModelStarted():
                self._reply = message_id(event.run_id, event.messages)
                return []
            case ModelChunk():
                return self._chunk(event)
            case ModelEnded():
                self._count(event.model, event.usage)
                return self._close_text()
            case ModelFailed():
                return self._close_text()
            case ToolStarted():
                return self._announce(event.call_id or event.call, event.tool, event.arguments)
            case ToolProgress():
                value = {"toolCallId": event.call_id or event.call, "tool": event.tool, "progress": event.progress}
                value |= {"total": event.total, "message": event.message}
                return [CustomEvent(name="agentfsm:tool_progress", value=value, timestamp=_now())]
            case ToolEnded():
                ident = event.call_id or event.call
                out = self._announce(ident, event.tool, None)
                content = event.error if event.error is not None else _as_text(event.result)
                self._resulted.add(ident)
                out.append(
                    ToolCallResultEvent(
                        message_id=result_id(event.run_id, ident),
                        tool_call_id=ident,
                        content=content,
                        role="tool",
                        timestamp=_now(),
                    )
                )
                return out
            case RunPaused():
                return self._paused(event)
            case RunEnded():
                return self._ended(event)
        return []

    # -- pieces ---------------------------------------------------------------------------------

    def started(self, resumed: bool) -> RunStartedEvent:
        """The run's ``RUN_STARTED``, naming the agentfsm run it goes on in (``metadata["agentfsm"]``)."""
        return RunStartedEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            protocol_version=PROTOCOL_VERSION,
            metadata={"agentfsm": {"runId": self.agent_run_id, "resumed": resumed}},
            timestamp=_now(),
        )

    def _phase(self, source: str, dest: str) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self._step is not None and source == self._step:
            out += self._close_text()
            out.append(StepFinishedEvent(step_name=self._step, timestamp=_now()))
            self._step = None
        if dest in STEP_PHASES:
            out.append(StepStartedEvent(step_name=dest, timestamp=_now()))
            self._step = dest
        return out

    def _chunk(self, event: ModelChunk) -> list[BaseEvent]:
        chunk = event.chunk
        out: list[BaseEvent] = []
        reply = self._reply or message_id(event.run_id, 0)
        if chunk.content:
            if self._text is None:
                self._text = reply
                out.append(TextMessageStartEvent(message_id=reply, role="assistant", timestamp=_now()))
            out.append(TextMessageContentEvent(message_id=reply, delta=chunk.content, timestamp=_now()))
        for position, call in enumerate(chunk.tool_calls or []):
            if call.id is not None:  # a whole call (a streamed delta has no id of its own here)
                out += self._announce(call_id(call, position), call.tool_name, call.arguments)
        return out

    def _close_text(self) -> list[BaseEvent]:
        if self._text is None:
            return []
        ended = TextMessageEndEvent(message_id=self._text, timestamp=_now())
        self._text = None
        return [ended]

    def _announce(self, ident: str, tool: str, arguments: Mapping[str, Any] | None) -> list[BaseEvent]:
        """``TOOL_CALL_START`` / ``_ARGS`` / ``_END`` for a call the client was not told of yet."""
        if ident in self._announced:
            return []
        self._announced.add(ident)
        out = self._close_text()
        out.append(
            ToolCallStartEvent(tool_call_id=ident, tool_call_name=tool, parent_message_id=self._reply, timestamp=_now())
        )
        if arguments is not None:
            out.append(ToolCallArgsEvent(tool_call_id=ident, delta=json.dumps(dict(arguments)), timestamp=_now()))
        out.append(ToolCallEndEvent(tool_call_id=ident, timestamp=_now()))
        return out

    def _close(self) -> list[BaseEvent]:
        out = self._close_text()
        if self._step is not None:
            out.append(StepFinishedEvent(step_name=self._step, timestamp=_now()))
            self._step = None
        return out

    def _count(self, model: str, usage: Mapping[str, int]) -> None:
        counted = self._usage.setdefault(model, {})
        for ours, names in (
            ("input_tokens", ("prompt_tokens", "input_tokens")),
            ("output_tokens", ("completion_tokens", "output_tokens")),
        ):
            for name in names:
                if isinstance(usage.get(name), int):
                    counted[ours] = counted.get(ours, 0) + usage[name]
                    break

    def _usage_list(self) -> list[TokenUsage] | None:
        entries = []
        for model, counted in self._usage.items():
            if counted:
                total = counted.get("input_tokens", 0) + counted.get("output_tokens", 0)
                entries.append(
                    TokenUsage(
                        model=model,
                        input_tokens=counted.get("input_tokens"),
                        output_tokens=counted.get("output_tokens"),
                        total_tokens=total,
                    )
                )
        return entries or None

    def _snapshot_messages(self, run_id: str, conversation: list[ChatMessage]) -> list[BaseEvent]:
        """The results of announced calls that ran no tool (rejected, settled...), then the whole conversation."""
        out: list[BaseEvent] = []
        for message in conversation:
            result = message.tool_call_result
            ident = result.origin.id if result is not None else None
            if ident is not None and ident in self._announced and ident not in self._resulted:
                self._resulted.add(ident)
                out.append(
                    ToolCallResultEvent(
                        message_id=result_id(run_id, ident),
                        tool_call_id=ident,
                        content=result_text(message),
                        role="tool",
                        timestamp=_now(),
                    )
                )
        out.append(MessagesSnapshotEvent(messages=to_ag_ui_messages(run_id, conversation), timestamp=_now()))
        return out

    def _paused(self, event: RunPaused) -> list[BaseEvent]:
        snapshot = event.snapshot
        out = self._close()
        calls = snapshot.pending_tool_calls
        reply = message_id(snapshot.run_id, max(len(snapshot.messages) - 1, 0))
        self._reply = self._reply or reply
        for position, data in enumerate(calls):
            call = ToolCall.from_dict(data)
            out += self._announce(call_id(call, position), call.tool_name, call.arguments)
        conversation = [ChatMessage.from_dict(m) for m in snapshot.messages]
        out += self._snapshot_messages(snapshot.run_id, conversation)
        out.append(StateSnapshotEvent(snapshot=snapshot.state, timestamp=_now()))
        asked: list[Question] = self.questions(snapshot)
        if isinstance(snapshot.pause, Cancelled) or not asked:
            outcome: Any = RunFinishedCancelledOutcome()
        else:
            outcome = RunFinishedInterruptOutcome(interrupts=[interrupt(q) for q in asked])
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=outcome,
                usage=self._usage_list(),
                metadata={"agentfsm": {"runId": snapshot.run_id, "seq": snapshot.seq}},
                timestamp=_now(),
            )
        )
        return out

    def _ended(self, event: RunEnded) -> list[BaseEvent]:
        out = self._close()
        if event.error is not None or event.result is None:
            error = event.error or "RunError: the run ended without a result."
            kind = error.partition(":")[0]
            message = error if self.expose_errors else f"The run failed ({kind}); the server's log says more."
            out.append(self.error(message, kind))
            return out
        result = event.result
        out += self._snapshot_messages(event.run_id, list(result.get("messages") or []))
        state = client_state(result, self.declared)
        if isinstance(self.base_state, dict):
            patch: Any = json_patch(self.base_state, state)  # the operations' dicts, validated into the event's models
            out.append(StateDeltaEvent(delta=patch, timestamp=_now()))
        else:
            out.append(StateSnapshotEvent(snapshot=state, timestamp=_now()))
        last = getattr(result, "last_message", None)
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                result=last.text if isinstance(last, ChatMessage) else None,
                outcome=RunFinishedSuccessOutcome(),
                usage=self._usage_list(),
                metadata={"agentfsm": {"runId": event.run_id, "exitReason": event.exit_reason}},
                timestamp=_now(),
            )
        )
        return out

    def error(self, message: str, code: str) -> RunErrorEvent:
        """A ``RUN_ERROR``: what went wrong, and a machine-readable code."""
        return RunErrorEvent(message=message, code=code, usage=self._usage_list(), timestamp=_now())


def interrupt(question: Question) -> Interrupt:
    """A question as the AG-UI interrupt it is (its call's id as ``toolCallId``, its tool and arguments in ``metadata``)."""
    metadata = None
    if question.tool_name is not None:
        metadata = {"agentfsm": {"toolName": question.tool_name, "arguments": question.arguments}}
    return Interrupt(
        id=question.id,
        reason=question.reason,
        message=question.message,
        tool_call_id=question.tool_call_id,
        response_schema=question.response_schema,
        metadata=metadata,
    )
