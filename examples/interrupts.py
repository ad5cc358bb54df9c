"""Interrupts: a tool asks a person which account, then for a code, halfway through its call. No API key.

Run it: ``python examples/interrupts.py``. The scripted model asks for a transfer; the tool asks
``ask_user("Which account?", schema)``, and the run pauses with the question. An answer that does
not fit the schema is refused (nothing runs); a good one resumes the run, the tool runs again from
its start, gets the answer, and asks for the code; the second answer finishes the call. From
another process, a stored run is answered with ``agentfsm decide RUN --store PATH --agent
examples.interrupts:transfer_agent --answer t1.0='"savings"'``.
"""

from __future__ import annotations

from typing import Any

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.errors import AnswerError, InputBreakpointException
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.interrupts import AskUser, InputAnswer

#: What the tool did before its first question, on each run of it: it asks before any effect.
LOOKUPS: list[int] = []


@tool
def transfer(amount: int, ask_user: AskUser) -> str:
    """Move money to the user's landlord."""
    LOOKUPS.append(amount)  # safe to repeat: the tool runs again from here once answered
    account = ask_user("Which account should pay?", {"enum": ["checking", "savings"]})
    code = ask_user("The 6-digit code the bank sent?", {"type": "string", "pattern": "^[0-9]{6}$"})
    return f"moved {amount} from {account} (code {code} accepted)"


def transfer_agent(snapshot_store: Any = None, position: int = 1) -> Agent:
    """The agent: a scripted model that asks for one transfer, then answers.

    By default the model stands where a paused run left it (its second reply), as the command line resumes it.
    """
    model = ScriptedChatGenerator(
        [ChatMessage.from_assistant(tool_calls=[ToolCall("transfer", {"amount": 900}, "t1")]), "Rent is paid."],
        position=position,
    )
    return Agent(chat_generator=model, tools=[transfer], snapshot_store=snapshot_store)


def main() -> None:
    """Pause for each question, refuse a bad answer, finish with good ones."""
    agent = transfer_agent(position=0)
    try:
        agent.run([ChatMessage.from_user("Pay the rent: 900.")])
    except InputBreakpointException as paused:
        snapshot, [question] = paused.snapshot, paused.questions
    print(f"asked {question.id}: {question.question} {question.response_schema}")
    try:
        agent.run(snapshot=snapshot, decisions=[InputAnswer(question.id, "gold")])
    except AnswerError as refused:
        print(f"refused: {refused}")
    try:
        agent.run(snapshot=snapshot, decisions=[InputAnswer(question.id, "savings")])
    except InputBreakpointException as paused:
        snapshot, [question] = paused.snapshot, paused.questions
    print(f"asked {question.id}: {question.question}")
    result = agent.run(snapshot=snapshot, decisions=[InputAnswer(question.id, "314159")])
    print(result["messages"][-2].tool_call_result.result)
    print(result["last_message"].text)
    assert LOOKUPS == [900, 900, 900], "one run per question, and the last with both answers"


if __name__ == "__main__":
    main()
