"""The wheel is a real package: built from the source, installed alone in a fresh virtualenv, it runs the demo."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str | Path, cwd: Path) -> str:
    # Without PYTHONPATH: the fresh virtualenv must find the installed wheel, not this checkout.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.wheel
def test_the_wheel_installs_alone_and_runs_the_demo(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, ROOT, cwd=tmp_path)
    (wheel,) = dist.glob("agentfsm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "agentfsm/py.typed" in names
    static = {f"agentfsm/web/static/{name}" for name in ("review.css", "review.js", "live.js")}
    assert static <= set(names), "the review page's script and style files ship in the wheel"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "examples/"))]

    env = tmp_path / "env"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    # The wheel's own dependencies come from the package index; no extra is installed.
    run(python, "-m", "pip", "install", "--quiet", wheel, cwd=tmp_path)
    assert run(python, "-c", "import agentfsm; print(agentfsm.__file__)", cwd=tmp_path).startswith(str(env))
    demo = run(env / "bin" / "agentfsm", "demo", "--quiet", cwd=tmp_path)
    assert "Lisbon is 5.5 °C warmer" in demo and "exit: text" in demo
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert run(env / "bin" / "agentfsm", "--version", cwd=tmp_path).strip() == f"agentfsm {version}"


def test_the_repository_tracks_no_symbolic_link() -> None:
    # A worktree's link to another checkout's node_modules, committed once, replaced the directory
    # `make node-tools` installs into on every clone: links are machine-local, never part of the tree.
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000 ")]
    assert links == [], f"tracked symbolic links: {links}"
