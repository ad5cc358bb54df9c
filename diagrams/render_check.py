"""Render every Mermaid diagram the repository ships with a real Mermaid renderer: ``make diagrams``.

GitHub, MkDocs and other viewers draw our Mermaid text with Mermaid itself, and a diagram Mermaid
refuses shows there as an error box. So each one is rendered here with mermaid-cli (npm's
``@mermaid-js/mermaid-cli``, installed from the repository's ``package.json`` by ``make
node-tools``) in the system's headless Chromium (``make chromium``), all of them in one browser,
and any refusal fails ``make diagrams`` and ``tests/test_diagrams_render.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = HERE / "render_mermaid.mjs"
MERMAID_CLI = ROOT / "node_modules" / "@mermaid-js" / "mermaid-cli" / "package.json"
#: Headless, and quiet: the closed network of CI refuses Chromium's background connections.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
#: About a second a diagram on a loaded 2-core machine; a browser that never starts should not hang a test run.
TIMEOUT_S = 300
MERMAID_BLOCK = re.compile(r"^```mermaid\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def shipped_diagrams() -> dict[str, str]:
    """Every Mermaid diagram in the repository, as committed: name -> Mermaid text.

    The ``diagrams/*.mmd`` files ``generate.py`` writes, and each Mermaid block of README.md and
    the docs (the generated blocks between ``<!-- machine-diagram:start -->`` markers and those
    written by hand), named ``<page> block <n>``.
    """
    diagrams = {f"diagrams/{path.name}": path.read_text(encoding="utf-8") for path in sorted(HERE.glob("*.mmd"))}
    for page in (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))):
        blocks = MERMAID_BLOCK.findall(page.read_text(encoding="utf-8"))
        for n, block in enumerate(blocks, 1):
            diagrams[f"{page.relative_to(ROOT).as_posix()} block {n}"] = block
    return diagrams


def chromium() -> str | None:
    """The browser mermaid-cli drives: ``PUPPETEER_EXECUTABLE_PATH``, else Chromium on the PATH."""
    return os.environ.get("PUPPETEER_EXECUTABLE_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")


def missing() -> str | None:
    """Why diagrams cannot be rendered here (Node, mermaid-cli or Chromium missing), or None."""
    if shutil.which("node") is None:
        return "Node is not installed (the render check runs mermaid-cli from npm)"
    if not MERMAID_CLI.exists():
        return "mermaid-cli is not installed (make node-tools)"
    if chromium() is None:
        return "Chromium is not installed (make chromium)"
    return None


@dataclass(frozen=True)
class Rendering:
    """What mermaid-cli made of each diagram."""

    svgs: dict[str, str]
    """Name -> the SVG Mermaid drew, for each diagram it accepted."""
    refused: dict[str, str]
    """Name -> why Mermaid refused it (or drew an error in place of the diagram)."""


def render(diagrams: dict[str, str], out_dir: Path) -> Rendering:
    """Render each diagram to an SVG file in ``out_dir``, in one browser.

    Raises:
        RuntimeError: mermaid-cli could not run at all (see :func:`missing`), as distinct from
            Mermaid refusing a diagram.
    """
    outputs = {name: out_dir / f"{n}.svg" for n, name in enumerate(diagrams, 1)}
    job = out_dir / "job.json"
    job.write_text(
        json.dumps(
            {
                "browser": {"executablePath": chromium(), "headless": True, "args": list(CHROMIUM_ARGS)},
                "diagrams": [
                    {"name": name, "definition": text, "output": str(outputs[name])} for name, text in diagrams.items()
                ],
            }
        ),
        encoding="utf-8",
    )
    try:
        done = subprocess.run(
            ["node", str(SCRIPT), str(job)], capture_output=True, text=True, check=False, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"mermaid-cli did not finish in {TIMEOUT_S} s (is Chromium starting?)") from None
    try:
        refused: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError(f"mermaid-cli did not run (exit code {done.returncode}):\n{done.stderr}") from None
    svgs: dict[str, str] = {}
    for name, output in outputs.items():
        if name in refused:
            refused[name] = _explain(refused[name])
            continue
        svg = output.read_text(encoding="utf-8") if output.exists() else ""
        if "<svg" not in svg:
            refused[name] = "mermaid-cli wrote no SVG"
        elif "Syntax error" in svg:
            refused[name] = "Mermaid drew its 'Syntax error in text' diagram"
        else:
            svgs[name] = svg
    return Rendering(svgs, refused)


def _explain(message: str) -> str:
    # An error thrown in the page reaches Node as its class name alone.
    if message.startswith("YAMLException"):
        return f"{message}: the front matter between the '---' lines is not valid YAML (quote a value with ': ')"
    return message


def main() -> int:
    """Render every shipped diagram; fail if Mermaid refuses one, or cannot run."""
    reason = missing()
    if reason:
        print(f"Cannot check that Mermaid renders the diagrams: {reason}.", file=sys.stderr)
        return 1
    diagrams = shipped_diagrams()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        rendering = render(diagrams, Path(out_dir))
    elapsed = time.perf_counter() - started
    for name, why in rendering.refused.items():
        print(f"Mermaid refused {name}:\n{why}\n", file=sys.stderr)
    if rendering.refused:
        return 1
    version = json.loads(MERMAID_CLI.read_text(encoding="utf-8"))["version"]
    print(f"Mermaid (mermaid-cli {version}) rendered all {len(diagrams)} diagrams in {elapsed:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
