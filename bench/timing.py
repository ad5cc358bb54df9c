"""What the benchmark scripts share that imports no framework: the peers' processes load only their own."""

from __future__ import annotations

import gc
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

#: ``setup()`` builds an agent and returns its run, to be timed.
Setup = Callable[[], Callable[[], object]]


def import_ms(module: str, runs: int) -> float | None:
    """Median time to import ``module`` in a fresh interpreter, minus the interpreter's own start.

    None if it cannot be imported. ``peers/workloads.py`` times the peers' imports with it too.
    """

    def start(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        return time.perf_counter() - started

    try:
        samples = [start(f"import {module}") - start("pass") for _ in range(runs)]
    except subprocess.CalledProcessError:
        return None
    return round(statistics.median(samples) * 1000, 1)


def timed_run(setup: Setup) -> float:
    """Seconds of one run of ``setup``, timed after an untimed one and a garbage collection.

    The untimed run brings the code and data back into the CPU caches.
    """
    gc.collect()  # each run pays for its own garbage, not for what the one before left
    setup()()
    run_once = setup()
    started = time.perf_counter()
    run_once()
    return time.perf_counter() - started
