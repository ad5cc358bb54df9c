"""A worker's agent named like ``tests.durable.durable_agents.parallel`` but configured differently (another tool)."""

from __future__ import annotations

from agentfsm.durable import DurableAgent
from tests.durable.durable_agents import TurnModel, _agent, once

parallel = DurableAgent(_agent(TurnModel(tool="once"), [once]), "parallel")
