"""MkDocs hook: the site serves the committed diagrams from the repository's diagrams/ folder.

The pages show ``diagrams/*.svg`` and the review page's screenshot as they are committed (``make
diagrams`` writes them), without a second copy under docs/ to keep in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Files, config: Any) -> Files:
    """Add every SVG and PNG of diagrams/ to the site, at ``diagrams/NAME``."""
    for path in sorted((ROOT / "diagrams").glob("*.[ps][nv]g")):
        files.append(
            File(
                f"diagrams/{path.name}",
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
