"""Hooks steering the run: ``stop_run`` ends it where it stands, ``continue_run`` keeps it going past an exit.

Both are reserved State keys that hooks write (and tools that map them through
``outputs_to_state``). ``stop_run`` is read before the model is called and after each phase that
can end the run; a stop asked while tool calls wait for their results waits for them. A run whose
hooks and tools cannot write a key never reads it: the fact is a constant of its configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfsm._core.phases import DONE, EXIT_CHECK, IDLE, LLM_CALL, Work
from agentfsm._core.rules import Fact, Rule, Slice, when
from agentfsm.slices.loop import GO_ON

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun, RunConfig


def _stop_requested(run: AgentRun) -> bool:
    return bool(run.data.get("stop_run")) and not run.calls


def _continue_requested(run: AgentRun) -> bool:
    return bool(run.data.get("continue_run"))


def _stop_run(run: AgentRun) -> object:
    return run.data.get("stop_run")


def _constants(config: RunConfig, state: Mapping[str, Any]) -> Iterable[tuple[str, bool]]:
    def never_written(key: str) -> bool:
        writers = bool(config.dynamic) or any(key in (t.outputs_to_state or {}) for t in config.tools.values())
        # A hook may say which of these keys it writes (``writes``, as the loop detection's do); else it may write any.
        hooked = any(key in getattr(h, "writes", (key,)) for hs in config.hooks.values() for h in hs)
        return not (writers or hooked) and not state.get(key)

    if never_written("stop_run"):
        yield ("stop_requested", False)
    if never_written("continue_run"):
        yield ("continue_requested", False)


def _stop(phase: Any) -> Rule:
    return Rule(phase, 10, "stop", DONE, when(stop_requested=True), exit_reason="{stop_run}")


SLICE = Slice(
    "flow",
    facts=(
        Fact("stop_requested", "stop_run was set", "no stop asked", _stop_requested),
        Fact("continue_requested", "continue_run was set", "no continue asked", _continue_requested),
    ),
    rules=(
        _stop(IDLE),
        _stop(LLM_CALL),
        _stop(EXIT_CHECK),
        # A hook that keeps the run going past an exit is bounded by max_agent_steps and the usage limits all the same.
        Rule(
            EXIT_CHECK,
            30,
            "continue_run",
            GO_ON.name,
            when(exit_reached=True, continue_requested=True),
            triggers={"capped": "continue_capped", "limited": "continue_limited"},
        ),
    ),
    skips={
        # No model call (and so no after_llm) once a hook asked to stop; each exit attempt starts
        # without a request to continue: only its own on_exit hooks can make one.
        Work.CALL_MODEL: ("stop_requested", True),
        Work.AFTER_LLM: ("stop_requested", True),
        Work.CLEAR_CONTINUE: ("continue_requested", False),
    },
    exit_fields={"stop_run": _stop_run},
    constants=_constants,
)
