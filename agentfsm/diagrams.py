"""State diagrams generated from the transition table: Mermaid, Graphviz DOT, SVG and PNG.

Three views, all read from ``agentfsm.machine.TRANSITIONS`` (never a hand-drawn copy):

- the machine itself: ``machine_diagram()``;
- one agent's machine: ``machine_diagram(agent=agent)`` (or ``agent.draw()``) names its tools,
  exit conditions, step limit and hooks where they act, and leaves out what its runs cannot do
  (CONFIRM without a confirmation strategy, the stop and continue edges when no hook or tool can
  write ``stop_run`` or ``continue_run``): the table ``machine.specialise`` makes for the constants
  its runs use (``runtime.constant_facts``);
- one tool call's lifecycle: ``machine_diagram(machine="calls")`` (``CALL_TRANSITIONS``);
- a run: ``machine_diagram(trace=result["trace"])`` or ``machine_diagram(snapshot=snapshot)``
  highlights the phase the run is in (or paused before) and the edges it took, with how often.

The pause, fail and resume edges exist from (or to) every active phase; they are drawn once, from
(or to) an "any active phase" node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentfsm._core.runtime import constant_facts
from agentfsm.errors import AgentFSMError, ConfigurationError, MissingRendererError
from agentfsm.hooks import hook_name
from agentfsm.machine import (
    ACTIVE_PHASES,
    CALL_TRANSITIONS,
    PHASE_WORK,
    TERMINAL_CALL_STATUSES,
    TRANSITIONS,
    CallStatus,
    ConstantFacts,
    Phase,
    Transition,
    specialise,
)

if TYPE_CHECKING:
    from agentfsm.agent import Agent
    from agentfsm.snapshot import AgentSnapshot

Format = Literal["mermaid", "dot", "svg", "png"]
ANY_ACTIVE = "ANY_ACTIVE"
_INTERRUPTS = ("pause", "fail", "resume")
#: Characters per line of an edge label or a note in DOT, SVG and PNG: long guards wrap instead of widening the page.
LABEL_WIDTH = 28


@dataclass(frozen=True, slots=True)
class Edge:
    """One drawn edge: declared transitions collapsed where they go from or to every active phase."""

    source: str
    dest: str
    trigger: str
    condition: str


@dataclass(frozen=True, slots=True)
class DiagramModel:
    """Everything a renderer needs: states, edges, their labels and what to highlight."""

    title: str
    states: tuple[str, ...]
    edges: tuple[Edge, ...]
    labels: Mapping[Edge, str]
    notes: Mapping[str, str]
    taken: Mapping[Edge, int]
    visited: frozenset[str]
    current: str | None
    current_note: str
    #: Where the machine starts, and the states it ends in.
    initial: str = Phase.IDLE.value
    finals: tuple[str, ...] = (Phase.DONE.value, Phase.FAILED.value)


def _edges(transitions: Iterable[Transition], active: set[Phase]) -> list[Edge]:
    """Drawn edges; interrupts from (or to) every phase of ``active`` become one edge of ANY_ACTIVE."""
    edges: list[Edge] = []
    grouped: dict[tuple[str, str], list[Transition]] = {}
    for t in transitions:
        if t.trigger in _INTERRUPTS:
            grouped.setdefault((t.trigger, t.condition), []).append(t)
        else:
            edges.append(Edge(t.source.value, t.dest.value, t.trigger, t.condition))
    for (trigger, condition), group in grouped.items():
        sources = {t.source for t in group}
        dests = {t.dest for t in group}
        if trigger == "resume" and dests == active:
            edges.append(Edge(Phase.PAUSED.value, ANY_ACTIVE, trigger, condition))
        elif trigger != "resume" and sources == active:
            edges.append(Edge(ANY_ACTIVE, group[0].dest.value, trigger, condition))
        else:  # not every active phase: draw each edge
            edges.extend(Edge(t.source.value, t.dest.value, t.trigger, t.condition) for t in group)
    return edges


def _drawn(edge: Edge, record_source: Phase, record_dest: Phase, trigger: str) -> bool:
    if edge.trigger != trigger:
        return False
    source_ok = edge.source == record_source.value or (edge.source == ANY_ACTIVE and record_source in ACTIVE_PHASES)
    dest_ok = edge.dest == record_dest.value or (edge.dest == ANY_ACTIVE and record_dest in ACTIVE_PHASES)
    return source_ok and dest_ok


def agent_constants(agent: Agent) -> ConstantFacts:
    """The facts the agent's runs can never change: the rule its runs use (``runtime.constant_facts``)."""
    return constant_facts(
        agent._tools,
        dynamic=bool(agent._dynamic),
        hooks=agent._hooks,
        confirmation=agent._confirmation,
        max_agent_steps=agent.max_agent_steps,
        output_retries=None if agent.output_type is None else agent.output_retries,
    )


def reachable(transitions: Iterable[Transition]) -> list[Transition]:
    """The edges of ``transitions`` between phases that some edge reaches from IDLE (a resume enters none)."""
    edges = list(transitions)
    seen, frontier = {Phase.IDLE}, [Phase.IDLE]
    while frontier:
        source = frontier.pop()
        for t in edges:
            if t.source is source and not t.interrupt and t.dest not in seen:
                seen.add(t.dest)
                frontier.append(t.dest)
    seen |= {t.dest for t in edges if t.interrupt and t.source in seen and t.dest not in ACTIVE_PHASES}
    return [t for t in edges if t.source in seen and t.dest in seen]


def build_model(
    agent: Agent | None = None,
    trace: Iterable[Any] | None = None,
    snapshot: AgentSnapshot | None = None,
) -> DiagramModel:
    """The diagram of the machine, annotated for ``agent`` and highlighted for a run's trace or snapshot."""
    transitions = list(TRANSITIONS)
    title = "agentfsm machine"
    notes: dict[str, str] = {}
    labels: dict[Edge, str] = {}
    if agent is not None:
        title = f"agent: {', '.join(t.name for t in agent._tools) or 'no tools'}"
        transitions = reachable(specialise(agent_constants(agent)))
    phases = {p for t in transitions for p in (t.source, t.dest)}
    edges = _edges(transitions, {p for p in ACTIVE_PHASES if p in phases})
    for edge in edges:
        labels[edge] = f"{edge.trigger} [{edge.condition}]" if edge.condition else edge.trigger
    if agent is not None:
        for edge in edges:
            if edge.trigger == "exit":
                conditions = " | ".join("text reply" if c == "text" else f"{c} ran" for c in agent.exit_conditions)
                labels[edge] = f"exit [{conditions}]"
            elif edge.trigger == "max_steps":
                labels[edge] = f"max_steps [{agent.max_agent_steps} model calls made]"
            elif edge.trigger == "tool_calls" and not agent._tools:
                labels[edge] = "tool_calls [never: the agent has no tools]"
        tools = ", ".join(t.name for t in agent._tools) or "none"
        notes[Phase.TOOL_RUN.value] = f"tools: {tools}; up to {agent.tool_concurrency} in parallel"
        timeouts = {t.name: agent._invoker.timeout_of(t) for t in agent._tools}
        if any(timeout is not None for timeout in timeouts.values()):
            timed = ", ".join(f"{name} {timeout:g} s" for name, timeout in timeouts.items() if timeout is not None)
            notes[Phase.TOOL_RUN.value] += f"; timeouts: {timed}"
        notes[Phase.EXIT_CHECK.value] = f"exit conditions: {', '.join(agent.exit_conditions)}"
        notes[Phase.LLM_CALL.value] = f"model: {type(agent.chat_generator).__name__}"
        if agent.model_timeout is not None:
            notes[Phase.LLM_CALL.value] += f"; timeout {agent.model_timeout:g} s"
        if agent._confirmation:
            covered = ", ".join(f"{name} ({type(s).__name__})" for name, s in agent._confirmation.entries())
            notes[Phase.CONFIRM.value] = f"confirmation: {covered}"
        for phase, work in PHASE_WORK.items():
            hooks = [
                f"{p.value}: {', '.join(hook_name(h) for h in agent._hooks[p])}" for p in work if p in agent._hooks
            ]
            if hooks:
                notes[phase.value] = "; ".join([*filter(None, [notes.get(phase.value)]), f"hooks {'; '.join(hooks)}"])
    states = [p.value for p in Phase if p in phases]
    states.insert(states.index(Phase.DONE.value), ANY_ACTIVE)

    records = list(_trace_records(trace, snapshot))
    taken: Counter[Edge] = Counter()
    visited: set[str] = set()
    for step, source, dest, trigger in records:
        del step
        visited.update((source.value, dest.value))
        for edge in edges:
            if _drawn(edge, source, dest, trigger):
                taken[edge] += 1
    current, current_note = None, ""
    if snapshot is not None:
        current, current_note = snapshot.phase.value, f"paused here, step {snapshot.step}"
    elif records:
        current = records[-1][2].value
        current_note = f"ended here, step {records[-1][0]}"
    return DiagramModel(
        title, tuple(states), tuple(edges), labels, notes, dict(taken), frozenset(visited), current, current_note
    )


def build_call_model() -> DiagramModel:
    """The diagram of one tool call's lifecycle (``CALL_TRANSITIONS``)."""
    edges = tuple(Edge(t.source.value, t.dest.value, t.trigger, t.note) for t in CALL_TRANSITIONS)
    return DiagramModel(
        "agentfsm tool call",
        tuple(s.value for s in CallStatus),
        edges,
        {edge: f"{edge.trigger} [{edge.condition}]" for edge in edges},
        {},
        {},
        frozenset(),
        None,
        "",
        CallStatus.PROPOSED.value,
        tuple(s.value for s in CallStatus if s in TERMINAL_CALL_STATUSES),
    )


def _trace_records(
    trace: Iterable[Any] | None, snapshot: AgentSnapshot | None
) -> Iterable[tuple[int, Phase, Phase, str]]:
    if snapshot is not None:
        for r in snapshot.trace:
            yield r["step"], Phase(r["source"]), Phase(r["dest"]), r["trigger"]
    for r in trace or ():
        if isinstance(r, Mapping):
            yield r["step"], Phase(r["source"]), Phase(r["dest"]), r["trigger"]
        else:
            yield r.step, r.source, r.dest, r.trigger


# -- Mermaid ----------------------------------------------------------------------------------------


def to_mermaid(model: DiagramModel) -> str:
    """``stateDiagram-v2`` text (renders on GitHub and in most Markdown viewers)."""
    lines = ["---", f"title: {model.title}", "---", "stateDiagram-v2", "    direction TB"]
    if ANY_ACTIVE in model.states:
        lines.append(f'    state "any active phase" as {ANY_ACTIVE}')
    lines.append(f"    [*] --> {model.initial}")
    for edge in model.edges:
        label = model.labels[edge]
        if edge in model.taken:
            label += f" \u00d7{model.taken[edge]}"
        lines.append(f"    {edge.source} --> {edge.dest} : {_mermaid_text(label)}")
    lines.extend(f"    {state} --> [*]" for state in model.finals)
    for state, note in model.notes.items():
        lines.append(f"    note right of {state} : {_mermaid_text(note)}")
    if model.current is not None:
        lines.append(f"    note left of {model.current} : {_mermaid_text(model.current_note)}")
    if model.visited or model.current:
        lines.append("    classDef visited fill:#e3f2fd,stroke:#1565c0")
        lines.append("    classDef current fill:#ffe082,stroke:#e65100,stroke-width:3px")
        visited = sorted(model.visited - {model.current or ""})
        if visited:
            lines.append(f"    class {','.join(visited)} visited")
        if model.current:
            lines.append(f"    class {model.current} current")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    # ':' and ';' end a Mermaid label; '#' starts an entity.
    return text.replace(":", " -").replace(";", ",").replace("#", "no.")


# -- Graphviz ---------------------------------------------------------------------------------------


def _dot_quote(text: str, width: int = 0) -> str:
    """``text`` as a quoted DOT string; with ``width``, wrapped into centred lines of about that many characters.

    An edge label's trigger keeps a line of its own, above its ``[condition]``.
    """
    lines = [text]
    if width:
        trigger, bracket, condition = text.partition(" [")
        lines = [trigger, *textwrap.wrap(bracket.lstrip() + condition, width, break_long_words=False)]
        if not bracket:
            lines = textwrap.wrap(text, width, break_long_words=False)
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def to_dot(model: DiagramModel) -> str:
    """Graphviz DOT source, laid out top to bottom along the main loop, labels wrapped to read on a page."""
    lines = [
        "digraph agentfsm {",
        f"    label={_dot_quote(model.title)}; labelloc=t; fontname=Helvetica; fontsize=20;",
        "    rankdir=TB; nodesep=0.4; ranksep=0.5;",
        '    node [shape=box, style="rounded,filled", fillcolor=white, fontname=Helvetica, fontsize=16];',
        "    edge [fontname=Helvetica, fontsize=14];",
        '    start [shape=point, width=0.15, label=""];',
        f"    start -> {model.initial};",
    ]
    for state in model.states:
        attributes = ['label="any active phase"', "style=dashed"] if state == ANY_ACTIVE else []
        if state in model.finals:
            attributes.append("peripheries=2")
        if state == model.current:
            attributes += ['fillcolor="#ffe082"', 'color="#e65100"', "penwidth=3"]
            attributes.append(f"xlabel={_dot_quote(model.current_note)}")
        elif state in model.visited:
            attributes += ['fillcolor="#e3f2fd"', 'color="#1565c0"']
        lines.append(f"    {state} [{', '.join(attributes)}];" if attributes else f"    {state};")
    for edge in model.edges:
        label = model.labels[edge]
        attributes = []
        if edge in model.taken:
            label += f" \u00d7{model.taken[edge]}"
            attributes += ['color="#1565c0"', "penwidth=2"]
        elif model.taken:
            attributes.append('color="#9e9e9e"')
        if edge.trigger in _INTERRUPTS:
            attributes.append("style=dashed")
        attributes.insert(0, f"label={_dot_quote(label, LABEL_WIDTH)}")
        lines.append(f"    {edge.source} -> {edge.dest} [{', '.join(attributes)}];")
    # The interrupts (any active phase, PAUSED, FAILED) form their own row under the main loop.
    if Phase.PAUSED.value in model.states:
        lines.append(f"    {{rank=same; {Phase.PAUSED.value}; {Phase.FAILED.value};}}")
    for i, (state, note) in enumerate(model.notes.items()):
        lines.append(
            f'    note{i} [shape=note, fillcolor="#fffde7", fontsize=14, label={_dot_quote(note, LABEL_WIDTH)}];'
        )
        lines.append(f"    note{i} -> {state} [style=dotted, arrowhead=none];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def find_renderer() -> str | None:
    """The Graphviz program used for SVG/PNG: ``graphviz-pure`` (the ``diagrams`` extra) or ``dot``."""
    scripts = Path(sysconfig.get_path("scripts"))
    for name in ("graphviz-pure", "dot"):
        beside_python = scripts / name
        if beside_python.exists():
            return str(beside_python)
        found = shutil.which(name)
        if found:
            return found
    return None


def render(dot_source: str, output_format: Literal["svg", "png"]) -> bytes:
    """Lay out and render DOT source with Graphviz."""
    program = find_renderer()
    if program is None:
        raise MissingRendererError(
            "SVG and PNG diagrams need Graphviz: pip install 'agentfsm[diagrams]' (a self-contained dot), "
            "or install Graphviz so that `dot` is on PATH. Mermaid and DOT output need nothing."
        )
    done = subprocess.run(
        [program, f"-T{output_format}"], input=dot_source.encode(), capture_output=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise AgentFSMError(f"{program} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return done.stdout


def machine_diagram(
    output_format: Format = "mermaid",
    *,
    agent: Agent | None = None,
    trace: Iterable[Any] | None = None,
    snapshot: AgentSnapshot | None = None,
    machine: Literal["phases", "calls"] = "phases",
) -> str | bytes:
    """A diagram of the machine (optionally for ``agent``, highlighting a run's ``trace`` or ``snapshot``).

    ``machine="calls"`` draws the lifecycle of one tool call instead (``CALL_TRANSITIONS``).
    Mermaid and DOT come back as ``str``; SVG and PNG as ``bytes``.
    """
    model = build_call_model() if machine == "calls" else build_model(agent, trace, snapshot)
    if output_format == "mermaid":
        return to_mermaid(model)
    if output_format == "dot":
        return to_dot(model)
    if output_format in ("svg", "png"):
        return render(to_dot(model), output_format)
    raise ConfigurationError(f"Unknown diagram format {output_format!r}; use mermaid, dot, svg or png.")


def write_diagram(path: str | os.PathLike[str], diagram: str | bytes) -> None:
    """Write a diagram to ``path`` (text or bytes), or to stdout for ``-``."""
    if os.fspath(path) == "-":
        if isinstance(diagram, bytes):
            sys.stdout.buffer.write(diagram)
        else:
            sys.stdout.write(diagram)
        return
    target = Path(path)
    if isinstance(diagram, bytes):
        target.write_bytes(diagram)
    else:
        target.write_text(diagram, encoding="utf-8")
