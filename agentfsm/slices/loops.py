"""Loop detection: the model repeats itself, and the run tells it, stops, or leaves it to the ``on_loop`` hooks.

With ``Agent(loop_detection=LoopDetection(...))`` the run reads ``loop_detected`` in EXIT_CHECK,
once the step's tool results are in (``agentfsm.loops``); when it holds, the ``on_loop`` hooks
fire. With ``then="stop"`` the run then ends through its own edge, ``loop_stop``, with the exit
reason ``"loop_detected"`` (unless an ``on_loop`` hook broke the row, or asked to stop itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import DONE, EXIT_CHECK, Work
from agentfsm._core.rules import Fact, Rule, Slice, when
from agentfsm.loops import LOOP_EXIT_REASON, repeated_call

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig


def _loop_detected(run: AgentRun) -> bool:
    detection = run.config.loop_detection
    return detection is not None and repeated_call(run.data["messages"], detection.repeats) is not None


def _loop_ends_run(run: AgentRun) -> bool:
    detection = run.config.loop_detection
    return detection is not None and detection.then == "stop" and _loop_detected(run)


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    detection = config.loop_detection
    if detection is None:
        yield ("loop_detected", False)
    if detection is None or detection.then != "stop":
        yield ("loop_ends_run", False)


SLICE = Slice(
    "loops",
    facts=(
        Fact("loop_detected", "the model repeats itself", "no repeated call", _loop_detected),
        Fact("loop_ends_run", "a repeated call stops the run", "no loop to stop", _loop_ends_run),
    ),
    rules=(Rule(EXIT_CHECK, 20, "loop_stop", DONE, when(loop_ends_run=True), exit_reason=LOOP_EXIT_REASON),),
    skips={Work.ON_LOOP: ("loop_detected", False)},
    constants=_constants,
)
