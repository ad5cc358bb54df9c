"""Where a durable run's steps come from: DBOS, in a running workflow, or a workflow's checkpoints, read back."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Protocol

from dbos import DBOS

from agentfsm.errors import SnapshotError


class Steps(Protocol):
    """Runs a run's steps: each one's output is its checkpoint."""

    #: The steps are read back from a record, to show where a run stands: nothing runs, and the
    #: run's first error (a failed run's) ends the record.
    reading: bool

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        """The step's output: ``body()``'s, or the one recorded for it."""

    def run_each(self, name: str, bodies: Sequence[Callable[[], Any]], done: Callable[[int, Any], None]) -> None:
        """Run several steps, concurrently where they may be; ``done(index, output)`` as each finishes."""


class WorkflowSteps:
    """The steps of the workflow running in this thread: DBOS runs each once and records its output.

    ``run_each`` draws the steps' ids in order before any runs (``DBOS.reserve_step``), so a
    recovered workflow finds each output under the same id whatever order they finished in.
    """

    reading = False

    def __init__(self, pool: ThreadPoolExecutor | None) -> None:
        self._pool = pool

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        """Run ``body`` as the workflow's next step."""
        return DBOS.run_step({"name": name}, body)

    def run_each(self, name: str, bodies: Sequence[Callable[[], Any]], done: Callable[[int, Any], None]) -> None:
        """Run ``bodies`` as steps, in the pool when there are several."""
        reserved = [_reserve(name, body) for body in bodies]
        if self._pool is None or len(bodies) == 1:
            for i, step in enumerate(reserved):
                done(i, step())
            return
        futures = {self._pool.submit(step): i for i, step in enumerate(reserved)}
        for future in as_completed(futures):
            done(futures[future], future.result())


def _reserve(name: str, body: Callable[[], Any]) -> Callable[[], Any]:
    """The workflow's next step, to run later from any thread: its id is drawn now."""
    step = DBOS.reserve_step()
    context = contextvars.copy_context()  # where DBOS keeps the workflow the step belongs to

    def run() -> Any:
        return step.run({"name": name}, body)

    return lambda: context.run(run)


class EndOfRecord(Exception):
    """The recorded steps of a workflow end here: the run stands where its next step would start."""


class RecordedSteps:
    """The steps a workflow recorded, given back in the order the run asks for them."""

    reading = True

    def __init__(self, workflow_id: str, steps: Sequence[Any]) -> None:
        self._workflow_id = workflow_id
        self._steps = {step["function_id"]: step for step in steps}
        self._next = 1  # DBOS numbers a workflow's steps from 1

    def _take(self, name: str) -> Any:
        step = self._steps.get(self._next)
        self._next += 1
        if step is None:
            raise EndOfRecord
        if step["function_name"] != name:
            raise SnapshotError(
                f"Workflow {self._workflow_id} recorded step {step['function_id']} as {step['function_name']!r} "
                f"where this agent takes {name!r}: it was run by an agent configured differently."
            )
        if step["error"] is not None:
            raise step["error"]
        return step["output"]

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        """The step's recorded output (or the error it recorded)."""
        return self._take(name)

    def run_each(self, name: str, bodies: Sequence[Callable[[], Any]], done: Callable[[int, Any], None]) -> None:
        """Give each recorded output to ``done``; ``EndOfRecord`` after them if any is missing."""
        missing = False
        for i in range(len(bodies)):
            try:
                output = self._take(name)
            except EndOfRecord:
                missing = True
                continue
            done(i, output)
        if missing:
            raise EndOfRecord
