"""The speed of ``check_agent`` at its default bounds: paths per CPU second on two fixed agents.

CPU seconds (``time.process_time``), not wall seconds: the check runs on one core, and the wall
time of a shared machine counts the other work it does. ``make bench`` reports it (``bench/run.py``),
and so does ``bench/mutations.py``; ``python bench/checker.py`` prints it alone.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from agentfsm import Agent, State, hook, tool
from agentfsm.checking import check_agent
from agentfsm.demo import demo_agent
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, SimpleConsoleUI

#: What the same rows measured before the checker found stretches of runs met before again (the
#: commit before it, on the machine of the last recorded run): the figure to compare with.
BEFORE = {"demo": 18.1, "three_tools": 17.3}


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def search(query: str) -> str:
    """Look something up."""
    return f"results for {query}"


@tool
def pay(amount: int) -> str:
    """Charge a card (not idempotent)."""
    return f"charged {amount}"


@hook
def count_llm_calls(state: State) -> None:
    """Count the model calls in State."""
    state.set("llm_calls", (state.get("llm_calls") or 0) + 1)


def three_tools() -> Agent:
    """The docs' agent: three tools, a hook and a confirmation strategy (``docs/checking.md``)."""
    return Agent(
        chat_generator=ScriptedChatGenerator(["unused: the checker answers in the model's place"]),
        tools=[add, search, pay],
        state_schema={"llm_calls": {"type": int}},
        hooks={"before_llm": [count_llm_calls]},
        confirmation_strategies={"pay": BlockingConfirmationStrategy(AlwaysAskPolicy(), SimpleConsoleUI())},
    )


#: The agents checked, by row name: a label and how to build one.
AGENTS = {
    "demo": ("the demo agent (`agentfsm demo`)", demo_agent),
    "three_tools": ("3 tools, a hook, a confirmation strategy", three_tools),
}


def speed(quick: bool = False) -> dict[str, dict[str, Any]]:
    """Each agent checked at the default bounds (``quick``: one model step): paths, runs, CPU and wall seconds, paths per CPU second."""
    rows = {}
    for name, (label, make) in AGENTS.items():
        cpu = time.process_time()
        result = check_agent(make(), progress=False, **({"max_steps": 1} if quick else {}))
        cpu = time.process_time() - cpu
        rows[name] = {
            "label": label,
            "paths": result.paths,
            "runs": result.runs,
            "cpu_s": round(cpu, 2),
            "wall_s": round(result.seconds, 2),
            "paths_per_cpu_s": round(result.paths / cpu, 1),
            "ok": result.ok,
        }
    return rows


def table(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The Markdown table of ``speed``'s rows, beside the figures before."""
    lines = [
        "",
        "## check_agent at its default bounds",
        "",
        "Every reply kind at 2 model calls, every tool outcome and decision, a crash before every write to",
        "the store and a breakpoint at every transition (`bench/checker.py`). CPU seconds are the check's own",
        'work on one core; "before" is the same row before the checker found runs met before again.',
        "",
        "| agent | paths | runs | CPU s | wall s | paths per CPU s | before | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {row['label']} | {row['paths']} | {row['runs']} | {row['cpu_s']} | {row['wall_s']} | "
            f"{row['paths_per_cpu_s']} | {BEFORE.get(name, '')} | {'no violation' if row['ok'] else 'VIOLATED'} |"
        )
    return lines


if __name__ == "__main__":
    measured = speed("--quick" in sys.argv)
    sys.stdout.write(json.dumps(measured, indent=2) + "\n" + "\n".join(table(measured)) + "\n")
