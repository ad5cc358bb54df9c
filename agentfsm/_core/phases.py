"""The machine's states: the phases of a run, the work items of a phase, the statuses of a tool call.

The vocabulary every table is written in (``agentfsm._core.rules`` for the language of rules,
``agentfsm.slices`` for each capability's rules, ``agentfsm.machine`` for the composed machine):
it names states and decides nothing. ``agentfsm.machine`` re-exports every name.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Phase(StrEnum):
    """The states of an agent run."""

    IDLE = "IDLE"
    LLM_CALL = "LLM_CALL"
    TOOL_PENDING = "TOOL_PENDING"
    CONFIRM = "CONFIRM"
    TOOL_RUN = "TOOL_RUN"
    EXIT_CHECK = "EXIT_CHECK"
    DONE = "DONE"
    PAUSED = "PAUSED"
    FAILED = "FAILED"


# The phases by name, as module constants (as h11 names its states), for the modules that read them
# at every step: on Python 3.11 reading a member off its enum class (``Phase.PAUSED``) is a slow
# lookup, ~45 ns against ~4 for a constant (``EnumType.__getattr__`` keeps the interpreter from
# caching it; Python 3.12 dropped it), and a step of a run reads a few dozen phases and call statuses.
IDLE: Final = Phase.IDLE
LLM_CALL: Final = Phase.LLM_CALL
TOOL_PENDING: Final = Phase.TOOL_PENDING
CONFIRM: Final = Phase.CONFIRM
TOOL_RUN: Final = Phase.TOOL_RUN
EXIT_CHECK: Final = Phase.EXIT_CHECK
DONE: Final = Phase.DONE
PAUSED: Final = Phase.PAUSED
FAILED: Final = Phase.FAILED

#: Phases in which work happens; a run can pause or fail from any of them.
ACTIVE_PHASES: tuple[Phase, ...] = (
    Phase.LLM_CALL,
    Phase.TOOL_PENDING,
    Phase.CONFIRM,
    Phase.TOOL_RUN,
    Phase.EXIT_CHECK,
)
#: Phases a run never leaves.
TERMINAL_PHASES: frozenset[Phase] = frozenset({Phase.DONE, Phase.FAILED})
#: Phases a run cannot fail from: nothing of the run's own is under way there.
CANNOT_FAIL: frozenset[Phase] = frozenset({Phase.IDLE, Phase.PAUSED, *TERMINAL_PHASES})
#: Phases that work on checked calls: a run resumed into one checks its pending calls again first.
PREPARED_PHASES: frozenset[Phase] = frozenset({Phase.CONFIRM, Phase.TOOL_RUN})
#: Entering these starts work whose results must be neither lost nor repeated (tool calls, human
#: decisions): a durable store commits every snapshot recorded before it.
COMMIT_ON_ENTRY: frozenset[Phase] = frozenset({Phase.CONFIRM, Phase.TOOL_RUN})


class Work(StrEnum):
    """One item of a phase's work, done in the order ``PHASE_WORK`` lists them.

    The hook points (``HOOK_POINTS``) are items too: there, the driver runs the hooks configured
    for the point (none configured: nothing to do).
    """

    BEFORE_RUN = "before_run"
    BEFORE_LLM = "before_llm"
    CALL_MODEL = "call_model"
    AFTER_LLM = "after_llm"
    BEFORE_TOOL = "before_tool"
    PREPARE_CALLS = "prepare_calls"
    #: The confirmation strategies decide the calls they cover (a blocking one asks now; a
    #: breakpoint one leaves the call undecided, and the run pauses for the decision).
    DECIDE = "decide"
    RUN_TOOLS = "run_tools"
    AFTER_TOOL = "after_tool"
    #: Wait out the backoff of the calls whose attempt failed and that will be tried again (``agentfsm.retries``).
    BACKOFF = "backoff"
    #: Each exit attempt starts without a request to continue: only its own ``on_exit`` hooks can make one.
    CLEAR_CONTINUE = "clear_continue_run"
    ON_EXIT = "on_exit"
    #: The model repeats itself (``loop_detected``): the ``on_loop`` hooks, then ``LoopDetection``'s consequence.
    ON_LOOP = "on_loop"
    AFTER_RUN = "after_run"
    #: The input guardrails check the messages the model call is about to read (``slices.guardrails``).
    GUARD_INPUT = "guard_input"
    #: The tool-call guardrails check the checked calls, before they are confirmed or run.
    GUARD_CALLS = "guard_calls"
    #: The tool-result guardrails check the step's results, before the model reads them.
    GUARD_RESULTS = "guard_results"
    #: The output guardrails check the final answer, before it leaves the run.
    GUARD_OUTPUT = "guard_output"
    #: The tool-call guardrails check the calls a decision gave new arguments, before they run.
    GUARD_DECIDED = "guard_decided"
    ON_ERROR = "on_error"
    #: Ask the reconcile functions of the calls in doubt after a crash whether their effect happened
    #: (``agentfsm.reconcile``); last in TOOL_RUN's work, which a call in doubt skips until then.
    RECONCILE = "reconcile"
    #: Hand the caller the result (the last work of a finished run: it is never done).
    FINISH = "finish"
    #: Hand the caller the snapshot (the last work of a paused run: it is never done).
    REPORT_PAUSE = "report_pause"
    #: Hand the caller the error that failed the run (the last work of a failed run: it is never done).
    RAISE_ERROR = "raise_error"


#: Where user hooks run: ``Agent(hooks={"before_llm": [...], ...})`` takes these names.
HOOK_POINTS: tuple[Work, ...] = (
    Work.BEFORE_RUN,
    Work.BEFORE_LLM,
    Work.AFTER_LLM,
    Work.BEFORE_TOOL,
    Work.AFTER_TOOL,
    Work.ON_EXIT,
    Work.AFTER_RUN,
    Work.ON_ERROR,
    Work.ON_LOOP,
)

#: What each phase does before its way out is chosen. A run's ``stage`` is the index of the next
#: item of its phase: where the phase's work stands, kept in snapshots. Phases not listed do nothing.
#: The hook points sit where they fire: ``before_run`` before the ``start`` edge, ``before_llm`` /
#: ``after_llm`` around the model call, ``before_tool`` before the calls are checked (so what is
#: confirmed and run is what the hooks left), ``after_tool`` once the step's results are in,
#: ``on_exit`` when an exit condition is met (the exit is read again after it), ``on_loop`` when the
#: model repeats itself, ``after_run`` on entering DONE, ``on_error`` on entering FAILED. The
#: guardrails come last before what they guard: the input's after ``before_llm`` (what the hooks
#: left is what the model reads), the calls' once they are checked (and again once a decision gave
#: a call new arguments), the results' after ``after_tool``, the answer's after ``on_exit`` and ``on_loop``.
PHASE_WORK: dict[Phase, tuple[Work, ...]] = {
    Phase.IDLE: (Work.BEFORE_RUN,),
    Phase.LLM_CALL: (Work.BEFORE_LLM, Work.GUARD_INPUT, Work.CALL_MODEL, Work.AFTER_LLM),
    Phase.TOOL_PENDING: (Work.BEFORE_TOOL, Work.PREPARE_CALLS, Work.GUARD_CALLS),
    Phase.CONFIRM: (Work.DECIDE, Work.GUARD_DECIDED),
    Phase.TOOL_RUN: (Work.RUN_TOOLS, Work.AFTER_TOOL, Work.GUARD_RESULTS, Work.BACKOFF, Work.RECONCILE),
    Phase.EXIT_CHECK: (Work.CLEAR_CONTINUE, Work.ON_EXIT, Work.ON_LOOP, Work.GUARD_OUTPUT),
    Phase.DONE: (Work.AFTER_RUN, Work.FINISH),
    Phase.PAUSED: (Work.REPORT_PAUSE,),
    Phase.FAILED: (Work.ON_ERROR, Work.RAISE_ERROR),
}


# -- the call lifecycle: where each pending tool call stands ----------------------------------------


class CallStatus(StrEnum):
    """Where one pending tool call stands; it changes only along ``CALL_TRANSITIONS``."""

    #: As the model proposed it, before it is checked against its tool.
    PROPOSED = "proposed"
    #: Checked: it runs in TOOL_RUN.
    READY = "ready"
    #: It cannot run (unknown tool, bad arguments): ``error`` says why, and the model is told.
    FAILED = "failed"
    #: A confirmation strategy must decide it before it can run.
    UNDECIDED = "undecided"
    #: A person rejected it: it never runs; the model is told, with the feedback (``decision``).
    REJECTED = "rejected"
    #: It ran: ``outcome`` holds what it returned or raised.
    DONE = "done"
    #: In doubt: it started before a crash and its result was never recorded. It runs again only
    #: when a decision says so (or its tool is idempotent).
    UNKNOWN = "outcome_unknown"
    #: An attempt failed with an error its tool's ``Retry`` covers: it runs again after its backoff.
    RETRYING = "retrying"
    #: Its tool asked a person (``ask_user``) and has no answer yet: it runs again once answered.
    AWAITING_INPUT = "awaiting_input"


# The call statuses by name, as module constants (see the phases'): ``CALL_`` and the member's name.
CALL_PROPOSED: Final = CallStatus.PROPOSED
CALL_READY: Final = CallStatus.READY
CALL_FAILED: Final = CallStatus.FAILED
CALL_UNDECIDED: Final = CallStatus.UNDECIDED
CALL_REJECTED: Final = CallStatus.REJECTED
CALL_DONE: Final = CallStatus.DONE
CALL_UNKNOWN: Final = CallStatus.UNKNOWN
CALL_RETRYING: Final = CallStatus.RETRYING
CALL_AWAITING_INPUT: Final = CallStatus.AWAITING_INPUT

#: Call statuses a call never leaves.
TERMINAL_CALL_STATUSES: frozenset[CallStatus] = frozenset({CallStatus.DONE, CallStatus.FAILED, CallStatus.REJECTED})
