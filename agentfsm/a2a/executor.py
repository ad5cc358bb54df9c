"""``AgentTaskExecutor``: the agent behind an A2A server, one task a run, task states following the run.

A message that starts a task starts a run on its text (and its data parts, as JSON text); the
task goes ``working``, each model reply's streamed text is an artifact (``reply``) as it comes,
each tool call a ``working`` status with what it runs, and the run's end the task's: ``completed``
with the answer as its status message, ``failed`` (the error's type; its message with
``expose_errors``), ``canceled`` for a run cancelled from outside. A pause is
``input-required``: its status message asks the run's questions (``agentfsm.a2a.parts``) and the
task's metadata names the run (``agentfsm.runId``). A message on that task answers them: the run
resumes from its snapshot in the agent's snapshot store with those answers as its decisions (the
same single-use, argument-bound check as every path), as the same task. An answer that does not fit
leaves the task waiting, and its status says why; nothing runs.

The context (``contextId``) is the thread: a run goes on in one task of a context at a time (a
second task while one runs is ``rejected``), and the context's head run is kept: in the agent's
store, whose threads hold the conversation across tasks (``StoreThreads``, the default for a store
that holds threads: each task's run is the context's next turn), or in this process (``ThreadRuns``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, cast

from a2a.helpers import get_data_parts, get_message_text, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, TaskState
from google.protobuf import json_format

from agentfsm._serving.questions import Question, decide, questions_of
from agentfsm._serving.served import ServedAgent
from agentfsm._serving.threads import ThreadHead, ThreadRuns
from agentfsm.a2a.parts import question_parts, replies_in
from agentfsm.cancellation import RunHandle
from agentfsm.errors import (
    DecisionError,
    ProtocolRequestError,
    SnapshotError,
    ThreadBusyError,
    ToolArgumentsError,
)
from agentfsm.events import Event, ModelChunk, ModelEnded, ModelStarted, RunEnded, RunPaused, RunStarted, ToolStarted
from agentfsm.logs import logger
from agentfsm.machine import TERMINAL_PHASES
from agentfsm.messages import ChatMessage, StreamingChunk
from agentfsm.pauses import Cancelled

if TYPE_CHECKING:
    from agentfsm.agent import Agent
    from agentfsm.snapshot import AgentSnapshot

#: The key of the task's metadata (and of its status updates') that names the agentfsm run.
METADATA_KEY = "agentfsm"

#: Errors that say a message does not fit the task's run (raised before the run does anything).
REQUEST_ERRORS = (ProtocolRequestError, DecisionError, SnapshotError, ToolArgumentsError)


def message_text(context: RequestContext) -> str:
    """The text a message brings: its text parts, then its data parts as JSON."""
    message = context.message
    if message is None:
        return ""
    texts = [get_message_text(message)] if get_message_text(message) else []
    texts += [json.dumps(data, ensure_ascii=False) for data in get_data_parts(list(message.parts))]
    return "\n".join(texts)


class AgentTaskExecutor(ServedAgent, AgentExecutor):
    """Runs ``agent`` for the A2A server's tasks (``a2a.server.agent_execution.AgentExecutor``)."""

    ENDPOINT = "An A2A server"

    def __init__(self, agent: Agent, threads: ThreadRuns | None = None, *, expose_errors: bool = False) -> None:
        super().__init__(agent, threads, expose_errors=expose_errors)
        self._handles: dict[str, RunHandle] = {}

    def questions(self, snapshot: AgentSnapshot) -> list[Question]:
        """The open questions of a paused run of this agent."""
        return questions_of(snapshot, self.tools)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Start the task's run, or resume it with the message's answers; publish the task's states as it goes."""
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        task = context.current_task
        waiting = task is not None and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        if task is None and context.message is not None:  # a new task: it is made before its first status
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        try:
            with self.threads.running(context_id):
                if waiting:
                    assert task is not None
                    ours = json_format.MessageToDict(task.metadata).get(METADATA_KEY, {})
                    options = await self._resume_options(str(ours.get("runId", "")), context)
                    if options is None:
                        return
                else:
                    text = message_text(context)
                    await updater.start_work()
                    options = {"messages": [ChatMessage.from_user(text)]}
                    if self.threads.in_store:  # the run is the context's next turn, in the agent's store
                        options["thread"] = context_id
                await self._run(options, updater, context_id)
        except ThreadBusyError as exc:
            if waiting:
                await self._still_waiting(updater, str(exc), task)
            else:
                await updater.reject(updater.new_agent_message([new_text_part(str(exc))]))
        except REQUEST_ERRORS as exc:
            await self._still_waiting(updater, str(exc), task) if waiting else await updater.failed(
                updater.new_agent_message([new_text_part(str(exc))])
            )

    async def _resume_options(self, run_id: str, context: RequestContext) -> dict[str, Any] | None:
        """``iter_async``'s options that resume the task's paused run with the message's answers.

        Raises:
            ProtocolRequestError: the message's answers do not fit the run's questions.
        """
        store = self.agent.snapshot_store
        assert store is not None
        snapshot = store.latest(run_id)
        if snapshot.phase in TERMINAL_PHASES:  # it went on and ended elsewhere: the store refuses to resume it
            return {"snapshot": snapshot}
        asked = self.questions(snapshot)
        if context.message is None:
            raise ProtocolRequestError("A waiting task is answered by a message. Nothing ran.")
        replies = replies_in(context.message, asked)
        resumption = decide(asked, replies, self.tools)
        return {"snapshot": snapshot, "decisions": resumption.decisions}

    async def _still_waiting(self, updater: TaskUpdater, why: str, task: Any) -> None:
        """Leave a waiting task waiting, its status saying why the message did not answer it (and what it asks)."""
        parts: list[Part] = [new_text_part(why)]
        if task is not None and task.status.HasField("message"):
            parts += [p for p in task.status.message.parts if p.HasField("data")]
        await updater.update_status(TaskState.TASK_STATE_INPUT_REQUIRED, updater.new_agent_message(parts))

    async def _relay(self, chunk: StreamingChunk) -> None:
        own = self.agent.streaming_callback
        if own is not None:
            pending = own(chunk)
            if inspect.isawaitable(pending):
                await pending

    async def _run(self, options: dict[str, Any], updater: TaskUpdater, context_id: str) -> None:
        """Drive the run, publishing its events as the task's."""
        handle = RunHandle()
        self._handles[updater.task_id] = handle
        messages = options.pop("messages", None)
        run = cast(
            "AsyncGenerator[Event, None]", self.agent.iter_async(messages, self._relay, cancel=handle, **options)
        )
        reply: str | None = None
        streamed = started = False
        try:
            async for event in run:
                started = True
                if isinstance(event, RunStarted):
                    self.threads.moved(context_id, ThreadHead(event.run_id, paused=False))
                    metadata = {METADATA_KEY: {"runId": event.run_id, "resumed": event.resumed}}
                    await updater.update_status(TaskState.TASK_STATE_WORKING, metadata=metadata)
                elif isinstance(event, ModelStarted):
                    reply, streamed = f"{event.run_id}-{event.messages}", False
                elif isinstance(event, ModelChunk) and event.chunk.content and reply is not None:
                    await updater.add_artifact(
                        [new_text_part(event.chunk.content)], artifact_id=reply, name="reply", append=streamed
                    )
                    streamed = True
                elif isinstance(event, ModelEnded) and streamed and reply is not None:
                    await updater.add_artifact([], artifact_id=reply, name="reply", append=True, last_chunk=True)
                elif isinstance(event, ToolStarted):
                    note = updater.new_agent_message([new_text_part(f"Running {event.tool}.")])
                    await updater.update_status(TaskState.TASK_STATE_WORKING, note)
                elif isinstance(event, RunPaused):
                    await self._paused(event, updater, context_id)
                elif isinstance(event, RunEnded):
                    await self._ended(event, updater)
        except REQUEST_ERRORS:
            if not started:  # refused before anything ran: the message does not fit the run (a stale answer)
                raise
            logger.warning("A2A task's run failed", task=updater.task_id)
        except Exception as exc:  # a failed run's run_ended said so; the error is for the log only
            logger.warning("A2A task's run failed", task=updater.task_id, error=type(exc).__name__)
        finally:
            await run.aclose()
            self._handles.pop(updater.task_id, None)

    async def _paused(self, event: RunPaused, updater: TaskUpdater, context_id: str) -> None:
        snapshot = event.snapshot
        asked = [] if isinstance(snapshot.pause, Cancelled) else self.questions(snapshot)
        self.threads.moved(context_id, ThreadHead(event.run_id, paused=bool(asked)))
        if not asked:
            await updater.cancel(updater.new_agent_message([new_text_part("The run was cancelled.")]))
            return
        metadata = {METADATA_KEY: {"runId": snapshot.run_id, "seq": snapshot.seq}}
        message = updater.new_agent_message(question_parts(asked))
        await updater.update_status(TaskState.TASK_STATE_INPUT_REQUIRED, message, metadata=metadata)

    async def _ended(self, event: RunEnded, updater: TaskUpdater) -> None:
        if event.error is not None or event.result is None:
            error = event.error or "RunError: the run ended without a result."
            kind = error.partition(":")[0]
            text = error if self.expose_errors else f"The run failed ({kind})."
            await updater.failed(updater.new_agent_message([new_text_part(text)]))
            return
        last = event.result.get("messages", [])[-1:] if event.result.get("messages") else []
        answer = last[0].text if last and isinstance(last[0], ChatMessage) and last[0].text else ""
        await updater.add_artifact([new_text_part(answer)], name="answer", last_chunk=True)
        metadata = {METADATA_KEY: {"runId": event.run_id, "exitReason": event.exit_reason}}
        await updater.update_status(
            TaskState.TASK_STATE_COMPLETED, updater.new_agent_message([new_text_part(answer)]), metadata=metadata
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task: its run stops at its next transition (its snapshot kept), and the task is ``canceled``."""
        handle = self._handles.get(context.task_id or "")
        if handle is not None:
            handle.cancel()
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel(updater.new_agent_message([new_text_part("Cancelled.")]))
