"""Ready hooks: a token budget, compaction of a long run, large tool results offloaded, confirmation as a hook.

Run it with ``python examples/ready_hooks.py`` (the scripted model: no API key, no network).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.builtin_hooks import (
    CompactionHook,
    ConfirmationHook,
    DirectoryToolResultStore,
    MessageCount,
    SlidingWindowCompactor,
    TokenBudgetHook,
    ToolResultOffloadHook,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, ConfirmationUIResult


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page as text."""
    return f"<html>{url} " + "lorem ipsum " * 500 + "</html>"


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def fetching(n: int, tokens: int = 0) -> list[ChatMessage | str]:
    """``n`` replies that each fetch a page (each reporting ``tokens`` of usage), then an answer."""
    usage = {"usage": {"total_tokens": tokens}} if tokens else {}
    replies: list[ChatMessage | str] = [
        ChatMessage.from_assistant(tool_calls=[ToolCall("fetch_page", {"url": f"https://example.com/{i}"})], meta=usage)
        for i in range(n)
    ]
    return [*replies, "Read them all."]


class DenyDeletes:
    """A confirmation UI that refuses every deletion (a person would answer here)."""

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict, **kwargs: object
    ) -> ConfirmationUIResult:  # type: ignore[type-arg]
        """Refuse."""
        return ConfirmationUIResult("reject", feedback="never delete files")


if __name__ == "__main__":
    question = [ChatMessage.from_user("Read the pages.")]

    # A token budget: the run stops before the model call that would pass it.
    budget = Agent(
        chat_generator=ScriptedChatGenerator(fetching(10, tokens=400)),
        tools=[fetch_page],
        hooks={"before_llm": [TokenBudgetHook(1000, add_final_message=True)]},
    )
    result = budget.run(question)
    print(f"budget: exit {result['exit_reason']} after {result['step_count']} model calls")
    print(f"budget: {result['last_message'].text}")

    # Compaction: a 30-step run, the model never sent more than the task and the last two steps.
    model = ScriptedChatGenerator(fetching(30))
    long_run = Agent(
        chat_generator=model,
        tools=[fetch_page],
        hooks={"before_llm": [CompactionHook(SlidingWindowCompactor(min_keep_steps=2), MessageCount(8))]},
    )
    result = long_run.run(question)
    largest = max(len(call["messages"]) for call in model.calls)
    kept = len(result["compacted_messages"]) + len(result["messages"]) - 1  # less the omission note
    print(f"compaction: largest request {largest} messages; the whole conversation kept: {kept} messages")

    # Offloading: a page of 6,000 characters becomes a reference the model can read slices of.
    with tempfile.TemporaryDirectory() as tmp:
        offload = ToolResultOffloadHook(DirectoryToolResultStore(Path(tmp)), threshold=1000, preview_chars=30)
        reader = Agent(
            chat_generator=ScriptedChatGenerator(fetching(1)),
            tools=[fetch_page, offload.read_tool()],
            hooks={"after_tool": [offload]},
        )
        result = reader.run(question)
        page = next(m for m in result["messages"] if m.tool_call_result)
        ref = page.meta["offloaded"]
        print(f"offload: {len(page.tool_call_result.result)} characters in the conversation, ref {ref}")  # type: ignore[union-attr]
        print(f"offload: read back {offload.read_tool().invoke(ref=ref, offset=0, length=25)!r}")

    # Confirmation as a before_tool hook: the same CONFIRM phase as confirmation_strategies.
    careful = Agent(
        chat_generator=ScriptedChatGenerator(
            [ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "/etc/hosts"})]), "I did not."]
        ),
        tools=[delete_file],
        hooks={
            "before_tool": [
                ConfirmationHook({"delete_file": BlockingConfirmationStrategy(AlwaysAskPolicy(), DenyDeletes())})
            ]
        },
    )
    result = careful.run([ChatMessage.from_user("Delete /etc/hosts.")])
    print(f"confirmation: {result['messages'][2].tool_call_result.result}")  # type: ignore[union-attr]
