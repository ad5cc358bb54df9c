"""One agent run as a sans-I/O state machine: ``AgentRun`` walks the composed tables of ``agentfsm.machine``.

``AgentRun`` never calls a model, a tool, a hook, a user or a store: it does no I/O. ``next_action``
does the current phase's work that needs no I/O, says what the driver must do next as data
(``agentfsm._core.actions``) and, once the phase's work is done, takes the one declared edge whose
guard holds (``_move``: the one place that moves the run, and does what the edge declares). The
driver performs each action and reports the result (``model_replied``, ``tool_completed``,
``tools_ran``, ``decided``, ``hooks_ran``); reports only record. What must be persisted comes out
as deltas (``take_deltas``) that the drivers write to the run's observers after each step, before
the I/O that follows: so entering CONFIRM or TOOL_RUN is committed before any decision is asked or
tool runs. The facts the guards read are the slices' (``agentfsm.slices``), read from the run's data
at each boundary; what they count and check lives there too. The drivers are in
``agentfsm._core.drivers``; what a run records, in ``agentfsm._core.records``.
"""

from __future__ import annotations

import functools
import string
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from logging import DEBUG
from typing import TYPE_CHECKING, Any, cast

from agentfsm._core import listeners
from agentfsm._core.actions import (
    Action,
    Backoff,
    CallModel,
    CheckGuardrails,
    Confirm,
    Fail,
    Finish,
    Pause,
    Reconcile,
    RunHooks,
    RunTools,
)
from agentfsm._core.config import RunConfig
from agentfsm._core.decisions import check_decisions
from agentfsm._core.records import RunDelta, TransitionRecord, new_record, result_of, snapshot_fields, snapshot_of
from agentfsm.decisions import as_decision, call_fingerprint
from agentfsm.errors import ConfigurationError, IterationStoppedError, MachineError, ModelClientError
from agentfsm.events import (
    CallChanged,
    CallReconciled,
    DecisionTaken,
    Event,
    GuardrailChecked,
    PhaseChanged,
    RunResumed,
    RunWarning,
)
from agentfsm.limits import reported_counts
from agentfsm.logs import logger, stdlib_logger
from agentfsm.machine import (
    ACTIVE_PHASES,
    CALL_DISPATCH,
    CALL_DONE,
    CALL_READY,
    CALL_UNDECIDED,
    CALL_UNKNOWN,
    CANNOT_FAIL,
    DISPATCH,
    EXIT_FIELDS,
    FAILED,
    GUARDED_INTERRUPTS,
    HOOK_POINTS,
    IDLE,
    PAUSED,
    PHASE_WORK,
    Phase,
    RunFacts,
    Transition,
    Work,
    constant_facts,
    dispatch_for,
    watched_interrupts,
    work_plan,
)
from agentfsm.messages import ChatMessage, ChatRole, ToolCall, have_own_ids, with_unique_call_ids
from agentfsm.pauses import BreakpointHit, PauseReason
from agentfsm.reconcile import Happened, InDoubtCall, NotHappened, Unknown, why
from agentfsm.serialization import brief
from agentfsm.slices import doubt, retries
from agentfsm.slices import guardrails as guardrails_slice
from agentfsm.slices import interrupts as interrupts_slice
from agentfsm.slices import limits as limits_slice
from agentfsm.slices import reconcile as reconcile_slice
from agentfsm.slices.cancel import NOT_CANCELLED
from agentfsm.slices.output import FINAL_ANSWER_TOOL
from agentfsm.state import State
from agentfsm.tools.invoker import CallOutcome, PreparedCall, timed_out
from agentfsm.tools.tool import IDEMPOTENCY_KEY, Tool, idempotency_key

if TYPE_CHECKING:
    from agentfsm.decisions import ToolExecutionDecision
    from agentfsm.guardrails import GuardrailVerdict
    from agentfsm.hitl.strategies import Decider
    from agentfsm.pauses import InputQuestion
    from agentfsm.reconcile import Reconciled
    from agentfsm.result import AgentResult
    from agentfsm.snapshot import AgentSnapshot

__all__ = ["AgentRun", "RunConfig", "add_usage", "bad_model_output", "unanswered_calls"]

#: The hook points after which the pending calls are read again from the conversation.
_REREAD_CALLS = frozenset({Work.AFTER_LLM, Work.BEFORE_TOOL})
#: The declared call transitions: (status, trigger) -> the status it leads to.
_CALL_MOVES = CALL_DISPATCH.moves
#: The statuses of calls waiting for a decision.
_DECIDABLE = (CALL_UNDECIDED, CALL_UNKNOWN)
#: The phase whose work each work item is.
_PHASE_OF: dict[Work, Phase] = {item: phase for phase, items in PHASE_WORK.items() for item in items}
#: The interrupt a hook that asked a person takes, out of each phase a hook may ask in (``slices.interrupts``).
_HOOK_INPUT: dict[Phase, tuple[Transition, ...]] = {
    phase: tuple(t for t in GUARDED_INTERRUPTS[phase] if t.trigger == "hook_input")
    for phase in set(interrupts_slice.ASKING_POINTS.values())
}


def add_usage(totals: Mapping[str, int] | None, usages: list[dict[str, Any]]) -> dict[str, int]:
    """Token counts summed: ``totals`` plus the replies' ``usage`` counts, as ``reported_counts`` reads them."""
    summed = dict(totals or {})
    for usage in usages:
        for name, count in reported_counts(usage)[0].items():
            summed[name] = summed.get(name, 0) + count
    return summed


def unanswered_calls(messages: list[ChatMessage]) -> list[ToolCall]:
    """The tool calls of the assistant messages after the conversation's last tool result."""
    calls: list[ToolCall] = []
    for message in reversed(messages):
        if message.role is ChatRole.TOOL:
            break
        if message.role is ChatRole.ASSISTANT:
            calls[:0] = message.tool_calls
    return calls


def bad_model_output(output: Any) -> ModelClientError:
    """The error for a chat generator's output that is not ``{'replies': [ChatMessage, ...]}``."""
    return ModelClientError(
        f"The chat generator must return {{'replies': [ChatMessage, ...]}} with at least one reply, got {output!r}."
    )


@functools.cache
def _fields_of(template: str) -> tuple[str, ...]:
    """The exit fields an exit-reason template names."""
    return tuple(name for _, name, _, _ in string.Formatter().parse(template) if name)


class AgentRun(RunFacts):
    """The data of one run, and the one move that takes it along the declared transitions.

    Its facts (``run.exit_reached``...) are properties it inherits from ``RunFacts``: each reads the
    run's data through its slice's reader.
    """

    def __init__(
        self, config: RunConfig, state: State, run_id: str | None = None, fingerprint: str | None = None
    ) -> None:
        self.config = config
        self.state = state
        #: State's live dictionary, to read from (every write goes through ``state``).
        self.data = state.data
        self.run_id = run_id or uuid.uuid4().hex
        self.phase = IDLE
        #: How many items of the phase's work (``PHASE_WORK``) are done.
        self.stage = 0
        #: Model calls made.
        self.step = 0
        self.trace: list[TransitionRecord] = []
        #: The tool calls of the last reply, pending until they ran.
        self.calls: list[ToolCall] = []
        #: The pending calls, checked (from TOOL_PENDING's work on) and as far as they got.
        self.pending: list[PreparedCall] = []
        self.exit_reason: str | None = None
        #: The snapshot of a paused run.
        self.snapshot: AgentSnapshot | None = None
        #: The exception that failed the run.
        self.error: BaseException | None = None
        #: Every confirmation decision taken in the run (``ToolExecutionDecision.to_dict()`` and its ``step``).
        self.decisions: list[dict[str, Any]] = []
        #: The run's trace context (W3C ``traceparent``/``tracestate``), kept in its snapshots so that
        #: the segments of a paused, crashed or moved run join one trace (``agentfsm.telemetry``).
        self.trace_context: dict[str, str] | None = None
        self.has_tools = bool(config.tools or config.dynamic)
        #: The usage limits the run counts for (``None``: no limit and no prices, nothing to count).
        self.limits = limits_slice.counted(config.usage_limits)
        #: The facts this run cannot change (``Slice.constants``): its plan and table leave them out.
        self.constants = constant_facts(config, state.data)
        #: What each phase still has to do from each stage, in this run (hook points without hooks left out).
        self._plan = work_plan(frozenset(config.hooks) | guardrails_slice.guarded_work(config), self.constants)
        #: The table compiled for this run's configuration.
        self._dispatch = dispatch_for(self.constants)
        #: The guarded interrupts read between transitions; ``cancel`` only once the run's handle is
        #: cancelled (``_watch_cancel``, from the cancelling thread). A cancelled task is reported by
        #: the driver (``task_cancelled``), which reads every guarded interrupt.
        self._watched = watched_interrupts(self.constants | NOT_CANCELLED)
        #: Set when the task driving the run was cancelled, or the loop over its events stopped.
        self.task_cancelled_flag = False
        #: The output type's check of the answer, for the conversation's version it was made for (``slices.output``).
        self.output_check: tuple[tuple[int, int], tuple[Any, list[str]] | None] | None = None
        #: The verdict of the guardrail whose tripwire fired in the phase's work, until the run leaves it (``slices.guardrails``).
        self.guardrail_trip: GuardrailVerdict | None = None
        #: When this run object started the wall clock (epoch seconds): a new run's first start.
        self.clock_started: float | None = None
        self._fingerprint = fingerprint
        #: The tools shown to the model when no dynamic toolset changes them between calls.
        self._static_tools = None if config.dynamic else list(config.tools.values())
        #: The conversation's version when the last hooks were handed out (did they change it?).
        self._conversation_before_hooks = (0, 0)
        #: Deltas recorded for the observers and not taken by the driver yet.
        self._deltas: list[RunDelta] = []
        #: What the deltas recorded of the conversation (its version and length) and of the trace.
        self._told: tuple[int, int] | None = None
        self._told_trace = 0
        self._entered = time.perf_counter()
        #: The work item whose action was handed out and whose report has not come yet.
        self._awaiting: Work | None = None
        #: Whether the run logs its transitions (decided when it starts: see ``agentfsm.logs``).
        self._logging = stdlib_logger.isEnabledFor(DEBUG)
        #: Whether a tool of the run may take an idempotency key (dynamic toolsets may show one later).
        self._keyed = bool(config.dynamic) or any(t.takes_idempotency_key for t in config.tools.values())
        #: Whether a call of the run may be retried (a tool has a ``Retry``, or a dynamic toolset may show one).
        self.retries = retries.configured(config)
        #: Whether a call of the run may ask a person (a tool takes ``ask_user``, or a dynamic toolset may show one).
        self.asks = interrupts_slice.tools_ask(config)
        #: The answers a person gave to the questions of the work under way, by question id (``slices.interrupts``).
        self.answers: dict[str, Any] = {}
        #: The question a hook of the point under way asked, until the run pauses for it.
        self.hook_question: InputQuestion | None = None
        #: The hook a resumed run's hook point starts at (the one that asked): its point and position.
        self.hook_restart: tuple[Work, int] | None = None
        #: Whether the run records its events, for its ``on_event`` handler, its store or its log (decided
        #: when it starts: nobody listening costs nothing). The drivers hand them out (``agentfsm._core.emitting``).
        self.records_events = (
            config.on_event is not None or config.record_event is not None or self._logging or bool(listeners.consumers)
        )
        #: Events recorded for the driver and not taken by it yet.
        self._events: list[Event] = []
        #: Which toolset's tool each name a dynamic toolset showed is in this run (``None``: the agent's
        #: own), and the names refused (with their toolsets' ids).
        self._tool_owners: dict[str, object] = {}
        self._taken_names: set[tuple[str, int]] = set()
        #: The action of each hook point, made once: a point's hooks and context are the same at each firing.
        self._hook_actions = {
            point: RunHooks(point, hooks, None, config.hook_context) for point, hooks in config.hooks.items()
        }
        if self.limits is not None and self.limits.wall_clock is not None:
            limits_slice.start_clock(self)
        if config.cancel is not None:
            config.cancel.on_cancel(self._watch_cancel)

    # -- the step --------------------------------------------------------------------------------

    def next_action(self) -> Action:
        """Do the work that needs no I/O, take the edges it leads to, and say which I/O comes next."""
        while True:
            upcoming = self._plan[self.phase][self.stage]
            if upcoming is None:  # the phase's work is done
                self._move(self._dispatch.next(self.phase, self))
                continue
            # The next item of the phase's work: work that needs I/O becomes an action for the driver
            # (its report completes it, ``_complete``); the rest is done here.
            self.stage, item, skips = upcoming
            if skips is not None and self._skipped(skips):
                self._complete()
                continue
            action = _DO[item](self, item)
            if action is None:
                self._complete()
                continue
            self._awaiting = item
            return action

    def _skipped(self, skips: tuple[tuple[str, bool], ...]) -> bool:
        """Whether a fact that skips the work item (``SKIP_WORK``) has the value that does."""
        for name, value in skips:  # noqa: SIM110 (a loop, not any() over a generator: read at every step)
            if getattr(self, name) is value:
                return True
        return False

    def _complete(self) -> None:
        """The current work item is done (here, or by the driver, whose report says so): the phase's work goes on."""
        self._awaiting = None
        self.stage += 1

    def _expect(self, item: Work, report: str) -> None:
        """Refuse a report that answers no action handed out: each answers the action of its work item, once."""
        if self._awaiting is not item:
            where = f"{self.phase.value} with {item.value} done" if _PHASE_OF[item] is self.phase else self.phase.value
            raise MachineError(
                f"{report} is only valid in {_PHASE_OF[item].value} while {item.value} is under way; "
                f"the run is in {where}."
            )

    # -- the work items (``_DO`` says which method does which; ``None``: done here) ---------------------

    def _call_model(self, item: Work) -> Action:
        tools = self._static_tools
        if tools is None:
            tools = list(self.current_tools().values())
        config = self.config
        return CallModel(list(self.data["messages"]), tools, config.generation_kwargs, config.model_timeout)

    def _prepare_calls(self, item: Work) -> None:
        self.prepare_calls()

    def _run_tools(self, item: Work) -> Action:
        if self.asks:
            interrupts_slice.give_askers(self, self.pending)
        return RunTools(self.pending)

    def _backoff(self, item: Work) -> Action:
        calls, delay = retries.backoff(self)
        return Backoff(calls, delay)

    def _reconcile(self, item: Work) -> Action:
        calls = reconcile_slice.unasked(self)
        questions, functions = [], []
        for c in calls:
            assert c.tool is not None and c.tool.reconcile is not None  # what ``unasked`` gives
            key = idempotency_key(self.run_id, self.step, c.key)
            questions.append(InDoubtCall(c.call.tool_name, dict(c.call.arguments), c.key, self.run_id, self.step, key))
            functions.append(c.tool.reconcile)
        return Reconcile(calls, questions, functions)

    def _decide(self, item: Work) -> Action | None:
        undecided = [c for c in self.pending if c.status is CALL_UNDECIDED]
        if not undecided:
            return None
        # A call is undecided only when a strategy covers it (prepare_calls), so each has one.
        table = self.config.confirmation
        return Confirm(undecided, [cast("Decider", table.strategy_for(c.call.tool_name)) for c in undecided])

    def _guard(self, item: Work) -> CheckGuardrails | None:
        return guardrails_slice.check_action(self, item)

    def _clear_continue(self, item: Work) -> None:
        self.state.set("continue_run", False)

    def _run_hooks(self, item: Work) -> Action:
        if item in _REREAD_CALLS:
            self._conversation_before_hooks = self.conversation_version()
        if self.error is not None:  # on_error's hooks are given the error
            return RunHooks(item, self.config.hooks[item], self.error, self.config.hook_context)
        restart = self.hook_restart
        if restart is not None and restart[0] is item:  # resumed at the hook that asked: the ones before it ran
            self.hook_restart = None
            first = restart[1]
            return RunHooks(item, self.config.hooks[item][first:], None, self.config.hook_context, first)
        return self._hook_actions[item]

    def _finish(self, item: Work) -> Action:
        return Finish(self.result())

    def _report_pause(self, item: Work) -> Action:
        assert self.snapshot is not None
        return Pause(self.snapshot)

    def _raise_error(self, item: Work) -> Action:
        assert self.error is not None
        return Fail(self.error)

    def prepare_calls(self, completed: Mapping[str, CallOutcome] | None = None) -> None:
        """Check the pending calls against the tools; ``completed`` gives the outcomes of calls that ran already.

        ``completed`` is given (if empty) when a resumed run prepares its calls again.
        """
        self.pending = self.config.invoker.check(self.calls, self.state, self.current_tools())
        for c in self.pending:
            self.move_call(c, "check" if c.error is None else "refuse")
        if self.limits is not None and self.limits.tool_calls is not None:
            limits_slice.refuse_over_limit(self, self.limits.tool_calls, completed)
        if self._keyed:
            for c in self.pending:
                self._give_key(c)
        if not (completed or self.config.confirmation):
            return
        covered = self.config.confirmation
        for c in self.pending:
            if completed and c.key in completed:
                c.outcome = completed[c.key]
                self.move_call(c, "restore")
            elif (
                c.status is CALL_READY
                and not (c.tool is not None and c.tool.is_answer)
                and covered.strategy_for(c.call.tool_name) is not None
            ):
                self.move_call(c, "ask")
        keys = {c.key for c in self.pending}
        for decision in self.decisions:  # confirmations taken before a pause or a crash
            taken_here = decision.get("step") == self.step and decision.get("tool_call_id") in keys
            if taken_here and not decision.get("outcome_unknown"):
                self.apply_decision(decision, taken_before=True)

    def _give_key(self, call: PreparedCall) -> None:
        """Pass the call its idempotency key, when its tool takes one: the same each time the call runs."""
        if call.tool is not None and call.tool.takes_idempotency_key and call.status is CALL_READY:
            call.arguments[IDEMPOTENCY_KEY] = idempotency_key(self.run_id, self.step, call.key)

    def current_tools(self) -> dict[str, Tool]:
        """The tools the model can call now: the run's tools and what its dynamic toolsets show.

        A name is the tool that had it first in the run: the agent's own, else the first toolset
        to show it. A toolset showing a name another tool has (an MCP server's new list naming
        the agent's own tool) does not take it: its tool is left out, with a ``warning`` event.
        """
        if not self.config.dynamic:
            return self.config.tools
        tools = dict(self.config.tools)
        for toolset in self.config.dynamic:
            for t in toolset:
                if self.config.output is not None and t.name == FINAL_ANSWER_TOOL and not t.is_answer:
                    raise ConfigurationError(
                        f"A dynamic toolset shows a tool named {FINAL_ANSWER_TOOL!r}, the name of the tool an agent "
                        "with an output_type gives the model for its answer: rename the toolset's tool."
                    )
                owner = self._tool_owners.setdefault(t.name, None if t.name in self.config.tools else toolset)
                if owner is toolset and t.name not in tools:
                    tools[t.name] = t
                else:
                    self._refuse_taken_name(t.name, toolset)
        return tools

    def _refuse_taken_name(self, name: str, toolset: object) -> None:
        """Warn, once a run, that ``toolset`` shows a tool under a name another tool of the run has."""
        if (name, id(toolset)) not in self._taken_names:
            self._taken_names.add((name, id(toolset)))
            self.warn(
                "tool_name_taken",
                f"{brief(toolset, 120)} shows a tool named {name!r}, the name another tool of the run has had "
                f"first: it is left out, and {name!r} stays that tool.",
            )

    def conversation_version(self) -> tuple[int, int]:
        """The conversation's State version and length: the same pair means at most the same messages."""
        return self.state.version("messages"), len(self.data["messages"])

    # -- the driver's reports: they record, and never move the run ----------------------------------

    def model_replied(self, output: Any) -> None:
        """Record the chat generator's output: the replies join the conversation, their tool calls are pending."""
        self._expect(Work.CALL_MODEL, "model_replied")
        replies = output.get("replies") if isinstance(output, dict) else None
        if not isinstance(replies, list) or not replies:
            raise bad_model_output(output)
        calls: list[ToolCall] = []
        usage: list[dict[str, Any]] = []
        for reply in replies:
            if not isinstance(reply, ChatMessage):
                raise bad_model_output(output)
            calls += reply.tool_calls
            reported = reply.meta.get("usage")
            if type(reported) is dict:
                usage.append(reported)
            elif reported is not None and isinstance(reported, Mapping):
                usage.append(dict(reported))  # counted as the limits' check accepts it (``replies_cost``)
        if calls and not have_own_ids([c.id for c in calls]):
            # Each call needs an id of its own to be decided and answered: the model's, or a new one.
            replies = with_unique_call_ids(replies, self.step + 1)
            calls = [c for reply in replies for c in reply.tool_calls]
        if self.limits is not None:
            limits_slice.count_replies(self, self.limits, replies)
        self.step += 1
        self.state.set("step_count", self.step)
        self.state.append("messages", replies)
        if usage:
            self.state.set("token_usage", add_usage(self.data.get("token_usage"), usage))
            corrected = [problem for reported in usage for problem in reported_counts(reported)[1]]
            if corrected:
                self.warn(
                    "usage_corrected",
                    f"The model reported token counts that were not counted as given: {'; '.join(corrected)}.",
                )
        self.calls = calls if self.has_tools else []
        self._complete()

    def tool_completed(self, call: PreparedCall) -> None:
        """Record one finished call, its ``outcome`` set: it takes its ``finish`` edge to DONE.

        Its delta lets observers persist it, so that a crash does not run it again.
        """
        if call.outcome is None:
            raise MachineError(f"tool_completed takes a call with its outcome; {call.key} has none.")
        if self.asks and interrupts_slice.asked(call):  # no result: it runs again once answered
            call.question, call.asker = call.asker.asked, None  # type: ignore[union-attr]
            self.move_call(call, "await_input")
        elif self.retries and retries.retries_call(self, call):
            call.attempts += 1
            self.move_call(call, "retry")
        else:
            self.move_call(call, "time_out" if timed_out(call.outcome) else "finish")
        if self.config.observers:
            self._tell(None)

    def tools_ran(self) -> list[ChatMessage]:
        """Record the step's tool results in the conversation and State; returns the new messages."""
        self._expect(Work.RUN_TOOLS, "tools_ran")
        if (
            (self.config.recovers and doubt.calls_in_doubt(self))
            or (self.retries and retries.calls_retrying(self))
            or (self.asks and interrupts_slice.calls_asking(self))
        ):
            self._complete()
            return []  # the run pauses for them (``in_doubt``, ``input_pause``), or retries them (``retry``): no result yet
        messages = self.config.invoker.finish(self.pending, self.state)
        self.state.append("messages", messages)
        self.calls, self.pending = [], []
        if self.answers:  # the calls that asked are done: their answers with them
            self.answers = {}
        self._complete()
        return messages

    def backed_off(self) -> None:
        """Record that the ``Backoff`` action's wait is over, or was cut short by a cancellation.

        Cut short, the run takes its ``cancel`` edge here, its calls still retrying (no attempt starts).
        """
        self._expect(Work.BACKOFF, "backed_off")
        self._complete()
        handle = self.config.cancel
        if handle is not None and handle.cancelled:
            self._take_guarded_interrupt(GUARDED_INTERRUPTS.get(self.phase, ()))

    def reconciled(self, answers: Sequence[Reconciled]) -> None:
        """Record the reconcile functions' answers for the ``Reconcile`` action's calls, in order.

        Each takes the call edge a person's decision takes: ``Happened`` ``settle`` (its result is the
        call's), ``NotHappened`` ``rerun``; an ``Unknown`` leaves the call in doubt, for a person.
        """
        self._expect(Work.RECONCILE, "reconciled")
        calls = reconcile_slice.unasked(self)
        for c, answer in zip(calls, answers, strict=True):
            c.reconciled = answer
            if isinstance(answer, Happened):
                c.outcome = CallOutcome(value=answer.result)
                self.move_call(c, "settle")
            elif isinstance(answer, NotHappened):
                self.move_call(c, "rerun")
            if self.records_events:
                reason = why(answer) if isinstance(answer, Unknown) else None
                self._events.append(
                    CallReconciled(self.run_id, self.step, time.time(), c.key, c.call.tool_name, answer.kind, reason)
                )
        self._complete()
        if self.config.observers:
            self._tell(None)

    def decided(self, decisions: Sequence[ToolExecutionDecision | None]) -> None:
        """Record the strategies' decisions for the ``Confirm`` action's calls (``None``: deferred)."""
        self._expect(Work.DECIDE, "decided")
        for decision in decisions:
            if decision is not None:
                self.apply_decision(decision)
        self._complete()
        if self.config.observers:
            self._tell(None)

    def guardrails_checked(self, verdicts: Sequence[GuardrailVerdict]) -> None:
        """Record what a point's guardrails made of its values (``CheckGuardrails``): rewrites, and the tripwire.

        What each verdict does is the slice's (``agentfsm.slices.guardrails.apply_verdicts``); the
        edge a tripwire takes is chosen once the phase's work is done, as every edge is.
        """
        item = self._awaiting
        if item is None or item not in guardrails_slice.POINT_OF:
            raise MachineError(
                f"guardrails_checked answers a CheckGuardrails action; the run is in {self.phase.value}."
            )
        point = guardrails_slice.POINT_OF[item]
        verdicts = list(verdicts)
        guardrails_slice.apply_verdicts(self, point, verdicts)
        if self.records_events:
            for v in verdicts:
                self._events.append(GuardrailChecked.of(self.run_id, self.step, time.time(), point, v))
        self._complete()

    def hooks_ran(self, point: Work, asked: InputQuestion | None = None) -> None:
        """Record that the hooks of ``point`` ran, or that one of them asked a person (``asked``) and the rest did not.

        After ``after_llm`` and ``before_tool`` hooks, the pending calls are those the conversation now
        holds: the hooks may have changed them, and what is checked and run is what they left. A
        hook that asked stops the point where it stands: the run takes ``hook_input`` to PAUSED,
        and resumes at that hook.
        """
        self._expect(point, "hooks_ran")
        if asked is not None:
            self._awaiting = None
            self.hook_question = asked
            self._take_guarded_interrupt(_HOOK_INPUT[self.phase])
            self.hook_question = None
            return
        if self.answers:  # the point's hooks are done: their answers with them
            self.answers = {}
        if point in _REREAD_CALLS and self.conversation_version() != self._conversation_before_hooks:
            self.calls = unanswered_calls(self.data["messages"]) if self.has_tools else []
        self._complete()
        if self.config.observers and self.phase in ACTIVE_PHASES:
            self._tell(None)

    def apply_decision(self, decision: ToolExecutionDecision | Mapping[str, Any], taken_before: bool = False) -> None:
        """Apply one ``ToolExecutionDecision`` (or its dict) to the pending call it was taken for.

        It is checked first (``agentfsm._core.decisions.check_decisions``): it must name a pending call
        waiting for a decision, for the same tool, and, when it carries one, the fingerprint of that
        call's tool name and arguments as proposed. Otherwise ``DecisionError``, and nothing changes.
        ``taken_before``: replayed from the snapshot (checked when it was taken), with the arguments a
        tool-call guardrail rewrote its new ones to, if one did. New arguments are guarded again before
        the call runs (``guard_decided``, ``agentfsm.slices.guardrails``).
        For a call in doubt, ``execute=False`` records ``feedback`` as its result.
        """
        if taken_before:
            d = as_decision(decision)
        else:
            calls = {c.key: (c.call.tool_name, c.call.arguments) for c in self.pending}
            waiting = [c.key for c in self.pending if c.status in _DECIDABLE]
            [d] = check_decisions(self.run_id, calls, waiting, [decision])
        call = next(c for c in self.pending if c.key == d.tool_call_id)
        proposed = call_fingerprint(call.call.tool_name, call.call.arguments)
        ran = call.status is CALL_DONE  # before a pause or crash: only what it says is restored
        unknown = call.status is CALL_UNKNOWN
        if not unknown:  # a confirmation: the tool result shows it, bound to the call as the snapshot keeps it
            call.decision = d if d.call_fingerprint is not None else replace(d, call_fingerprint=proposed)
        if d.execute and d.final_tool_params is not None and d.final_tool_params != call.call.arguments:
            params = d.final_tool_params
            if taken_before and isinstance(decision, Mapping):  # replayed: as a tool-call guardrail rewrote them
                params = decision.get(guardrails_slice.REWRITTEN_PARAMS_KEY) or params
            modified = ToolCall(call.call.tool_name, dict(params), call.call.id, call.call.extra)
            if ran:
                call.call = modified
            else:  # the new arguments are checked again, as the model's were
                [checked] = self.config.invoker.check([modified], self.state, self.current_tools())
                call.call, call.tool, call.arguments = checked.call, checked.tool, checked.arguments
                call.error = checked.error
                self.move_call(call, "modify" if checked.error is None else "modify_refused")
                self._give_key(call)
        elif unknown:
            if not d.execute:
                call.outcome = CallOutcome(value=d.feedback)
            self.move_call(call, "rerun" if d.execute else "settle")
        elif not ran:
            self.move_call(call, "approve" if d.execute else "reject")
        if not taken_before:
            taken = {**d.to_dict(), "call_fingerprint": proposed, "step": self.step}
            self.decisions.append({**taken, "outcome_unknown": True} if unknown else taken)
            if self.records_events:
                self._events.append(DecisionTaken(self.run_id, self.step, time.time(), call.key, d.to_dict()))

    def crashed_during_tool_run(self, started: Iterable[str], decided: Iterable[str] = ()) -> None:
        """Apply the in-doubt rule to the calls ``started`` (keys) before a crash, their results never recorded.

        Each ready one takes its ``in_doubt`` edge; one of an idempotent tool (``runs_again_after_crash``)
        then takes its ``rerun`` edge, unless a decision for it is at hand (``decided``, keys): the
        decision settles it. Every driver that finds calls in doubt calls this.
        """
        started, decided = set(started), set(decided)
        for c in self.pending:
            if c.key in started and c.status is CALL_READY:
                self.move_call(c, "in_doubt")
                if c.key not in decided and doubt.runs_again_after_crash(c):
                    self.move_call(c, "rerun")

    def hook_asker(self, point: Work, index: int) -> Any:
        """What the ``index``-th hook of ``point`` is given as ``ask_user`` (``slices.interrupts.hook_asker``)."""
        return interrupts_slice.hook_asker(self, point, index)

    def settle_call(self, call: PreparedCall, trigger: str, error: Exception) -> None:
        """Give a call that does not run ``error`` as its outcome, and move it along ``trigger`` (a guardrail's ``block``)."""
        call.outcome = CallOutcome(error=error)
        self.move_call(call, trigger)

    def move_call(self, call: PreparedCall, trigger: str) -> None:
        """Move a pending call along its declared edge ``trigger`` (``CALL_TRANSITIONS``).

        The one way a call's status changes in a run; an undeclared move raises ``MachineError``.
        """
        source = call.status
        dest = _CALL_MOVES.get((source, trigger)) or CALL_DISPATCH.next(source, trigger)  # the latter raises
        if dest is CALL_UNKNOWN and not self.config.recovers:
            raise MachineError(
                f"Call {call.key} went in doubt in run {self.run_id}, whose configuration says it recovers no "
                "journal (RunConfig.recovers=False): a driver that finds calls in doubt must say so."
            )
        call.status = dest
        if self.records_events:
            self._events.append(
                CallChanged(self.run_id, self.step, time.time(), call.key, call.call.tool_name, source, dest, trigger)
            )

    def task_cancelled(self) -> bool:
        """Take the ``cancel`` edge once the run's task is cancelled; False where a run cannot pause.

        The loop over the run's events stopping (``IterationStoppedError``) is reported here too.
        The work under way (a model call, tool calls, hooks) is done again on resume: the snapshot
        is taken at its stage, with the calls that started and have no result in doubt.
        """
        if self.phase in CANNOT_FAIL:
            return False
        self.task_cancelled_flag = True
        self._awaiting = None
        return self._take_guarded_interrupt(GUARDED_INTERRUPTS.get(self.phase, ()))

    def fail(self, error: BaseException) -> bool:
        """Take the ``fail`` edge after ``error`` escaped from the run's work; False where a run cannot fail.

        The failed run's next actions run its ``on_error`` hooks, then hand ``error`` back (``Fail``).
        ``IterationStoppedError`` (the loop over the run's events stopped) is no failure of the run:
        it is cancelled from outside, as when its task is (``task_cancelled``).
        """
        if self.phase in CANNOT_FAIL:
            return False
        if isinstance(error, IterationStoppedError):
            return self.task_cancelled()
        self.error = error
        self.interrupt("fail", FAILED)
        logger.error("run failed", run_id=self.run_id, step=self.step, phase=self.trace[-1].source, error=repr(error))
        return True

    # -- moving through the table ----------------------------------------------------------------

    def interrupt(self, trigger: str, dest: Phase, stage: int = 0) -> None:
        """Take the interrupt edge ``trigger`` to ``dest`` (``pause``, ``fail``, ``resume``, ``cancel``); it must be declared.

        ``stage``: how much of ``dest``'s work is done already (a resumed run's snapshot says).
        """
        DISPATCH.check(self.phase, trigger, dest)
        self._move(Transition(trigger, self.phase, dest, interrupt=True), stage)

    def _move(self, transition: Transition, stage: int = 0) -> None:
        """Take ``transition``, doing what it declares: its pause reason, effect, error and exit reason."""
        if transition.pause is not None and self.snapshot is None:
            # The run resumes into this phase: a rule's pause (a deferred decision, calls in doubt)
            # at the start of its work, which waits for the decisions; an interrupt's where it stood.
            self.snapshot = self.make_snapshot(transition.pause(self), None if transition.interrupt else 0)
        now = time.perf_counter()
        record = new_record((self.step, self.phase, transition.dest, transition.trigger, (now - self._entered) * 1e6))
        self.trace.append(record)
        if transition.effect is not None:
            transition.effect(self)
        if transition.error is not None:
            self.error = transition.error(self)
        self.phase, self.stage, self._entered = transition.dest, stage, now
        if transition.exit_reason is not None:
            template = transition.exit_reason
            self.exit_reason = template.format(**{name: EXIT_FIELDS[name](self) for name in _fields_of(template)})
        if self.config.observers:
            self._tell(record)
        if self.records_events:
            self._record_transition(record, transition)
        bp = self.config.break_point
        if (
            bp is not None
            and transition.trigger != "resume"
            and bp.target_phase is record.dest
            and bp.matches(record.dest, self.step, self._visits(), [c.tool_name for c in self.calls])
        ):
            # The snapshot exists before the pause edge is taken, so that the edge's delta carries it.
            self.snapshot = self.make_snapshot(BreakpointHit(bp.to_dict()))
            self.interrupt("pause", PAUSED)
        if self._watched:
            watched = self._watched.get(self.phase)
            if watched is not None:
                interrupts = watched.get(transition.trigger, watched[None])
                if interrupts:
                    self._take_guarded_interrupt(interrupts)

    def _take_guarded_interrupt(self, interrupts: tuple[Transition, ...]) -> bool:
        """Take the first of ``interrupts`` (out of the current phase) whose guard holds; False if none does."""
        for t in interrupts:
            for name, value in t.when:  # in the guard's order, reading no fact past the first that fails
                if getattr(self, name) is not value:
                    break
            else:
                self._move(t)
                return True
        return False

    def _watch_cancel(self) -> None:
        """The run's ``RunHandle`` was cancelled (in any thread): from now on its transitions read ``cancel_requested``."""
        self._watched = watched_interrupts(self.constants)

    def _visits(self) -> int:
        """How many times the current phase was entered before (resumes do not count)."""
        return sum(1 for r in self.trace if r.dest is self.phase and r.trigger != "resume") - 1

    # -- what the run hands out ------------------------------------------------------------------

    def _record_transition(self, record: TransitionRecord, transition: Transition) -> None:
        exit_reason = self.exit_reason if transition.exit_reason is not None else None
        self._events.append(
            PhaseChanged(
                self.run_id,
                record.step,
                time.time(),
                record.source,
                record.dest,
                record.trigger,
                record.duration_us,
                exit_reason,
            )
        )
        if record.trigger == "resume":
            self._events.append(RunResumed(self.run_id, self.step, time.time(), record.dest))

    @property
    def logs(self) -> bool:
        """Whether the run logs its transitions (decided when it started: ``agentfsm.logs``)."""
        return self._logging

    def warn(self, warning: str, message: str) -> None:
        """Log that the run refused or corrected something from outside, and record it as a ``warning`` event."""
        logger.warning("run warning", run_id=self.run_id, step=self.step, warning=warning, detail=message)
        if self.records_events:
            self._events.append(RunWarning(self.run_id, self.step, time.time(), warning, message))

    def take_events(self) -> list[Event]:
        """The events recorded since the last call, oldest first, for the driver to hand out."""
        events = self._events
        if events:  # an empty list is handed out as it is: nothing to allocate at the many calls without events
            self._events = []
        return events

    def _tell(self, record: TransitionRecord | None) -> None:
        """Record, for the observers, what changed since the last delta (the driver hands it to them)."""
        messages: list[ChatMessage] = self.data.get("messages") or []
        version = self.state.version("messages")
        told = self._told
        rewritten = told is None or told[0] != version or told[1] > len(messages)
        new_messages = list(messages) if rewritten else messages[told[1] :]  # type: ignore[index]
        self._told = (version, len(messages))
        # A rewritten conversation starts a whole snapshot (stores replay from it): it carries the
        # whole trace, as it carries every message.
        trace, self._told_trace = self.trace[0 if rewritten else self._told_trace :], len(self.trace)
        fields = None if record is not None and record.dest not in ACTIVE_PHASES else snapshot_fields(self)
        snapshot = self.snapshot if record is not None and record.dest is PAUSED else None
        self._deltas.append(
            RunDelta(self.run_id, record, new_messages, rewritten, trace, fields, snapshot, self.exit_reason)
        )

    def continues(self, messages: int, trace: int = 0) -> None:
        """The observers hold the conversation's first ``messages`` messages and ``trace`` edges already.

        A thread's next turn starts from the conversation its earlier turns stored: its first delta
        holds only what comes after (unless the conversation is rewritten first). Call it before the
        run's first step.
        """
        self._told = (self.state.version("messages"), messages)
        self._told_trace = trace

    def take_deltas(self) -> list[RunDelta]:
        """The deltas recorded since the last call, oldest first, for the driver to give the observers."""
        deltas, self._deltas = self._deltas, []
        return deltas

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the agent configuration this run belongs to (in its snapshots)."""
        if self._fingerprint is None:
            self._fingerprint = self.config.fingerprint()
        return self._fingerprint

    def make_snapshot(self, pause: PauseReason | None = None, stage: int | None = None) -> AgentSnapshot:
        """The run as data, to be resumed where it stands (or at ``stage`` of its phase), paused for ``pause``."""
        return snapshot_of(self, pause, stage)

    def result(self) -> AgentResult:
        """The documented result: state data, ``last_message``, plus ``exit_reason`` and ``trace``."""
        return result_of(self)


#: Which method does each work item: an action for the driver, or ``None`` once done in the run.
_DO: dict[Work, Callable[[AgentRun, Work], Action | None]] = {
    Work.CALL_MODEL: AgentRun._call_model,
    Work.PREPARE_CALLS: AgentRun._prepare_calls,
    Work.RUN_TOOLS: AgentRun._run_tools,
    Work.DECIDE: AgentRun._decide,
    Work.BACKOFF: AgentRun._backoff,
    Work.RECONCILE: AgentRun._reconcile,
    Work.CLEAR_CONTINUE: AgentRun._clear_continue,
    **dict.fromkeys(guardrails_slice.POINT_OF, AgentRun._guard),
    Work.FINISH: AgentRun._finish,
    Work.REPORT_PAUSE: AgentRun._report_pause,
    Work.RAISE_ERROR: AgentRun._raise_error,
    **dict.fromkeys(HOOK_POINTS, AgentRun._run_hooks),
}
if set(_DO) != set(Work):
    raise MachineError(f"Work items without a method in agentfsm._core.runtime._DO: {sorted(set(Work) - set(_DO))}.")
