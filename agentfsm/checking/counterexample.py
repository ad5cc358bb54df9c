"""Counterexamples a person can use: a path as a pytest regression test, its trace and a diagram."""

from __future__ import annotations

from typing import Any

from agentfsm.agent import Agent
from agentfsm.checking.record import RecordedRun
from agentfsm.checking.scenario import Scenario
from agentfsm.messages import ChatMessage


def message_code(reply: ChatMessage | Exception) -> str:
    """Python source that builds ``reply``: an assistant message, or the exception the model call raised."""
    if isinstance(reply, Exception):
        return f"ModelClientError({str(reply)!r})"
    calls = [f"ToolCall({c.tool_name!r}, {c.arguments!r}, id={c.id!r})" for c in reply.tool_calls]
    if not calls:
        return f"ChatMessage.from_assistant({reply.text!r})"
    text = f"{reply.text!r}, " if reply.text else ""
    return f"ChatMessage.from_assistant({text}tool_calls=[{', '.join(calls)}])"


def scenario_code(scenario: Scenario, indent: str = "    ") -> str:
    """``Scenario(...)`` as Python source."""
    lines = ["Scenario(", f"{indent}script=["]
    lines += [f"{indent}{indent}{message_code(r)}," for r in scenario.script]
    lines.append(f"{indent}],")
    for name in ("tool_outcomes", "decisions", "resume_decisions", "in_doubt", "hook_choices"):
        value = getattr(scenario, name)
        if value:
            lines.append(f"{indent}{name}={value!r},")
    if scenario.crash_at is not None:
        lines.append(f"{indent}crash_at={scenario.crash_at!r},")
    if scenario.pause_at is not None:
        lines.append(f"{indent}pause_at={scenario.pause_at!r},")
    if scenario.max_steps is not None:
        lines.append(f"{indent}max_steps={scenario.max_steps!r},")
    lines.append(")")
    return "\n".join(lines)


def regression_test(
    invariant: str,
    scenario: Scenario,
    messages: list[ChatMessage],
    agent_ref: str | None,
    options: dict[str, str],
) -> str:
    """A ready-to-paste pytest test that replays ``scenario`` and fails while the invariant is violated."""
    name = "".join(ch if ch.isalnum() else "_" for ch in invariant.lower()).strip("_") or "invariant"
    if agent_ref is not None and ":" in agent_ref:
        module, attribute = agent_ref.split(":", 1)
        agent_lines = [f"from {module} import {attribute.split('.')[0]}", "", f"AGENT = {attribute}"]
    else:
        agent_lines = ["AGENT = ...  # the agent that was checked"]
    body = scenario_code(scenario, "    ").replace("\n", "\n    ")
    given = "".join(f", {k}={v}" for k, v in options.items())
    if "hook_choices" in options:
        agent_lines.append("HOOK_CHOICES = ...  # the hook alternatives given to check_agent")
    conversation = ", ".join(
        f"ChatMessage.from_user({m.text!r})" if m.role.value == "user" else repr(m) for m in messages
    )
    return "\n".join(
        [
            "from agentfsm import ChatMessage, ToolCall",
            "from agentfsm.errors import ModelClientError",
            "from agentfsm.testing import Scenario, replay",
            "",
            *agent_lines,
            "",
            "",
            f"def test_{name}_regression() -> None:",
            f"    scenario = {body}",
            f"    report = replay(AGENT, scenario, messages=[{conversation}]{given})",
            "    assert report.ok, report.text()",
            "",
        ]
    )


def trace_text(run: RecordedRun) -> str:
    """The path's transitions, segment by segment, with what the world did at each step."""
    lines = []
    for number, segment in enumerate(run.segments):
        lines.append(f"segment {number} ({segment.started}, ended {segment.ended}):")
        for r in segment.trace:
            lines.append(f"  step {r.step}: {r.source.value} --{r.trigger}--> {r.dest.value}")
    for e in run.tool_executions:
        lines.append(f"tool {e.tool_name}({e.arguments}) for {e.call_key} at step {e.step}: {e.outcome}")
    for d in run.decisions:
        lines.append(f"decision {d.verb} for {d.tool_name} ({d.call_key}) at step {d.step}")
    return "\n".join(lines)


def path_diagram(agent: Agent, run: RecordedRun) -> str:
    """The agent's Mermaid diagram with the path's edges numbered in the order they were taken."""
    from agentfsm.diagrams import machine_diagram

    trace = [r for segment in run.segments for r in segment.trace[_shared(run, segment) :]]
    return str(machine_diagram("mermaid", agent=agent, trace=trace, path=True))


def _shared(run: RecordedRun, segment: Any) -> int:
    """How many of ``segment``'s first records repeat the segment before it (a resumed run carries its trace)."""
    index = run.segments.index(segment)
    if index == 0:
        return 0
    before = run.segments[index - 1].trace
    shared = 0
    for a, b in zip(before, segment.trace, strict=False):
        if (a.step, a.source, a.dest, a.trigger) != (b.step, b.source, b.dest, b.trigger):
            break
        shared += 1
    return shared
