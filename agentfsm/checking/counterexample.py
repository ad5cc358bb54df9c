"""Counterexamples a person can use: a path as a pytest regression test, its trace and a diagram."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentfsm.agent import Agent
from agentfsm.checking.invariants import Invariant
from agentfsm.checking.record import RecordedRun
from agentfsm.checking.scenario import Scenario
from agentfsm.checking.world import CALL_QUESTIONS
from agentfsm.events import (
    CallChanged,
    DecisionTaken,
    Event,
    GuardrailChecked,
    HookRan,
    ModelFailed,
    PhaseChanged,
    RunEnded,
    RunPaused,
    ToolEnded,
)
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
    for name in (*(question.field for question in CALL_QUESTIONS), "hook_choices"):
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
    invariant: Invariant,
    builtin: bool,
    scenario: Scenario,
    messages: list[ChatMessage],
    agent_ref: str | None,
    options: dict[str, str],
    state: dict[str, Any],
) -> str:
    """A ready-to-paste pytest test that replays ``scenario`` and fails while ``invariant`` is violated.

    A built-in invariant is checked by ``replay`` itself; a user invariant is imported where it was
    defined (or left as ``INVARIANT = ...`` to fill in) and replayed alone.
    """
    name = "".join(ch if ch.isalnum() else "_" for ch in invariant.name.lower()).strip("_") or "invariant"
    if agent_ref is not None and ":" in agent_ref:
        module, attribute = agent_ref.split(":", 1)
        setup = [f"from {module} import {attribute.split('.')[0]}", "", f"AGENT = {attribute}"]
    else:
        setup = ["AGENT = ...  # the agent that was checked"]
    given = "".join(f", {k}={v}" for k, v in options.items())
    if "hook_choices" in options:
        setup.append("HOOK_CHOICES = ...  # the hook alternatives given to check_agent")
    if not builtin:
        setup += _invariant_lines(invariant)
        given += ", invariants=[INVARIANT], builtin_invariants=False"
    if state:
        given += f", state={state!r}"
    body = scenario_code(scenario, "    ").replace("\n", "\n    ")
    conversation = ", ".join(
        f"ChatMessage.from_user({m.text!r})" if m.role.value == "user" else repr(m) for m in messages
    )
    return "\n".join(
        [
            "from agentfsm import ChatMessage, ToolCall",
            "from agentfsm.errors import ModelClientError",
            "from agentfsm.testing import Scenario, replay",
            "",
            *setup,
            "",
            "",
            f"def test_{name}_regression() -> None:",
            f"    scenario = {body}",
            f"    report = replay(AGENT, scenario, messages=[{conversation}]{given})",
            "    assert report.ok, report.text()",
            "",
        ]
    )


def _invariant_lines(invariant: Invariant) -> list[str]:
    """``INVARIANT = ...``: imported from where the user's check is defined, when it can be."""
    module = getattr(invariant.check, "__module__", None)
    qualname = getattr(invariant.check, "__qualname__", "")
    if module and module != "__main__" and qualname.isidentifier():
        # ``@invariant`` binds the Invariant to the function's name; a plain function is its own.
        return [f"from {module} import {qualname}", "", f"INVARIANT = {qualname}"]
    return [f"INVARIANT = ...  # the invariant {invariant.name!r} that was violated"]


def trace_text(run: RecordedRun) -> str:
    """The path in words, segment by segment: its events in order (transitions, hooks, tools, decisions)."""
    lines = []
    # The checked agent's hooks are wrappers: the world recorded which of the user's hooks each one ran.
    names: dict[tuple[int, str], list[str]] = {}
    for firing in run.hook_firings:
        names.setdefault((firing.segment, firing.point), []).append(firing.hook)
    for number, segment in enumerate(run.segments):
        lines.append(f"segment {number} ({segment.started}, ended {segment.ended}):")
        for given in segment.events:
            event = given
            if isinstance(given, HookRan) and names.get((number, given.point)):
                event = dataclasses.replace(given, hook=names[(number, given.point)].pop(0))
            line = _event_line(event)
            if line is not None:
                lines.append(f"  {line}")
        if segment.ended == "crashed":
            lines.append(f"  the process died here, before {run.died_before or 'a write to the store'}")
        elif segment.ended == "cut":
            lines.append("  cut here by the checker: the run had not ended at the bound (see ends_within_bound)")
    if run.error is not None:
        lines.append(f"the run failed with {type(run.error).__name__}: {run.error}")
    return "\n".join(lines)


def _event_line(event: Event) -> str | None:
    """One event in words (``None``: not worth a line: model and tool starts, chunks)."""
    at = f"step {event.step}:"
    match event:
        case PhaseChanged():
            return f"{at} {event.source} --{event.trigger}--> {event.dest}"
        case CallChanged():
            return f"{at} call {event.call} ({event.tool}) {event.source} --{event.trigger}--> {event.dest}"
        case HookRan():
            raised = f", raised {event.error}" if event.error else ""
            return f"{at} hook {event.hook} at {event.point}{raised}"
        case ModelFailed():
            return f"{at} the model call failed: {event.error}"
        case ToolEnded():
            return f"{at} tool {event.tool} for {event.call} " + (
                f"raised {event.error}" if event.error else "returned"
            )
        case GuardrailChecked() if event.tripped or event.rewrites:
            done = f"tripped ({event.tripped}: {event.reason})" if event.tripped else "rewrote it"
            return f"{at} {event.point} guardrails on {event.subject}: {done}"
        case DecisionTaken():
            verb = "execute" if event.decision.get("execute") else "do not execute"
            return f"{at} decision for {event.call}: {verb} {_decision_details(event.decision)}".rstrip()
        case RunPaused():
            return f"{at} paused ({event.reason})"
        case RunEnded() if event.error:
            return f"{at} the run failed: {event.error}"
    return None


def _decision_details(decision: dict[str, Any]) -> str:
    shown = {k: decision[k] for k in ("final_tool_params", "feedback") if decision.get(k)}
    return ", ".join(f"{k}={v!r}" for k, v in shown.items())


def path_diagram(agent: Agent, run: RecordedRun) -> str:
    """The agent's Mermaid diagram with the path's edges numbered in the order they were taken.

    A path the checker cut is drawn ending where it was cut, with a note saying so (not "ended").
    """
    from agentfsm.diagrams import machine_diagram

    trace = [r for segment in run.segments for r in segment.trace[_shared(run, segment) :]]
    drawn = str(machine_diagram("mermaid", agent=agent, trace=trace, path=True))
    if run.ending == "cut" and trace:
        drawn = drawn.replace(f"ended here, step {trace[-1].step}", f"cut here by the checker, step {trace[-1].step}")
    return drawn


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
