"""``A2AAgentTool``: a remote A2A agent as a tool of this agent, its ``input-required`` a pause of this run.

The model calls the tool with a ``request`` (plain language); the tool sends it to the remote
agent as a message of a context of its own, named after the call's idempotency key (the same each
time the call runs, in any process), and returns the remote's answer (``RemoteAgentError`` for a
task that failed, was cancelled or rejected: the model reads it as the call's error).

The journal's rules hold for the remote task: before it sends anything, a call looks its context's
task up at the remote (A2A ``ListTasks``), so a call that runs again after a crash follows the
task it had started instead of starting another; such a tool is ``idempotent`` and runs again on
resume. With ``lookup=False`` (a remote that cannot list tasks) it is not: a call in doubt after a
crash waits for a person's decision, as any call of a tool that is not idempotent does.

A remote that needs input pauses this run. Give the agent the tool's relay as the tool's
confirmation strategy (``confirmation_strategies={tool.name: tool.relay}``): it sends the request
while the call is confirmed (CONFIRM), and when the remote task waits for input it defers, and the
run pauses with the call waiting for a decision, as any confirmation pause. The remote's questions
are ``await tool.remote_questions(snapshot, call_id)``. The caller answers through this run's pause:

- a decision approving the call (``decisions=[ToolExecutionDecision(tool.name, True, call_id)]``,
  or an interrupt answered on an AG-UI or A2A endpoint in front of this agent) approves what the
  remote asks: the call runs, relays the approval to every question of the remote task, and
  returns the remote's answer (a remote that asks again then is the call's error);
- answers given as ``hook_context={RELAY_ANSWERS: {call_id: [{"interruptId": ..., "status": ...,
  "payload": {...}}]}}`` on resume, without a decision for the call, are relayed one by one, and
  the call stays in CONFIRM until the remote is done: a remote that asks again pauses this run
  again, and a remote that is done lets the call run, which returns its answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from a2a.helpers import get_artifact_text, get_text_parts, new_text_part
from a2a.types import Task, TaskState

from agentfsm._serving.questions import Reply
from agentfsm.a2a.parts import answer_parts, questions_in
from agentfsm.a2a.remote import WAITING, RemoteAgent, state_name
from agentfsm.decisions import ToolExecutionDecision
from agentfsm.errors import ConfigurationError, HITLBreakpointException, RemoteAgentError
from agentfsm.snapshot import AgentSnapshot
from agentfsm.tools.tool import Tool, idempotency_key

#: The ``hook_context`` key under which answers to a remote's questions are given, by call id.
RELAY_ANSWERS = "a2a_answers"

_T = TypeVar("_T")


def in_own_loop(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` to its end from sync code: in this thread's own loop, or in a thread when one runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def context_of(key: str) -> str:
    """The remote context of the call whose idempotency key is ``key``."""
    return f"agentfsm-{key}"


def waits(task: Task) -> bool:
    """Whether the remote task waits for the caller (``input-required``)."""
    return task.status.state in WAITING


def answer_of(task: Task) -> str:
    """A completed task's answer: its status message's text, else its artifacts' text."""
    if task.status.HasField("message"):
        text = "\n".join(get_text_parts(list(task.status.message.parts)))
        if text:
            return text
    return "\n".join(get_artifact_text(a) for a in task.artifacts if get_artifact_text(a))


PARAMETERS = {
    "type": "object",
    "properties": {"request": {"type": "string", "description": "What to ask the remote agent, in plain language."}},
    "required": ["request"],
}


class A2AAgentTool(Tool):
    """The A2A agent at ``url`` as a tool named ``name`` (see the module's docstring).

    Args:
        url: The remote agent's base URL (its card is at ``/.well-known/agent-card.json``).
        name: The tool's name, as the model calls it.
        description: What the remote agent does, for the model.
        token: Sent to the remote as ``Authorization: Bearer <token>``.
        timeout: Seconds a call (and each wait for the remote) may take.
        lookup: Look a call's remote task up before sending (the remote lists tasks by context):
            the tool is then idempotent. Without, calls in doubt after a crash wait for a decision.
    """

    def __init__(
        self,
        url: str,
        name: str,
        description: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 120.0,
        lookup: bool = True,
    ) -> None:
        Tool.__init__(
            self,
            name=name,
            description=description or f"Delegate a task to the remote agent at {url}: say what you need done.",
            parameters=dict(PARAMETERS),
            function=self._call,
            idempotent=lookup,
            timeout=timeout,
        )
        self.remote = RemoteAgent(url, token=token, timeout=timeout)
        self.lookup = lookup
        #: The remote task of each call this process started (by idempotency key), for ``lookup=False``.
        self._tasks: dict[str, str] = {}
        #: The confirmation strategy that lets a remote waiting for input pause the run.
        self.relay = RemoteRelay(self)

    def to_dict(self) -> dict[str, Any]:
        """Not supported: a remote agent is configured in code (its URL and token), never from data."""
        raise ConfigurationError(f"A2AAgentTool {self.name!r} is configured in code: it has no data form.")

    # -- the call -------------------------------------------------------------------------------

    def _call(self, request: str, idempotency_key: str) -> str:
        return in_own_loop(self.call(request, idempotency_key))

    async def invoke_async(self, **kwargs: Any) -> Any:
        """Awaited under ``run_async``: cancelling the run cancels the wait (the remote task goes on)."""
        return await self.call(kwargs["request"], kwargs["idempotency_key"])

    async def call(self, request: str, key: str) -> str:
        """The remote's answer to ``request`` for the call whose idempotency key is ``key``.

        Raises:
            RemoteAgentError: the remote could not be reached, its task failed, was cancelled or
                rejected, or it asks for input again after the approval.
        """
        task = await self.start(request, key)
        if waits(task):  # the call was approved while the remote waited: the approval is relayed
            replies = [Reply(str(q.get("id")), "resolved", approval(q)) for q in self.questions_of(task)]
            task = await self.answer(task, replies)
            if waits(task):
                raise RemoteAgentError(
                    f"The remote agent asks for more input (task {task.id}): "
                    f"{'; '.join(str(q.get('message')) for q in self.questions_of(task))}"
                )
        if task.status.state != TaskState.TASK_STATE_COMPLETED:
            why = answer_of(task)
            raise RemoteAgentError(f"The remote task {task.id} ended {state_name(task)}" + (f": {why}" if why else "."))
        return answer_of(task)

    async def start(self, request: str, key: str) -> Task:
        """The call's remote task, settled: the one it started already (looked up), else a new one for ``request``."""
        context = context_of(key)
        found: Task | None = None
        if self.lookup:
            found = await self.remote.find(context)
        elif key in self._tasks:
            found = await self.remote.get(self._tasks[key])
        if found is not None:
            return await self.remote.settle(found)
        task = await self.remote.send([new_text_part(request)], context_id=context, message_id=key)
        self._tasks[key] = task.id
        return task

    async def answer(self, task: Task, replies: Sequence[Reply]) -> Task:
        """Relay ``replies`` to the questions of the waiting ``task``; the task once the remote settled it again."""
        return await self.remote.send(
            answer_parts(replies), context_id=task.context_id, message_id=uuid.uuid4().hex, task_id=task.id
        )

    @staticmethod
    def questions_of(task: Task) -> list[dict[str, Any]]:
        """The questions a waiting remote task asks (as data: ``id``, ``message``, ``responseSchema``...)."""
        return questions_in(task.status.message) if task.status.HasField("message") else []

    async def remote_questions(self, snapshot: AgentSnapshot, call_id: str) -> list[dict[str, Any]]:
        """What the remote task of the call ``call_id`` of the paused run ``snapshot`` asks (empty: it asks nothing)."""
        key = idempotency_key(snapshot.run_id, snapshot.step, call_id)
        found = await self.remote.find(context_of(key)) if self.lookup else None
        if found is None and key in self._tasks:
            found = await self.remote.get(self._tasks[key])
        return self.questions_of(found) if found is not None and waits(found) else []


def approval(question: Mapping[str, Any]) -> dict[str, Any]:
    """The answer that approves a remote's question: ``{"approved": true}`` for a call, ``{}`` otherwise."""
    return {"approved": True} if question.get("toolName") else {}


class RemoteRelay:
    """The confirmation strategy of an ``A2AAgentTool``: the remote task starts in CONFIRM, and a remote that waits defers."""

    def __init__(self, tool: A2AAgentTool) -> None:
        self.tool = tool

    async def run_async(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str,
        idempotency_key: str | None = None,
        hook_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """Approve the call once the remote task is done (the call then reads its answer); defer while it waits.

        Raises:
            HITLBreakpointException: the remote task waits for input; the run pauses.
        """
        if idempotency_key is None:
            raise ConfigurationError("RemoteRelay needs the call's idempotency key: it is given by agentfsm's runs.")
        try:
            task = await self.tool.start(str(tool_params.get("request", "")), idempotency_key)
        except RemoteAgentError:
            return ToolExecutionDecision(tool_name, True, tool_call_id)  # the call runs, and tells the model why not
        given = ((hook_context or {}).get(RELAY_ANSWERS) or {}).get(tool_call_id)
        if waits(task) and given:
            replies = [Reply(str(a.get("interruptId")), a.get("status", "resolved"), a.get("payload")) for a in given]
            task = await self.tool.answer(task, replies)
        if waits(task):
            raise HITLBreakpointException(
                f"The remote agent behind {tool_name} waits for input (task {task.id}).",
                tool_name,
                tool_call_id=tool_call_id,
            )
        return ToolExecutionDecision(tool_name, True, tool_call_id)

    def run(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str,
        idempotency_key: str | None = None,
        hook_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """Sync twin of ``run_async`` (``Agent.run``)."""
        return in_own_loop(
            self.run_async(tool_name, tool_description, tool_params, tool_call_id, idempotency_key, hook_context)
        )
