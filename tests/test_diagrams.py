from __future__ import annotations

import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, BreakpointException, ChatMessage, Phase, tool
from agentfsm.breakpoints import Breakpoint
from agentfsm.demo import DEMO_QUESTION, demo_agent
from agentfsm.diagrams import ANY_ACTIVE, build_model, machine_diagram
from agentfsm.errors import MissingRendererError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.machine import CALL_TRANSITIONS, RULES, TRANSITIONS
from tests.helpers import add, call, calls, finish

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "diagrams"))
import generate  # noqa: E402 - the repository's diagram script


def paused_demo() -> Any:
    with pytest.raises(BreakpointException) as info:
        demo_agent().run([ChatMessage.from_user(DEMO_QUESTION)], break_point=Breakpoint(phase=Phase.TOOL_RUN, step=2))
    return info.value.snapshot


def test_every_rule_is_drawn_numbered_in_its_order_and_every_edge_is_a_way_through_them() -> None:
    mermaid = machine_diagram("mermaid")
    assert isinstance(mermaid, str)
    assert mermaid.startswith("---\ntitle: agentfsm machine\n---\nstateDiagram-v2\n")
    assert "    state go_on <<choice>>\n" in mermaid and "    state ending <<choice>>\n" in mermaid
    drawn = {(e.source, e.trigger): e for e in build_model().edges}
    for source in {r.source for r in RULES}:
        ordered = sorted((r for r in RULES if r.source == source), key=lambda r: r.order)
        for number, rule in enumerate(ordered, 1):
            name = getattr(source, "value", source)
            dest = getattr(rule.dest, "value", rule.dest)
            assert f"    {name} --> {dest} : {number} {rule.trigger}" in mermaid, rule
            assert drawn[(name, rule.trigger)].number == number
    for t in TRANSITIONS:
        if t.interrupt:
            source = ANY_ACTIVE if t.trigger in ("pause", "fail", "cancel") else t.source.value
            dest = ANY_ACTIVE if t.trigger == "resume" else t.dest.value
            assert f"    {source} --> {dest} : {t.label}\n" in mermaid, t
        else:  # the way through the rules it was compiled from is drawn, rule by rule
            assert all((getattr(r.source, "value", r.source), r.trigger) in drawn for r in t.rules), t
    dot = machine_diagram("dot")
    assert isinstance(dot, str) and dot.startswith("digraph agentfsm {") and "rankdir=TB" in dot
    assert 'go_on [shape=diamond, label="go_on?"' in dot
    edges = len(build_model().edges)
    interrupts = sum(1 for t in TRANSITIONS if t.interrupt)
    assert edges == len(RULES) + interrupts - 4 * 5 + 4, "pause, fail, resume and cancel are drawn once each"
    assert mermaid.count(" --> ") == edges + 3, "plus [*] --> IDLE, DONE --> [*], FAILED --> [*]"
    assert dot.count(" -> ") == edges + 1, "plus the start arrow"
    labels = [line.partition(" : ")[2] for line in mermaid.splitlines() if " : " in line]
    assert max(label.count(",") + 1 for label in labels if "[" in label) <= 3, "at most three facts a label"


def test_the_call_machine_is_drawn_with_every_declared_edge() -> None:
    mermaid = machine_diagram("mermaid", machine="calls")
    assert isinstance(mermaid, str) and "title: agentfsm tool call" in mermaid
    assert "    [*] --> proposed\n" in mermaid and "    done --> [*]\n" in mermaid
    for t in CALL_TRANSITIONS:
        assert f"    {t.source.value} --> {t.dest.value} : {t.trigger} [" in mermaid, t
    dot = machine_diagram("dot", machine="calls")
    assert isinstance(dot, str) and "start -> proposed;" in dot
    assert dot.count(" -> ") == len(CALL_TRANSITIONS) + 1, "plus the start arrow"


@tool(outputs_to_state={"stop_run": {"source": "reason"}})
def give_up(why: str) -> dict[str, str]:
    """Stop the run, saying why."""
    return {"reason": why}


def test_a_tool_that_writes_stop_run_is_drawn_with_the_stop_edge_its_runs_take() -> None:
    script = [calls(call("give_up", why="enough")), "never asked"]
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[give_up])
    result = agent.run([ChatMessage.from_user("go")])
    taken = {(r.source.value, r.trigger, r.dest.value) for r in result["trace"]}
    assert ("EXIT_CHECK", "stop", "DONE") in taken and result["exit_reason"] == "enough"
    drawn = {(e.source, e.trigger, e.dest) for e in build_model(agent).edges}
    compiled = {(t.source.value, t.trigger, t.dest.value): t for t in TRANSITIONS}
    ways = {(getattr(r.source, "value", r.source), r.trigger) for edge in taken for r in compiled[edge].rules}
    assert ways <= {(source, trigger) for source, trigger, _ in drawn}, "every rule the run took is drawn"
    assert ("EXIT_CHECK", "stop", "DONE") not in {
        (e.source, e.trigger, e.dest) for e in build_model(agent_with(tools=[add])).edges
    }
    assert "stop [stop_run was set]" in agent.draw("mermaid"), "the label does not say only a hook sets it"


def agent_with(**kwargs: Any) -> Agent:
    return Agent(chat_generator=ScriptedChatGenerator([]), **kwargs)


def test_an_agents_outline_gives_what_its_drawing_reads() -> None:
    stopping, plain = agent_with(tools=[give_up]).outline(), agent_with(tools=[add]).outline()
    assert [t.name for t in stopping.tools] == ["give_up"] and not stopping.hooks and not stopping.confirmation
    assert ("stop_requested", False) in plain.constants, "nothing can write stop_run: the fact is a constant"
    assert ("stop_requested", False) not in stopping.constants, "its tool writes stop_run"


def test_agent_diagrams_show_the_agents_configuration() -> None:
    one = agent_with(tools=[add], max_agent_steps=3).draw()
    other = agent_with(tools=[add, finish], exit_conditions=["finish"], max_agent_steps=9).draw()
    assert one != other
    assert one.startswith('---\ntitle: "agent: add"\n---\n'), "quoted: YAML reads 'agent: add' as a mapping"  # type: ignore[union-attr]
    assert "note right of TOOL_RUN : tools - add, up to 4 in parallel" in one  # type: ignore[operator]
    assert "exit [text reply]" in one and "capped [3 model calls made]" in one  # type: ignore[operator]
    assert "exit [finish ran]" in other and "tools - add, finish" in other  # type: ignore[operator]
    assert "CONFIRM" not in one, "no confirmation strategy can send a call to CONFIRM"  # type: ignore[operator]
    assert "ANY_ACTIVE --> PAUSED" in one  # type: ignore[operator]
    no_tools = agent_with().draw()
    assert "tool_calls [never - the agent has no tools]" in no_tools  # type: ignore[operator]


def test_run_diagrams_highlight_the_path_and_the_current_phase() -> None:
    result = demo_agent().run([ChatMessage.from_user(DEMO_QUESTION)])
    model = build_model(demo_agent(), trace=result["trace"])
    taken = {(e.source, e.trigger): n for e, n in model.taken.items()}
    assert taken == {
        ("IDLE", "start"): 1,
        ("LLM_CALL", "tool_calls"): 2,
        ("TOOL_PENDING", "run_tools"): 2,
        ("TOOL_RUN", "tools_done"): 2,
        ("EXIT_CHECK", "continue"): 2,
        ("go_on", "go"): 2,
        ("LLM_CALL", "text_reply"): 1,
        ("EXIT_CHECK", "exit"): 1,
    }
    assert model.current == "DONE" and model.current_note == "ended here, step 3"
    paused = build_model(demo_agent(), snapshot=paused_demo())
    assert paused.current == "TOOL_RUN" and paused.current_note == "paused here, step 2"
    mermaid = demo_agent().draw(snapshot=paused_demo())
    assert "class TOOL_RUN current" in mermaid and "note left of TOOL_RUN : paused here, step 2" in mermaid  # type: ignore[operator]
    assert "tool_calls [reply has tool calls] \u00d72" in mermaid  # type: ignore[operator]
    dot = demo_agent().draw("dot", trace=[r.to_dict() for r in result["trace"]])
    assert 'EXIT_CHECK -> go_on [label="2 continue \u00d72", color="#1565c0", penwidth=2];' in dot  # type: ignore[operator]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_svg_and_png_render_to_read_on_a_page() -> None:
    svg = machine_diagram("svg")
    assert isinstance(svg, bytes) and b"<svg" in svg and b"TOOL_PENDING" in svg
    for png in (machine_diagram("png"), demo_agent().draw("png", snapshot=paused_demo())):
        width, height = png_size(png)  # type: ignore[arg-type]
        assert width < 2.5 * height, "the main loop runs top to bottom: no strip five times as wide as high"
        assert width < 3200, "at 100 % zoom the diagram fits a wide screen"
    dot = machine_diagram("dot")
    assert "edge [fontname=Helvetica, fontsize=14]" in dot  # 19 px at 96 dpi
    labels = re.findall(r'label="([^"]*)"', dot)  # type: ignore[arg-type]
    lines = [line for label in labels for line in label.split("\\n")]
    assert max(map(len, lines)) <= 36, "long guards wrap instead of widening the page"
    assert "5 continue_run" in lines, "a trigger has a line of its own"


def test_missing_renderer_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agentfsm.diagrams.find_renderer", lambda: None)
    with pytest.raises(MissingRendererError, match=r"pip install 'agentfsm\[diagrams\]'"):
        machine_diagram("svg")
    assert machine_diagram("mermaid")  # needs nothing


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="Unknown diagram format 'gif'"):
        machine_diagram("gif")  # type: ignore[arg-type]


def test_committed_diagrams_are_current() -> None:
    stale = []
    for name, content in generate.expected_files().items():
        path = ROOT / "diagrams" / name
        current = path.read_bytes() if isinstance(content, bytes) else path.read_text(encoding="utf-8")
        if not path.exists() or current != content:
            stale.append(name)
    stale += [page.name for page, text in generate.expected_pages().items() if page.read_text(encoding="utf-8") != text]
    assert not stale, f"{stale} are out of date: run `make diagrams`"
