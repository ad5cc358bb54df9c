"""A remote A2A agent as this package calls it: a message sent, its task followed until it settles, found again.

``RemoteAgent`` wraps ``a2a-sdk``'s client (JSON-RPC): ``send`` a message and get its task once
the remote is done with it or waits for input (A2A's blocking ``SendMessage``), ``find`` the task
of a context (``ListTasks``: how a call in doubt after a crash finds its remote task again),
``get`` a task, and ``settle`` one that is still working. Every wait is bounded by ``timeout``;
what goes wrong is a ``RemoteAgentError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, create_client
from a2a.types import (
    AgentCard,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

from agentfsm.errors import RemoteAgentError

#: A task the remote is still doing.
ACTIVE = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})
#: A task that waits for the caller: input (the remote's questions), or credentials.
WAITING = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


def state_name(task: Task) -> str:
    """The task's state as A2A names it (``TASK_STATE_COMPLETED``...)."""
    return str(TaskState.Name(task.status.state))


class RemoteAgent:
    """The A2A agent at ``url`` (its base URL: the card is at ``/.well-known/agent-card.json`` under it)."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._card: AgentCard | None = None

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        """An ``a2a-sdk`` client for the remote (its card read once), for one exchange."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            async with httpx.AsyncClient(headers=headers, timeout=self.timeout) as http:
                config = ClientConfig(streaming=False, httpx_client=http)
                if self._card is None:
                    self._card = await A2ACardResolver(http, self.url).get_agent_card()
                yield await create_client(self._card, client_config=config)
        except (A2AError, httpx.HTTPError) as exc:
            raise RemoteAgentError(f"The remote agent at {self.url} failed: {type(exc).__name__}: {exc}") from exc

    async def send(self, parts: Sequence[Part], *, context_id: str, message_id: str, task_id: str = "") -> Task:
        """Send a message (on ``task_id``, to answer it) and return its task once it is done or waits."""
        message = Message(
            role=Role.ROLE_USER, parts=list(parts), context_id=context_id, message_id=message_id, task_id=task_id
        )
        async with self.client() as client:
            task: Task | None = None
            async for response in client.send_message(SendMessageRequest(message=message)):
                if response.HasField("task"):
                    task = response.task
                elif response.HasField("message"):  # a remote that answers without a task: done at once
                    task = Task(id=task_id or message_id, context_id=context_id)
                    task.status.state = TaskState.TASK_STATE_COMPLETED
                    task.status.message.CopyFrom(response.message)
        if task is None:
            raise RemoteAgentError(f"The remote agent at {self.url} answered the message with no task.")
        return await self.settle(task)

    async def find(self, context_id: str) -> Task | None:
        """The newest task of ``context_id``, or None when the remote has none."""
        async with self.client() as client:
            found = await client.list_tasks(ListTasksRequest(context_id=context_id, include_artifacts=True))
        return found.tasks[0] if found.tasks else None

    async def get(self, task_id: str) -> Task:
        """The task ``task_id`` as the remote has it now."""
        async with self.client() as client:
            return await client.get_task(GetTaskRequest(id=task_id))

    async def settle(self, task: Task) -> Task:
        """``task`` once the remote is no longer working on it (asked again every half second, at most ``timeout``)."""
        deadline = time.monotonic() + self.timeout
        while task.status.state in ACTIVE:
            if time.monotonic() > deadline:
                raise RemoteAgentError(
                    f"The remote agent at {self.url} was still working on task {task.id} after {self.timeout} s."
                )
            await asyncio.sleep(0.5)
            task = await self.get(task.id)
        return task
