"""What an endpoint serving an agent holds, AG-UI's and A2A's alike: the agent, its threads, its tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from agentfsm._serving.threads import ThreadRuns
from agentfsm.errors import ConfigurationError

if TYPE_CHECKING:
    from agentfsm.agent import Agent
    from agentfsm.tools import Tool


class ServedAgent:
    """An agent served to a protocol's clients; ``ConfigurationError`` if it has no snapshot store for its pauses."""

    #: How the endpoint's errors name it ("An AG-UI endpoint").
    ENDPOINT: ClassVar[str]

    def __init__(self, agent: Agent, threads: ThreadRuns | None = None, *, expose_errors: bool = False) -> None:
        if agent.snapshot_store is None:
            raise ConfigurationError(
                f"{self.ENDPOINT} keeps paused runs in the agent's snapshot store: give the agent one "
                "(snapshot_store=SQLiteSnapshotStore(path))."
            )
        self.agent = agent
        self.threads = threads if threads is not None else ThreadRuns()
        self.expose_errors = expose_errors
        self.tools: dict[str, Tool] = {t.name: t for t in agent.known_tools()}
