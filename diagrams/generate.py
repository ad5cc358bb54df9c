"""Regenerate the committed diagrams and the Mermaid diagram embedded in README.md and the docs: ``make diagrams``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from agentfsm import BreakpointException, ChatMessage, Phase
from agentfsm.breakpoints import Breakpoint
from agentfsm.demo import DEMO_QUESTION, demo_agent
from agentfsm.diagrams import decision_tables, machine_diagram

HERE = Path(__file__).resolve().parent
#: The Mermaid diagrams embedded in pages, between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
#: markers: the pages that show each, and what it draws.
EMBEDDED: dict[str, tuple[tuple[Path, ...], dict[str, str]]] = {
    "machine-diagram": ((HERE.parent / "README.md", HERE.parent / "docs" / "machine.md"), {}),
    "lifecycle-diagram": ((HERE.parent / "docs" / "snapshots-and-stores.md",), {"machine": "runs"}),
}
#: The machine page's decision tables, between decision-tables markers.
TABLES_BLOCK = re.compile(r"(<!-- decision-tables:start -->\n)(.*?)(<!-- decision-tables:end -->)", re.DOTALL)


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {name}:start -->\n```mermaid\n)(.*?)(```\n<!-- {name}:end -->)", re.DOTALL)


def _paused_demo_snapshot() -> object:
    try:
        demo_agent().run([ChatMessage.from_user(DEMO_QUESTION)], break_point=Breakpoint(phase=Phase.TOOL_RUN, step=2))
    except BreakpointException as exc:
        return exc.snapshot
    raise AssertionError("the demo run did not pause")


def expected_files() -> dict[str, str | bytes]:
    """File name in diagrams/ -> content."""
    demo = demo_agent()
    demo_result = demo_agent().run([ChatMessage.from_user(DEMO_QUESTION)])
    paused = _paused_demo_snapshot()
    views = {
        "machine": {},
        "demo-agent": {"agent": demo},
        "demo-run": {"agent": demo, "trace": demo_result["trace"]},
        "demo-paused": {"agent": demo, "snapshot": paused},
        "call-machine": {"machine": "calls"},
        "run-lifecycle": {"machine": "runs"},
    }
    files: dict[str, str | bytes] = {}
    for name, view in views.items():
        files[f"{name}.mmd"] = machine_diagram("mermaid", **view)  # type: ignore[arg-type]
        files[f"{name}.svg"] = machine_diagram("svg", **view)  # type: ignore[arg-type]
    return files


def expected_pages() -> dict[Path, str]:
    """Each page of ``EMBEDDED`` with its Mermaid diagrams (and the machine page's decision tables) embedded."""
    tables = decision_tables()
    pages: dict[Path, str] = {}
    for name, (shown_on, view) in EMBEDDED.items():
        mermaid = machine_diagram("mermaid", **view)  # type: ignore[arg-type]
        assert isinstance(mermaid, str)
        for page in shown_on:
            text = pages.get(page) or page.read_text(encoding="utf-8")
            pages[page] = _block(name).sub(lambda m, d=mermaid: m.group(1) + d + m.group(3), text)
    return {page: TABLES_BLOCK.sub(lambda m: m.group(1) + tables + m.group(3), text) for page, text in pages.items()}


def main() -> int:
    """Write every diagram and the pages' diagram blocks."""
    for name, content in expected_files().items():
        path = HERE / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    for page, text in expected_pages().items():
        page.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
