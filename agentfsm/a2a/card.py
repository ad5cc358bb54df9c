"""The agent card: what an A2A client reads first (``/.well-known/agent-card.json``) to learn how to call the agent.

``agent_card`` builds it from the agent: a skill per tool (its name and description), streaming,
text and JSON data in and out, the JSON-RPC interface at ``url``, and, with a token, the bearer
scheme that every call must use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

if TYPE_CHECKING:
    from agentfsm.agent import Agent

#: The media types the server reads and writes: text, and JSON data (the answers to its questions).
MODES = ["text/plain", "application/json"]
#: The name of the security scheme a token-guarded server declares.
BEARER = "bearer"


def agent_card(
    agent: Agent,
    *,
    name: str,
    description: str,
    url: str,
    version: str = "1.0.0",
    token: bool = False,
) -> AgentCard:
    """The card of ``agent`` served at ``url`` (its JSON-RPC endpoint); ``token``: calls need a bearer token."""
    skills = [
        AgentSkill(id=tool.name, name=tool.name, description=tool.description or tool.name, tags=["tool"])
        for tool in agent.known_tools()
    ]
    if not skills:
        skills = [AgentSkill(id="chat", name="chat", description=description, tags=["chat"])]
    card = AgentCard(
        name=name,
        description=description,
        version=version,
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=url)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=skills,
    )
    if token:
        scheme = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))
        card.security_schemes[BEARER].CopyFrom(scheme)
        card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList(list=[])}))
    return card
