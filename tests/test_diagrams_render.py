"""Mermaid itself renders every diagram the repository ships (mermaid-cli in headless Chromium)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "diagrams"))
import generate  # noqa: E402 - the repository's diagram script
import render_check  # noqa: E402 - the repository's render check, as `make diagrams` runs it

#: What the machine's drawing is moving to: edges numbered by priority, choice states, a quoted title.
CHOICE_STATES = """\
---
title: "agent: add, finish"
---
stateDiagram-v2
    direction TB
    state go_on <<choice>>
    state ending <<choice>>
    [*] --> IDLE
    IDLE --> LLM_CALL : 1 start
    LLM_CALL --> TOOL_PENDING : 1 tool_calls [reply has tool calls]
    LLM_CALL --> EXIT_CHECK : 2 text_reply
    TOOL_PENDING --> EXIT_CHECK : 1 run_tools
    EXIT_CHECK --> ending : 1 exit condition met
    EXIT_CHECK --> go_on : 2 otherwise
    go_on --> LLM_CALL : 1 continue [steps left, within usage limits]
    go_on --> DONE : 2 max_steps
    ending --> DONE : 1 exit [answer fits]
    DONE --> [*]
"""
#: Proves the check can fail: a transition without a target.
REFUSED = "stateDiagram-v2\n    IDLE --> : start\n"


@pytest.fixture(scope="module")
def rendering(tmp_path_factory: pytest.TempPathFactory) -> render_check.Rendering:
    """Every shipped diagram and the two fixtures, rendered in one browser (about a second each)."""
    reason = render_check.missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must check that Mermaid renders the diagrams")
        pytest.skip(reason)
    diagrams = {**render_check.shipped_diagrams(), "fixture: choice states": CHOICE_STATES, "fixture: refused": REFUSED}
    return render_check.render(diagrams, tmp_path_factory.mktemp("mermaid"))


def test_the_shipped_diagrams_include_every_generated_one() -> None:
    shipped = render_check.shipped_diagrams()
    written = {f"diagrams/{name}" for name in generate.expected_files() if name.endswith(".mmd")}
    assert written <= shipped.keys() and "diagrams/machine.mmd" in written
    embedded = [(name, page) for name, (pages, _) in generate.EMBEDDED.items() for page in pages]
    blocks = [generate._block(name).search(page.read_text("utf-8")) for name, page in embedded]
    assert all(blocks), "each page holds its generated block"
    assert all(block.group(2) in shipped.values() for block in blocks if block), "the pages' generated blocks"


def test_mermaid_renders_every_shipped_diagram(rendering: render_check.Rendering) -> None:
    refused = {name: why for name, why in rendering.refused.items() if not name.startswith("fixture: ")}
    assert not refused, f"Mermaid refuses {sorted(refused)}: {refused}"
    for name in render_check.shipped_diagrams():
        svg = rendering.svgs[name]
        assert svg.startswith("<svg") and "</svg>" in svg and "Syntax error" not in svg, name
    assert "TOOL_PENDING" in rendering.svgs["diagrams/machine.mmd"]


def test_mermaid_renders_choice_states(rendering: render_check.Rendering) -> None:
    svg = rendering.svgs["fixture: choice states"]
    assert 'id="my-svg-state-go_on-' in svg and 'id="my-svg-state-ending-' in svg
    assert ">go_on<" not in svg and ">ending<" not in svg, "drawn as choices (unlabelled), not as plain states"
    assert "agent: add, finish" in svg, "the quoted title is drawn as written"


def test_a_diagram_mermaid_refuses_fails_the_check_by_name(rendering: render_check.Rendering) -> None:
    assert "fixture: refused" not in rendering.svgs
    assert "Parse error on line 2" in rendering.refused["fixture: refused"]
