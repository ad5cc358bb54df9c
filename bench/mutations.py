"""Mutation score of ``check_agent``: seed faults into agentfsm's runtime and into agents, count the caught.

Runtime mutants patch agentfsm while they are active (skip a hook point, re-run finished calls on
resume, drop the commit before TOOL_RUN, bind decisions by position, forget the in-doubt rule...);
``check_agent`` then runs on a fixed set of small agents that all pass unmutated. Agent mutants
are broken agents (an on_exit hook that keeps going, a payment marked idempotent...), each
checked with the invariants a user of that agent would state. A mutant is caught when some check
reports a violation.

    python bench/mutations.py            # every mutant, and the default bounds' speed: bench/MUTATIONS.md
    python bench/mutations.py --only R1,A1
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import checker  # noqa: E402

from agentfsm import Agent, GuardrailResult, State, guardrail, hook, tool  # noqa: E402
from agentfsm._core import decisions as core_decisions  # noqa: E402
from agentfsm._core import resume as core_resume  # noqa: E402
from agentfsm._core import runtime  # noqa: E402
from agentfsm.checking import RecordedRun, check_agent, invariant  # noqa: E402
from agentfsm.generators import ScriptedChatGenerator  # noqa: E402
from agentfsm.hitl import AlwaysAskPolicy, BlockingConfirmationStrategy, SimpleConsoleUI  # noqa: E402
from agentfsm.interrupts import Asker, AskUser  # noqa: E402
from agentfsm.machine import CallStatus, Phase, Transition, Work  # noqa: E402
from agentfsm.messages import ChatMessage, ToolCall  # noqa: E402
from agentfsm.reconcile import InDoubtCall, NotHappened, Reconciled, Unknown  # noqa: E402
from agentfsm.retries import Retry  # noqa: E402
from agentfsm.slices import doubt  # noqa: E402
from agentfsm.slices import interrupts as interrupts_slice  # noqa: E402
from agentfsm.slices import retries as retries_slice  # noqa: E402
from agentfsm.stores import sqlite as sqlite_store  # noqa: E402
from agentfsm.tools.invoker import ToolInvoker  # noqa: E402

#: Model calls explored with every kind of reply: mutants must be caught at small bounds.
MAX_STEPS = 1


# -- the agents ---------------------------------------------------------------------------------------


def _model() -> ScriptedChatGenerator:
    return ScriptedChatGenerator(["unused: the checker answers in the model's place"])


def _confirm() -> BlockingConfirmationStrategy:
    return BlockingConfirmationStrategy(AlwaysAskPolicy(), SimpleConsoleUI())


CHARGES: list[int] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def pay(amount: int) -> str:
    """Charge a card (not idempotent)."""
    CHARGES.append(amount)
    return f"charged {amount}"


@tool(idempotent=True)
def which_account(ask_user: AskUser) -> str:
    """Ask the user which account pays (it does nothing before asking)."""
    return str(ask_user("Which account?", {"enum": ["checking", "savings"]}))


@hook
def count_llm_calls(state: State) -> None:
    """Count the model calls in State."""
    state.set("llm_calls", (state.get("llm_calls") or 0) + 1)


@hook
def noted(state: State) -> None:
    """A hook that does nothing: its firings are what is checked."""


@guardrail("input")
def input_passes(messages: Any) -> GuardrailResult:
    """An input guardrail (check_agent plays its answers: pass, rewrite, tripwire)."""
    return GuardrailResult.passed()


@guardrail("tool_call")
def call_passes(call: Any) -> GuardrailResult:
    """A tool-call guardrail (its answers played too)."""
    return GuardrailResult.passed()


@guardrail("output")
def answer_passes(answer: Any) -> GuardrailResult:
    """An output guardrail (its answers played too)."""
    return GuardrailResult.passed()


@tool(timeout=0.05, retry=Retry(attempts=2, on=(TimeoutError, RuntimeError)))
def charge(amount: int) -> str:
    """Charge a card; its server answers too late for the run (its effect happens all the same)."""
    _SLOW_SERVER.wait(1.0)
    return f"charged {amount}"


_SLOW_SERVER = threading.Event()


def look_up_charge(call: InDoubtCall) -> Reconciled:
    """Look a charge in doubt up (the checker answers in its place)."""
    return Unknown("no ledger here")


@tool(reconcile=look_up_charge)
def pay_looked_up(amount: int) -> str:
    """Charge a card (not idempotent); a charge in doubt after a crash is looked up."""
    CHARGES.append(amount)
    return f"charged {amount}"


def runtime_agents() -> dict[str, Agent]:
    """The fixed agents runtime mutants are checked on; each passes unmutated."""
    return {
        "shop": Agent(
            chat_generator=_model(),
            tools=[add, pay],
            state_schema={"llm_calls": {"type": int}},
            hooks={"before_llm": [count_llm_calls]},
            confirmation_strategies={"pay": _confirm()},
        ),
        "lifecycle": Agent(
            chat_generator=_model(),
            tools=[add],
            hooks={"before_run": [noted], "after_run": [noted], "on_error": [noted], "on_exit": [noted]},
        ),
        "payments": Agent(chat_generator=_model(), tools=[pay], confirmation_strategies={"pay": _confirm()}),
        "one_step": Agent(chat_generator=_model(), tools=[add], max_agent_steps=1),
        "hooked": Agent(
            chat_generator=_model(),
            tools=[add, pay],
            hooks={point: [noted] for point in ("before_llm", "after_llm", "before_tool", "after_tool", "on_exit")},
            confirmation_strategies={"pay": _confirm()},
        ),
        "charges": Agent(chat_generator=_model(), tools=[charge]),
        "asking": Agent(chat_generator=_model(), tools=[which_account]),
        "reconciled": Agent(chat_generator=_model(), tools=[pay_looked_up]),
        # Last: its guardrails' answers make it the costliest to explore, and only guardrail mutants reach it.
        "guarded": Agent(
            chat_generator=_model(),
            tools=[add, pay],
            exit_conditions=["text", "pay"],
            guardrails=[input_passes, call_passes, answer_passes],
            confirmation_strategies={"pay": _confirm()},
        ),
    }


# -- runtime mutants ------------------------------------------------------------------------------------

Patch = Callable[[contextlib.ExitStack], None]


def _set(stack: contextlib.ExitStack, target: Any, name: str, value: Any) -> None:
    old = getattr(target, name)
    setattr(target, name, value)
    stack.callback(setattr, target, name, old)


def _set_item(stack: contextlib.ExitStack, target: dict[Any, Any], key: Any, value: Any) -> None:
    old = target[key]
    target[key] = value
    stack.callback(target.__setitem__, key, old)


def _skip_work(item: Work) -> Patch:
    def patch(stack: contextlib.ExitStack) -> None:
        def skip(run: runtime.AgentRun, work: Work) -> None:
            """The work is "done" without doing it."""

        _set_item(stack, runtime._DO, item, skip)

    return patch


def _skip_after_run_on_text(stack: contextlib.ExitStack) -> None:
    original = runtime._DO[Work.AFTER_RUN]

    def after_run(run: runtime.AgentRun, work: Work) -> Any:
        if run.exit_reason == "text":  # one exit only
            return None
        return original(run, work)

    _set_item(stack, runtime._DO, Work.AFTER_RUN, after_run)


def _rerun_finished_calls(stack: contextlib.ExitStack) -> None:
    original = runtime.AgentRun.prepare_calls

    def prepare_calls(self: runtime.AgentRun, completed: Any = None) -> None:
        original(self, None)  # the recorded results are forgotten: finished calls run again

    _set(stack, runtime.AgentRun, "prepare_calls", prepare_calls)


def _drop_commit_before_tool_run(stack: contextlib.ExitStack) -> None:
    _set(stack, sqlite_store, "COMMIT_ON_ENTRY", frozenset({Phase.CONFIRM}))


def _bind_decisions_by_position(stack: contextlib.ExitStack) -> None:
    original = core_decisions.check_snapshot_decisions

    def by_position(snapshot: Any, decisions: Any) -> Any:
        checked = original(snapshot, decisions)
        waiting = list(getattr(snapshot.pause, "waiting", []) or [])
        if len(waiting) != len(checked):
            return checked
        return [dataclasses.replace(d, tool_call_id=key) for d, key in zip(checked, waiting, strict=True)]

    _set(stack, core_resume, "check_snapshot_decisions", by_position)


def _forget_in_doubt_rule(stack: contextlib.ExitStack) -> None:
    _set(stack, doubt, "runs_again_after_crash", lambda call: True)


def _forget_in_doubt_edge(stack: contextlib.ExitStack) -> None:
    _set(stack, runtime.AgentRun, "crashed_during_tool_run", lambda self, started, decided=(): None)


def _ignore_max_agent_steps(stack: contextlib.ExitStack) -> None:
    _set(stack, runtime.AgentRun, "steps_left", property(lambda self: True))


def _drop_failed_results(stack: contextlib.ExitStack) -> None:
    original = ToolInvoker.finish

    def finish(self: ToolInvoker, calls: Any, state: Any) -> list[ChatMessage]:
        messages = original(self, calls, state)
        return [m for m in messages if not (m.tool_call_result and m.tool_call_result.error)]

    _set(stack, ToolInvoker, "finish", finish)


def _undeclared_shortcut(stack: contextlib.ExitStack) -> None:
    original = runtime.AgentRun._move

    def move(self: runtime.AgentRun, transition: Transition, stage: int = 0) -> None:
        if transition.dest is Phase.TOOL_RUN and self.pending and all(c.error for c in self.pending):
            # Nothing can run: skip TOOL_RUN, along an edge the table does not have.
            transition = Transition("skip_tools", self.phase, Phase.EXIT_CHECK)
            self.calls, self.pending = [], []
        original(self, transition, stage)

    _set(stack, runtime.AgentRun, "_move", move)


def _run_rejected_calls(stack: contextlib.ExitStack) -> None:
    original = runtime.AgentRun.move_call

    def move_call(self: runtime.AgentRun, call: Any, trigger: str) -> None:
        original(self, call, "approve" if trigger == "reject" else trigger)

    _set(stack, runtime.AgentRun, "move_call", move_call)


def _ignore_modified_arguments(stack: contextlib.ExitStack) -> None:
    original = runtime.AgentRun.apply_decision

    def apply_decision(self: runtime.AgentRun, decision: Any, taken_before: bool = False) -> None:
        if not isinstance(decision, dict):
            decision = dataclasses.replace(decision, final_tool_params=None)
        original(self, decision, taken_before)

    _set(stack, runtime.AgentRun, "apply_decision", apply_decision)


def _lose_state_on_resume(stack: contextlib.ExitStack) -> None:
    original = core_resume.values_from_dict

    def values(data: Any, schema: Any) -> Any:
        return {k: v for k, v in original(data, schema).items() if k != "llm_calls"}

    _set(stack, core_resume, "values_from_dict", values)


def _resume_from_the_phase_start(stack: contextlib.ExitStack) -> None:
    original = runtime.AgentRun.interrupt

    def interrupt(self: runtime.AgentRun, trigger: str, dest: Phase, stage: int = 0) -> None:
        original(self, trigger, dest, 0 if trigger == "resume" else stage)

    _set(stack, runtime.AgentRun, "interrupt", interrupt)


def _skip_on_exit_after_a_tool_step(stack: contextlib.ExitStack) -> None:
    original = runtime._DO[Work.ON_EXIT]

    def on_exit(run: runtime.AgentRun, work: Work) -> Any:
        if run.step > 1:  # the exit after a tool's result only
            return None
        return original(run, work)

    _set_item(stack, runtime._DO, Work.ON_EXIT, on_exit)


def _retry_after_the_start(stack: contextlib.ExitStack) -> None:
    def retryable(call: Any) -> bool:
        """The retry rule without its effect check: a timed-out attempt of any tool runs again."""
        tool, outcome = call.tool, call.outcome
        if tool is None or tool.retry is None or outcome is None or outcome.error is None:
            return False
        return call.attempts + 1 < tool.retry.attempts and tool.retry.covers(outcome.error)

    _set(stack, retries_slice, "retryable", retryable)


def _answers_to_the_next_call(stack: contextlib.ExitStack) -> None:
    def give_askers(run: runtime.AgentRun, calls: Any) -> None:
        """Each asking call reads the answers of the next asking call of its step: bound by position, not by id."""
        asking = [c for c in calls if c.status is CallStatus.READY and c.tool is not None and c.tool.takes_ask]
        for c, other in zip(asking, asking[1:] + asking[:1], strict=True):
            c.asker = Asker(run.answers, other.key, tool_call_id=c.key, tool_name=c.call.tool_name)

    _set(stack, interrupts_slice, "give_askers", give_askers)


def _skip_the_ask_edge(stack: contextlib.ExitStack) -> None:
    moves = dict(runtime._CALL_MOVES)
    moves[(CallStatus.READY, "ask")] = CallStatus.READY  # a covered call is decided while still ready
    _set(stack, runtime, "_CALL_MOVES", moves)


def _skip_guardrails_after_a_resume(stack: contextlib.ExitStack) -> None:
    for item in (Work.GUARD_INPUT, Work.GUARD_CALLS, Work.GUARD_RESULTS, Work.GUARD_OUTPUT):
        original = runtime._DO[item]

        def guard(run: runtime.AgentRun, work: Work, original: Any = original) -> Any:
            if any(r.trigger == "resume" for r in run.trace):  # a resumed run forgets its guardrails
                return None
            return original(run, work)

        _set_item(stack, runtime._DO, item, guard)


def _ignore_reconcile_answers(stack: contextlib.ExitStack) -> None:
    original = runtime.AgentRun.reconciled

    def reconciled(self: runtime.AgentRun, answers: Any) -> None:
        original(self, [NotHappened() for _ in answers])  # whatever the function found, the call runs again

    _set(stack, runtime.AgentRun, "reconciled", reconciled)


RUNTIME_MUTANTS: dict[str, tuple[str, Patch]] = {
    "R1": ("skip the after_run hooks", _skip_work(Work.AFTER_RUN)),
    "R2": ("skip the before_run hooks", _skip_work(Work.BEFORE_RUN)),
    "R3": ("skip the on_error hooks", _skip_work(Work.ON_ERROR)),
    "R4": ("skip after_run on one exit (a text reply)", _skip_after_run_on_text),
    "R5": ("re-run finished calls on resume", _rerun_finished_calls),
    "R6": ("drop the commit before TOOL_RUN", _drop_commit_before_tool_run),
    "R7": ("bind a decision by position instead of by call", _bind_decisions_by_position),
    "R8": ("re-run every call in doubt (the idempotence rule forgotten)", _forget_in_doubt_rule),
    "R9": ("forget the in-doubt edge (started calls are not in doubt)", _forget_in_doubt_edge),
    "R10": ("ignore max_agent_steps", _ignore_max_agent_steps),
    "R11": ("drop the results of failed calls from the conversation", _drop_failed_results),
    "R12": ("skip TOOL_RUN along an undeclared edge", _undeclared_shortcut),
    "R13": ("run rejected calls", _run_rejected_calls),
    "R14": ("ignore the arguments of a modify decision", _ignore_modified_arguments),
    "R15": ("lose a State value on resume", _lose_state_on_resume),
    "R16": ("resume at the start of the phase's work", _resume_from_the_phase_start),
    "R17": ("skip the before_llm hooks", _skip_work(Work.BEFORE_LLM)),
    "R18": ("skip the after_llm hooks", _skip_work(Work.AFTER_LLM)),
    "R19": ("skip the before_tool hooks", _skip_work(Work.BEFORE_TOOL)),
    "R20": ("skip the after_tool hooks", _skip_work(Work.AFTER_TOOL)),
    "R21": ("skip the on_exit hooks", _skip_work(Work.ON_EXIT)),
    "R22": ("skip on_exit on one exit (after a tool's result)", _skip_on_exit_after_a_tool_step),
    "R23": ("skip a call edge (a covered call is asked about without leaving ready)", _skip_the_ask_edge),
    "R24": ("skip the guardrails after a resume", _skip_guardrails_after_a_resume),
    "R25": ("retry a non-idempotent call after its start (a timed-out charge)", _retry_after_the_start),
    "R26": ("modified arguments not guarded again", _skip_work(Work.GUARD_DECIDED)),
    "R27": ("ignore a reconcile answer (a charge found done runs again)", _ignore_reconcile_answers),
    "R28": ("apply an answer to the wrong question (the next parallel call's)", _answers_to_the_next_call),
}


# -- agent mutants ----------------------------------------------------------------------------------------


@hook
def keep_going(state: State) -> None:
    """Keeps the run going past every exit."""
    state.set("continue_run", True)


@tool(idempotent=True)
def pay_marked_idempotent(amount: int) -> str:
    """Charge a card; wrongly marked idempotent."""
    CHARGES.append(amount)
    return f"charged {amount}"


@tool
def refund_unconfirmed(amount: int) -> str:
    """Moves money like pay, but no confirmation strategy covers it."""
    CHARGES.append(-amount)
    return f"refunded {amount}"


@hook
def inject_orphan_result(state: State) -> None:
    """Adds a tool result no call asked for."""
    orphan = ChatMessage.from_tool("cached", ToolCall("add", {}, id="orphan"))
    state.set("messages", [*state.get("messages"), orphan], handler_override=lambda old, new: new)


@hook
def drop_tool_results(state: State) -> None:
    """Removes the step's tool results (a broken 'pruning' hook)."""
    kept = [m for m in state.get("messages") if m.tool_call_result is None]
    state.set("messages", kept, handler_override=lambda old, new: new)


@hook
def keep_last_two(state: State) -> None:
    """A naive sliding window: keeps the last two messages, whatever they are."""
    state.set("messages", state.get("messages")[-2:], handler_override=lambda old, new: new)


_PROCESS_COUNTER = [0]


@hook
def count_in_memory(state: State) -> None:
    """Counts model calls in process memory and copies the count into State."""
    _PROCESS_COUNTER[0] += 1
    state.set("llm_calls", _PROCESS_COUNTER[0])


@hook
def stamp_time(state: State) -> None:
    """Writes the wall clock into State."""
    state.set("stamp", time.perf_counter_ns())


@hook
def repeat_reply(state: State) -> None:
    """Appends the model's reply a second time (a broken 'echo' hook)."""
    messages = state.get("messages")
    state.set("messages", [*messages, messages[-1]], handler_override=lambda old, new: new)


@hook
def failing_after_run(state: State) -> None:
    """Raises once the run is over."""
    raise RuntimeError("after_run failed")


@invariant("charged once per call")
def charged_once(run: RecordedRun) -> bool | str:
    """A payment call charges once, whatever crashes happen."""
    charged = [(e.step, e.call_key) for e in run.tool_executions if e.outcome == "returns" and "pay" in e.tool_name]
    return len(charged) == len(set(charged)) or f"charged {charged}"


@invariant("money moves only with approval")
def approved_money(run: RecordedRun) -> bool | str:
    """Every tool that moves money ran under a confirmation."""
    moved = [e for e in run.tool_executions if e.tool_name in ("pay", "refund_unconfirmed")]
    return all(e.covered for e in moved) or "money moved without a confirmation"


def agent_mutants() -> dict[str, tuple[str, Agent, list[Any]]]:
    """Broken agents, each with the user invariants its author would state."""
    m = _model
    return {
        "A1": ("an on_exit hook keeps the run going", Agent(chat_generator=m(), hooks={"on_exit": [keep_going]}), []),
        "A2": (
            "a payment tool marked idempotent that is not",
            Agent(chat_generator=m(), tools=[pay_marked_idempotent]),
            [charged_once],
        ),
        "A3": (
            "a before_llm hook adds a tool result without a call",
            Agent(chat_generator=m(), tools=[add], hooks={"before_llm": [inject_orphan_result]}),
            [],
        ),
        "A4": (
            "an after_tool hook drops the tool results",
            Agent(chat_generator=m(), tools=[add], hooks={"after_tool": [drop_tool_results]}),
            [],
        ),
        "A5": (
            "a naive sliding window cuts a call from its result",
            Agent(chat_generator=m(), tools=[add], hooks={"before_llm": [keep_last_two]}),
            [],
        ),
        "A6": (
            "a hook keeps its count in process memory",
            Agent(
                chat_generator=m(),
                tools=[add],
                state_schema={"llm_calls": {"type": int}},
                hooks={"before_llm": [count_in_memory]},
            ),
            [],
        ),
        "A7": (
            "a hook writes the wall clock into State",
            Agent(chat_generator=m(), state_schema={"stamp": {"type": int}}, hooks={"before_llm": [stamp_time]}),
            [],
        ),
        "A8": (
            "an after_llm hook repeats the model's reply",
            Agent(chat_generator=m(), tools=[add], hooks={"after_llm": [repeat_reply]}),
            [],
        ),
        "A9": (
            "an after_run hook raises",
            Agent(chat_generator=m(), hooks={"after_run": [failing_after_run]}),
            [],
        ),
        "A10": (
            "a money-moving tool no confirmation strategy covers",
            Agent(chat_generator=m(), tools=[pay, refund_unconfirmed], confirmation_strategies={"pay": _confirm()}),
            [approved_money],
        ),
    }


# -- running ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """One mutant's verdict: caught (by which invariant, on which agent) or not, and how long it took."""

    name: str
    description: str
    caught_by: str | None
    seconds: float


@contextlib.contextmanager
def mutated(patch: Patch) -> Iterator[None]:
    """The runtime with ``patch`` applied, restored afterwards."""
    with contextlib.ExitStack() as stack:
        patch(stack)
        yield


def _check(agent: Agent, invariants: list[Any] | None = None) -> str | None:
    result = check_agent(
        agent, max_steps=MAX_STEPS, invariants=invariants or (), stop_on_violation=True, progress=False
    )
    return None if result.ok else result.violations[0].invariant


def baseline() -> dict[str, str | None]:
    """Each fixed agent's verdict unmutated: all must pass, or the score means nothing."""
    return {name: _check(agent) for name, agent in runtime_agents().items()}


def run_runtime_mutant(name: str) -> Outcome:
    """Check the fixed agents with runtime mutant ``name`` active; caught at the first violation."""
    description, patch = RUNTIME_MUTANTS[name]
    started = time.perf_counter()
    caught = None
    with mutated(patch):
        for agent_name, agent in runtime_agents().items():
            try:
                found = _check(agent)
            except Exception as exc:  # the mutant broke the run outright: the check itself fails loudly
                found = f"check raised {type(exc).__name__}"
            if found is not None:
                caught = f"{found} ({agent_name})"
                break
    return Outcome(name, description, caught, time.perf_counter() - started)


def run_agent_mutant(name: str) -> Outcome:
    """Check broken agent ``name`` with its author's invariants."""
    description, agent, invariants = agent_mutants()[name]
    started = time.perf_counter()
    caught = _check(agent, invariants)
    return Outcome(name, description, caught, time.perf_counter() - started)


def run(selected: list[str] | None = None) -> list[Outcome]:
    """Run the selected mutants (all by default)."""
    names = selected or [*RUNTIME_MUTANTS, *agent_mutants()]
    return [run_runtime_mutant(n) if n.startswith("R") else run_agent_mutant(n) for n in names]


def speed() -> list[tuple[str, Any]]:
    """``check_agent`` at its default bounds on the agents of ``bench/checker.py`` (the demo agent, and 3 tools with a hook and a strategy)."""
    return [(label, check_agent(make(), progress=False)) for label, make in checker.AGENTS.values()]


def report(
    outcomes: list[Outcome], seconds: float, cpu: float, clean: dict[str, str | None], speeds: list[tuple[str, Any]]
) -> str:
    """The Markdown report (bench/MUTATIONS.md)."""
    caught = sum(1 for o in outcomes if o.caught_by)
    runtime_count = sum(1 for o in outcomes if o.name.startswith("R"))
    lines = [
        "# Mutation score of check_agent",
        "",
        f"Generated by `python bench/mutations.py` on Python {platform.python_version()}, one process.",
        f"Bounds: `max_steps={MAX_STEPS}`, crashes and breakpoints on, stop at the first violation.",
        "",
        f"**{caught} of {len(outcomes)} mutants caught** ({runtime_count} in agentfsm's runtime, "
        f"{len(outcomes) - runtime_count} in agents) in {seconds:.1f}s ({cpu:.1f}s of CPU).",
        "",
        "A runtime mutant is caught by a built-in invariant; an agent mutant is caught by the invariants",
        "a user of that agent would state (a named one in the table is the user's, written for it).",
        "",
        "Unmutated, every fixed agent passes: "
        + ", ".join(f"`{n}` {'passes' if v is None else 'FAILS: ' + v}" for n, v in clean.items())
        + ".",
        "",
        "| mutant | fault | caught by (agent) | seconds |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(f"| {o.name} | {o.description} | {o.caught_by or '**not caught**'} | {o.seconds:.2f} |")
    lines += [
        "",
        "## Speed at the default bounds",
        "",
        "`check_agent(agent)`: every reply kind at 2 model calls, every tool outcome and decision, a crash",
        "before every write to the store and a breakpoint at every transition, in one process (one core).",
        "CPU seconds are the check's own work; wall seconds also count the other work of a shared machine.",
        "",
        "| agent | paths | runs | CPU seconds | wall seconds | paths per CPU second | runs per CPU second | states | "
        "deduplicated | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in speeds:
        verdict = "no violation" if r.ok else ", ".join(v.invariant for v in r.violations)
        lines.append(
            f"| {name} | {r.paths} | {r.runs} | {r.cpu_seconds:.1f} | {r.seconds:.1f} | "
            f"{r.paths / r.cpu_seconds if r.cpu_seconds else 0:.1f} | "
            f"{r.runs / r.cpu_seconds if r.cpu_seconds else 0:.0f} | {r.states} | {r.deduplicated} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the mutants and write the report; exit 1 when one is not caught."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated mutant names (R1,A1,...)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "MUTATIONS.md"), help="the report to write")
    parser.add_argument("--no-speed", action="store_true", help="skip the timing of the default bounds")
    args = parser.parse_args(argv)
    started, cpu = time.perf_counter(), time.process_time()
    clean = baseline()
    outcomes = run(args.only.split(",") if args.only else None)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    speeds = [] if args.no_speed or args.only else speed()
    text = report(outcomes, seconds, cpu, clean, speeds)
    if not args.only:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0 if all(o.caught_by for o in outcomes) and not any(clean.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
