"""The Python snippets of the README and of the pages under docs/ run as written; the set-up commands exist."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfsm.logs import stdlib_logger, use_standard_logging
from agentfsm.serialization import _user_allowed

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _snippets(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


RUNNABLE = [(page, snippet) for page in PAGES for snippet in _snippets(page)]
IDS = [f"{page.relative_to(ROOT).as_posix()}-{i}" for i, (page, _) in enumerate(RUNNABLE)]


@pytest.fixture
def isolated_globals() -> Iterator[None]:
    """Snippets may configure logging or the allow-list: undo it afterwards."""
    handlers, level = list(stdlib_logger.handlers), stdlib_logger.level
    allowed = set(_user_allowed)
    yield
    use_standard_logging()
    stdlib_logger.handlers[:] = handlers
    stdlib_logger.setLevel(level)
    _user_allowed.clear()
    _user_allowed.update(allowed)


@pytest.mark.parametrize(("page", "snippet"), RUNNABLE, ids=IDS)
def test_snippet_runs(
    page: Path, snippet: str, isolated_globals: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each snippet runs as an importable module, as user code does: serialization refers to it by name.
    (tmp_path / "readme_snippet.py").write_text(snippet, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("readme_snippet", None)
    try:
        __import__("readme_snippet")
    finally:
        sys.modules.pop("readme_snippet", None)


def test_the_development_section_gives_the_two_setup_commands() -> None:
    development = README.split("\n## Development\n", 1)[1].split("\n## ", 1)[0]
    first_block = re.search(r"```bash\n(.*?)```", development, flags=re.DOTALL)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    # make demo installs agentfsm alone (seconds); make test the development extra.
    assert "\ndemo: $(VENV)/.installed\n" in makefile and "pip install --quiet -e .\n" in makefile
    assert "\ntest: $(VENV)/.installed-dev " in makefile


def test_readme_starts_with_pip_install() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README, flags=re.DOTALL)
    assert first_block is not None and first_block.group(1).strip() == "pip install agentfsm"
