"""State diagrams generated from the transition table: Mermaid, Graphviz DOT, SVG and PNG.

Three views, all read from ``agentfsm.machine.TRANSITIONS`` (never a hand-drawn copy):

- the machine itself: ``machine_diagram()``;
- one agent's machine: ``machine_diagram(agent=agent)`` (or ``agent.draw()``) names its tools,
  exit conditions, step limit and hooks where they act, and leaves out what its runs cannot do
  (CONFIRM without a confirmation strategy, the stop and continue edges when no hook or tool can
  write ``stop_run`` or ``continue_run``): the table ``machine.specialise`` makes for the constants
  its runs use (``Agent.outline``, by ``runtime.constant_facts``);
- one tool call's lifecycle: ``machine_diagram(machine="calls")`` (``CALL_TRANSITIONS``);
- a stored run's lifecycle: ``machine_diagram(machine="runs")`` (``agentfsm.lifecycle.LIFECYCLE``);
- a run: ``machine_diagram(trace=result["trace"])`` or ``machine_diagram(snapshot=snapshot)``
  highlights the phase the run is in (or paused before) and the edges it took, with how often.

The pause, fail, resume and cancel edges exist from (or to) every active phase; they are drawn once, from
(or to) an "any active phase" node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentfsm._core.rules import specialise_rules
from agentfsm.errors import AgentFSMError, ConfigurationError, MissingRendererError
from agentfsm.hooks import hook_name
from agentfsm.lifecycle import LIFECYCLE, TERMINAL_STATUSES
from agentfsm.machine import (
    ACTIVE_PHASES,
    CALL_TRANSITIONS,
    CHOICES,
    FACT_WORDS,
    PHASE_WORK,
    RULES,
    SLICES,
    TERMINAL_CALL_STATUSES,
    TRANSITIONS,
    CallStatus,
    Phase,
    Rule,
    Transition,
    specialise,
)

if TYPE_CHECKING:
    from agentfsm.agent import Agent, AgentOutline
    from agentfsm.limits import UsageLimits
    from agentfsm.snapshot import AgentSnapshot

Format = Literal["mermaid", "dot", "svg", "png"]
ANY_ACTIVE = "ANY_ACTIVE"
#: Characters per line of an edge label or a note in DOT, SVG and PNG: long guards wrap instead of widening the page.
LABEL_WIDTH = 22


@dataclass(frozen=True, slots=True)
class Edge:
    """One drawn edge: a rule (numbered by its place among its source's rules), or an interrupt.

    Interrupts from (or to) every active phase are drawn once, from (or to) ``ANY_ACTIVE``.
    """

    source: str
    dest: str
    trigger: str
    condition: str
    #: The rule's place among the rules out of its source, from 1 (``None``: an interrupt, or not a rule).
    number: int | None = None
    #: An interrupt of the run (drawn dashed): it may leave any phase it names, whatever the rules say.
    interrupt: bool = False


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
    #: For a path: the positions (from 1) at which each taken edge was taken, drawn instead of how often.
    order: Mapping[Edge, tuple[int, ...]] = field(default_factory=dict)
    #: The states that are choices (``<<choice>>`` in Mermaid, diamonds in DOT).
    choices: frozenset[str] = frozenset()


def _name(end: Phase | str) -> str:
    return end.value if isinstance(end, Phase) else end


def _condition(when: Iterable[tuple[str, bool]]) -> str:
    return ", ".join(FACT_WORDS[name][value] for name, value in when)


def _rule_edges(rules: Iterable[Rule]) -> dict[tuple[str, str], Edge]:
    """The drawn edge of each rule, by (source, trigger): numbered in its source's order."""
    sources = [*(p.value for p in Phase), *(c.name for c in CHOICES)]
    by_source: dict[str, list[Rule]] = {}
    for rule in sorted(rules, key=lambda r: (sources.index(_name(r.source)), r.order)):
        by_source.setdefault(_name(rule.source), []).append(rule)
    return {
        (source, rule.trigger): Edge(source, _name(rule.dest), rule.trigger, _condition(rule.when), number)
        for source, listed in by_source.items()
        for number, rule in enumerate(listed, 1)
    }


def _interrupt_edges(transitions: Iterable[Transition], active: set[Phase]) -> list[Edge]:
    """Interrupts, those from (or to) every phase of ``active`` as one edge of ANY_ACTIVE."""
    edges: list[Edge] = []
    grouped: dict[tuple[str, str], list[Transition]] = {}
    for t in transitions:
        if t.interrupt:
            grouped.setdefault((t.trigger, t.condition), []).append(t)
    for (trigger, condition), group in grouped.items():
        sources = {t.source for t in group}
        dests = {t.dest for t in group}
        if sources == {Phase.PAUSED} and dests == active:  # resuming into any phase
            edges.append(Edge(Phase.PAUSED.value, ANY_ACTIVE, trigger, condition, interrupt=True))
        elif sources == active:
            edges.append(Edge(ANY_ACTIVE, group[0].dest.value, trigger, condition, interrupt=True))
        else:  # not every active phase: draw each edge
            edges.extend(Edge(t.source.value, t.dest.value, t.trigger, t.condition, interrupt=True) for t in group)
    return edges


def _drawn(edge: Edge, record_source: Phase, record_dest: Phase, trigger: str) -> bool:
    """Whether the interrupt ``edge`` is the one a record of the trace took."""
    if edge.number is not None or edge.trigger != trigger:
        return False
    source_ok = edge.source == record_source.value or (edge.source == ANY_ACTIVE and record_source in ACTIVE_PHASES)
    dest_ok = edge.dest == record_dest.value or (edge.dest == ANY_ACTIVE and record_dest in ACTIVE_PHASES)
    return source_ok and dest_ok


def _limits_text(limits: UsageLimits) -> str:
    """The limits set, as ``requests=10, cost=0.5``."""
    data = limits.to_dict()
    return ", ".join(f"{name}={value}" for name, value in data.items() if name != "prices" and value is not None)


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


def _drawn_rules(rules: list[Rule], phases: set[Phase]) -> list[Rule]:
    """The rules out of ``phases``, and out of the choices they lead to, that end in ``phases``."""
    kept = [r for r in rules if r.source in phases]
    choices = {r.dest for r in kept if not isinstance(r.dest, Phase)}
    while True:
        more = {r.dest for r in rules if r.source in choices and not isinstance(r.dest, Phase)} - choices
        if not more:
            break
        choices |= more
    return [*kept, *(r for r in rules if r.source in choices)]


def _agent_labels(agent: Agent, outline: AgentOutline, edges: Iterable[Edge]) -> dict[Edge, str]:
    """The labels of an agent's edges that say more than their guard: its exit conditions, step and usage limits."""
    labels: dict[Edge, str] = {}
    for edge in edges:
        if edge.number is None:
            continue
        if edge.trigger == "exit":
            conditions = " | ".join("text reply" if c == "text" else f"{c} ran" for c in agent.exit_conditions)
            labels[edge] = f"{edge.number} exit [{conditions}]"
        elif edge.trigger in ("max_steps", "capped"):
            labels[edge] = f"{edge.number} {edge.trigger} [{agent.max_agent_steps} model calls made]"
        elif edge.trigger == "limited" and agent.usage_limits is not None:
            labels[edge] = f"{edge.number} limited [{edge.condition}: {_limits_text(agent.usage_limits)}]"
        elif edge.trigger == "tool_calls" and not outline.tools:
            labels[edge] = f"{edge.number} tool_calls [never: the agent has no tools]"
    return labels


def _agent_notes(agent: Agent, outline: AgentOutline) -> dict[str, str]:
    """The notes on an agent's phases: its model, tools, timeouts, exit conditions, strategies and hooks."""
    notes: dict[str, str] = {}
    tools = ", ".join(t.name for t in outline.tools) or "none"
    notes[Phase.TOOL_RUN.value] = f"tools: {tools}; up to {agent.tool_concurrency} in parallel"
    if any(timeout is not None for timeout in outline.timeouts.values()):
        timed = ", ".join(f"{name} {timeout:g} s" for name, timeout in outline.timeouts.items() if timeout is not None)
        notes[Phase.TOOL_RUN.value] += f"; timeouts: {timed}"
    notes[Phase.EXIT_CHECK.value] = f"exit conditions: {', '.join(agent.exit_conditions)}"
    notes[Phase.LLM_CALL.value] = f"model: {type(agent.chat_generator).__name__}"
    if agent.model_timeout is not None:
        notes[Phase.LLM_CALL.value] += f"; timeout {agent.model_timeout:g} s"
    if outline.confirmation:
        covered = ", ".join(f"{name} ({type(s).__name__})" for name, s in outline.confirmation.entries())
        notes[Phase.CONFIRM.value] = f"confirmation: {covered}"
    for phase, work in PHASE_WORK.items():
        hooks = [f"{p.value}: {', '.join(hook_name(h) for h in outline.hooks[p])}" for p in work if p in outline.hooks]
        if hooks:
            notes[phase.value] = "; ".join([*filter(None, [notes.get(phase.value)]), f"hooks {'; '.join(hooks)}"])
    return notes


def build_model(
    agent: Agent | None = None,
    trace: Iterable[Any] | None = None,
    snapshot: AgentSnapshot | None = None,
    path: bool = False,
) -> DiagramModel:
    """The diagram of the machine's rules, annotated for ``agent`` and highlighted for a run's trace or snapshot.

    Each rule is an edge, numbered by its place among the rules out of its phase or choice; a
    record of the trace highlights every rule of the way it was compiled from. ``path``: each taken
    edge is labelled with the positions at which the trace took it, so the drawing reads as the
    path (a counterexample), not only as which edges were taken how often.
    """
    transitions, rules = list(TRANSITIONS), list(RULES)
    title = "agentfsm machine"
    notes: dict[str, str] = {}
    outline = agent.outline() if agent is not None else None
    if outline is not None:
        title = f"agent: {', '.join(t.name for t in outline.tools) or 'no tools'}"
        transitions = reachable(specialise(outline.constants))
        rules = specialise_rules(RULES, outline.constants)
    phases = {p for t in transitions for p in (t.source, t.dest)}
    by_rule = _rule_edges(_drawn_rules(rules, phases))
    edges = [*by_rule.values(), *_interrupt_edges(transitions, {p for p in ACTIVE_PHASES if p in phases})]
    labels = {edge: _label(edge) for edge in edges}
    if agent is not None and outline is not None:
        labels.update(_agent_labels(agent, outline, edges))
        notes = _agent_notes(agent, outline)
    choices = [c.name for c in CHOICES if any(e.source == c.name for e in edges)]
    states = [p.value for p in Phase if p in phases]
    states[states.index(Phase.EXIT_CHECK.value) + 1 : 1] = [] if Phase.EXIT_CHECK.value not in states else choices
    states.insert(states.index(Phase.DONE.value), ANY_ACTIVE)

    records = list(_trace_records(trace, snapshot))
    taken: Counter[Edge] = Counter()
    order: dict[Edge, tuple[int, ...]] = {}
    visited: set[str] = set()
    for position, (_, source, dest, trigger) in enumerate(records, 1):
        visited.update((source.value, dest.value))
        compiled = _COMPILED.get((source, trigger, dest))
        if compiled is not None:  # the rules of the way it was compiled from (those drawn for the agent)
            hit = [by_rule[key] for key in ((_name(r.source), r.trigger) for r in compiled.rules) if key in by_rule]
        else:
            hit = [edge for edge in edges if _drawn(edge, source, dest, trigger)]
        for edge in hit:
            taken[edge] += 1
            if path:
                order[edge] = (*order.get(edge, ()), position)
    current, current_note = None, ""
    if snapshot is not None and not snapshot.ended:
        current, current_note = snapshot.phase.value, f"paused here, step {snapshot.step}"
    elif records:
        current = records[-1][2].value
        ended = snapshot.exit_reason if snapshot is not None else None
        current_note = f"ended here, step {records[-1][0]}" + (f": {ended[:80]}" if ended else "")
    return DiagramModel(
        title,
        tuple(states),
        tuple(edges),
        labels,
        notes,
        dict(taken),
        frozenset(visited),
        current,
        current_note,
        order=order,
        choices=frozenset(choices),
    )


#: The compiled edge of each (source, trigger, destination), for the rules a trace's records took.
_COMPILED = {(t.source, t.trigger, t.dest): t for t in TRANSITIONS if not t.interrupt}


def _label(edge: Edge) -> str:
    """``number trigger [condition]``; an interrupt has no number."""
    text = edge.trigger if edge.number is None else f"{edge.number} {edge.trigger}"
    return f"{text} [{edge.condition}]" if edge.condition else text


def decision_tables() -> str:
    """Each phase's and choice's rules as a Markdown decision table: rules as rows, in order; the facts they read as columns.

    A cell says the value the rule needs (``yes``/``no``; empty: any); the slice column says which
    capability declares the rule (``agentfsm.slices``).
    """
    owner = {id(rule): s.name for s in SLICES for rule in s.rules}
    sources = [*(p.value for p in Phase), *(c.name for c in CHOICES)]
    questions = {c.name: c.question for c in CHOICES}
    by_source: dict[str, list[Rule]] = {}
    for rule in sorted(RULES, key=lambda r: (sources.index(_name(r.source)), r.order)):
        by_source.setdefault(_name(rule.source), []).append(rule)
    blocks = []
    for source, listed in by_source.items():
        facts = list(dict.fromkeys(name for rule in listed for name, _ in rule.when))
        heading = f"**{source}**" + (f" (choice: {questions[source]})" if source in questions else "")
        rows = [
            ["#", "rule", *(f"`{name}`" for name in facts), "goes to", "slice"],
            ["---:", "---", *["---"] * (len(facts) + 2)],
        ]
        for number, rule in enumerate(listed, 1):
            needed = dict(rule.when)
            cells = [("yes" if needed[name] else "no") if name in needed else "" for name in facts]
            said = f" (`{rule.exit_reason}`)" if rule.exit_reason else ""
            rows.append([str(number), f"`{rule.trigger}`", *cells, f"{_name(rule.dest)}{said}", owner[id(rule)]])
        table = "\n".join("| " + " | ".join(row) + " |" for row in rows)
        blocks.append(f"{heading}\n\n{table}\n")
    return "\n".join(blocks)


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


#: The state a stored run's lifecycle starts from: a run the store does not know yet.
NOT_STORED = "new"


def build_lifecycle_model() -> DiagramModel:
    """The diagram of a stored run's lifecycle (``agentfsm.lifecycle.LIFECYCLE``): each edge labelled with its checks."""
    edges = tuple(
        Edge(e.source.value if e.source else NOT_STORED, e.dest.value, e.trigger.value, e.condition) for e in LIFECYCLE
    )
    states = (NOT_STORED, *dict.fromkeys(e.dest for e in edges))
    return DiagramModel(
        "agentfsm stored run",
        states,
        edges,
        {edge: f"{edge.trigger} [{edge.condition}]" if edge.condition else edge.trigger for edge in edges},
        {},
        {},
        frozenset(),
        None,
        "",
        NOT_STORED,
        tuple(s.value for s in TERMINAL_STATUSES),
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
    lines = ["---", f"title: {_yaml_text(model.title)}", "---", "stateDiagram-v2", "    direction TB"]
    if ANY_ACTIVE in model.states:
        lines.append(f'    state "any active phase" as {ANY_ACTIVE}')
    lines.extend(f"    state {choice} <<choice>>" for choice in sorted(model.choices))
    lines.append(f"    [*] --> {model.initial}")
    for edge in model.edges:
        lines.append(f"    {edge.source} --> {edge.dest} : {_mermaid_text(_taken_label(model, edge))}")
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


def _taken_label(model: DiagramModel, edge: Edge) -> str:
    """An edge's label, with how often it was taken, or (for a path) the positions at which."""
    label = model.labels[edge]
    if edge in model.order:
        return f"{label} \u27e8{','.join(map(str, model.order[edge]))}\u27e9"
    if edge in model.taken:
        return f"{label} \u00d7{model.taken[edge]}"
    return label


def _yaml_text(text: str) -> str:
    # The title sits in YAML front matter, where "agent: add" would be a mapping: Mermaid refuses it.
    return text if re.fullmatch(r"\w[\w .()-]*", text) else json.dumps(text)


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
        "    rankdir=TB; nodesep=0.25; ranksep=0.5;",
        '    node [shape=box, style="rounded,filled", fillcolor=white, fontname=Helvetica, fontsize=16];',
        "    edge [fontname=Helvetica, fontsize=14];",
        '    start [shape=point, width=0.15, label=""];',
        f"    start -> {model.initial};",
    ]
    for state in model.states:
        attributes = ['label="any active phase"', "style=dashed"] if state == ANY_ACTIVE else []
        if state in model.choices:
            attributes = ["shape=diamond", f'label="{state}?"', "fontsize=13"]
        if state in model.finals:
            attributes.append("peripheries=2")
        if state == model.current:
            attributes += ['fillcolor="#ffe082"', 'color="#e65100"', "penwidth=3"]
            attributes.append(f"xlabel={_dot_quote(model.current_note)}")
        elif state in model.visited:
            attributes += ['fillcolor="#e3f2fd"', 'color="#1565c0"']
        lines.append(f"    {state} [{', '.join(attributes)}];" if attributes else f"    {state};")
    for edge in model.edges:
        label = _taken_label(model, edge)
        attributes = []
        if edge in model.taken:
            attributes += ['color="#1565c0"', "penwidth=2"]
        elif model.taken:
            attributes.append('color="#9e9e9e"')
        if edge.interrupt:
            attributes.append("style=dashed")
            if ANY_ACTIVE not in (edge.source, edge.dest):  # from one phase: it does not shape the layout
                attributes.append("constraint=false")
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
            "SVG and PNG output",
            "diagrams",
            "no Graphviz dot found: the extra brings one, or install Graphviz so that `dot` is on PATH; "
            "Mermaid and DOT output need nothing",
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
    machine: Literal["phases", "calls", "runs"] = "phases",
    path: bool = False,
) -> str | bytes:
    """A diagram of the machine (optionally for ``agent``, highlighting a run's ``trace`` or ``snapshot``).

    ``machine="calls"`` draws the lifecycle of one tool call instead (``CALL_TRANSITIONS``),
    ``machine="runs"`` the one of a stored run (``LIFECYCLE``). With ``path``, the trace's edges
    are numbered in the order they were taken (``⟨1,5⟩``).
    Mermaid and DOT come back as ``str``; SVG and PNG as ``bytes``.
    """
    if machine == "calls":
        model = build_call_model()
    elif machine == "runs":
        model = build_lifecycle_model()
    else:
        model = build_model(agent, trace, snapshot, path)
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
