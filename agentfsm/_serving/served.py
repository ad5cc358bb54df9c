"""What an endpoint serving an agent holds, AG-UI's and A2A's alike: the agent, its threads, its tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from agentfsm._serving.threads import StoreThreads, ThreadRuns
from agentfsm.errors import ConfigurationError
from agentfsm.stores.base import ThreadStore

if TYPE_CHECKING:
    from agentfsm.agent import Agent
    from agentfsm.tools import Tool


class ServedAgent:
    """An agent served to a protocol's clients; ``ConfigurationError`` if it has no snapshot store for its pauses.

    ``threads``: where threads stand; by default the store's, when it holds threads (``StoreThreads``).
    """

    #: How the endpoint's errors name it ("An AG-UI endpoint").
    ENDPOINT: ClassVar[str]

    def __init__(self, agent: Agent, threads: ThreadRuns | None = None, *, expose_errors: bool = False) -> None:
        if agent.snapshot_store is None:
            raise ConfigurationError(
                f"{self.ENDPOINT} keeps paused runs in the agent's snapshot store: give the agent one "
                "(snapshot_store=SQLiteSnapshotStore(path))."
            )
        self.agent = agent
        store = agent.snapshot_store
        if threads is None:
            threads = StoreThreads(store) if isinstance(store, ThreadStore) else ThreadRuns()
        self.threads = threads
        self.expose_errors = expose_errors
        self.tools: dict[str, Tool] = {t.name: t for t in agent.known_tools()}
