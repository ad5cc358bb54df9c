"""Bounded exhaustive exploration of an agent's paths, and the report of what it found.

``check_agent`` runs the agent along every way the world can answer (see ``agentfsm.checking.world``),
breadth first, so the first violation of each invariant is on a shortest path. Each path is run
as it is, then once more killed before each write to its store (resumed from what the store
holds) and once more paused at each transition (resumed from the snapshot), and the invariants
are checked on every run. A state met before (same phase, work, State and history) is not
branched from again, and a stretch of a run the world is bound to repeat is not run again: a crash
variant goes on from what the uninterrupted run left at that write (``World.remains``), and the
first segment of a paused path, or the run resumed after a kill, is found again when met before
(``agentfsm.checking.stretches``). Past ``max_paths``, the rest is sampled with hypothesis instead.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfsm._extras import extra_needed
from agentfsm.agent import Agent
from agentfsm.checking.counterexample import path_diagram, regression_test, trace_text
from agentfsm.checking.invariants import BUILTIN_INVARIANTS, Invariant, Verdict, as_invariant
from agentfsm.checking.record import RecordedRun
from agentfsm.checking.scenario import Scenario, Subject, after_crash, execute, paused_at
from agentfsm.checking.stretches import Stretches
from agentfsm.checking.world import (
    CALL_QUESTIONS,
    DEFAULT_TOOL_TIMEOUT,
    GUARDRAIL_ANSWERS,
    REPLY_KINDS,
    TOOL_OUTCOMES,
    Bounds,
    Key,
    World,
)
from agentfsm.errors import AgentCheckFailed, ConfigurationError, ConfigurationTypeError
from agentfsm.logs import stdlib_logger
from agentfsm.machine import ACTIVE_PHASES
from agentfsm.messages import ChatMessage

#: Model calls explored with every kind of reply, by default: enough for a call, its result and the
#: next call (3 tools, a hook and a confirmation strategy are checked in seconds).
DEFAULT_MAX_STEPS = 2
#: Paths explored exhaustively before the rest is sampled.
DEFAULT_MAX_PATHS = 3000


@dataclass(slots=True)
class Violation:
    """An invariant that does not hold on a path: what, where, and how to reproduce it."""

    invariant: str
    message: str
    scenario: Scenario
    run: RecordedRun
    #: A pytest test that replays the path and fails while the invariant is violated.
    regression_test: str
    #: The agent's Mermaid diagram with the path's edges numbered in order.
    diagram: str

    @property
    def trace(self) -> str:
        """The path's transitions, tool executions and decisions, in words."""
        return trace_text(self.run)

    def text(self) -> str:
        """The whole counterexample, to read."""
        return "\n".join(
            [
                f"[{self.invariant}] {self.message}",
                "",
                "Trace:",
                self.trace,
                "",
                "Regression test:",
                self.regression_test,
                "Diagram (Mermaid):",
                self.diagram,
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """As JSON-compatible data."""
        return {
            "invariant": self.invariant,
            "message": self.message,
            "trace": self.trace,
            "regression_test": self.regression_test,
            "diagram": self.diagram,
            "crash_at": self.scenario.crash_at,
            "pause_at": self.scenario.pause_at,
        }


@dataclass(slots=True)
class CheckResult:
    """What ``check_agent`` explored and found: one ``Violation`` per invariant violated (the shortest found)."""

    violations: list[Violation] = field(default_factory=list)
    #: Paths explored exhaustively (each run as it is), and every run made (with crashes and breakpoints).
    paths: int = 0
    runs: int = 0
    #: Distinct states branched from, and states met again (their branches not explored twice).
    states: int = 0
    deduplicated: int = 0
    #: Every path within the bounds was explored (otherwise ``sampled`` paths were drawn with hypothesis).
    exhaustive: bool = True
    sampled: int = 0
    seconds: float = 0.0
    #: The CPU time the check took (its work on one core, whatever else the machine runs).
    cpu_seconds: float = 0.0
    invariants: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No invariant was violated."""
        return not self.violations

    @property
    def paths_per_second(self) -> float:
        """Paths explored (exhaustively, or sampled) per second of wall time, each with its variants."""
        return (self.paths + self.sampled) / self.seconds if self.seconds else 0.0

    @property
    def runs_per_second(self) -> float:
        """Runs made per second of wall time (each path run as it is, and killed and paused and resumed)."""
        return self.runs / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        """One line: how much was explored, how fast, and the verdict."""
        how = "exhaustively" if self.exhaustive else f"up to the path bound, then {self.sampled} sampled"
        verdict = "no violation" if self.ok else f"{len(self.violations)} invariant(s) violated"
        variants = " with crashes and breakpoints" if self.runs > self.paths + self.sampled else ""
        return (
            f"{self.paths} paths ({self.runs} runs{variants}) explored {how} in "
            f"{self.seconds:.1f}s, {self.cpu_seconds:.1f}s of CPU ({self.paths_per_second:.0f} paths/s, "
            f"{self.runs_per_second:.0f} runs/s); "
            f"{self.states} states, "
            f"{self.deduplicated} deduplicated: {verdict}"
        )

    def text(self) -> str:
        """The summary and every counterexample."""
        return "\n\n".join([self.summary(), *(v.text() for v in self.violations)])

    def to_dict(self) -> dict[str, Any]:
        """As JSON-compatible data (``agentfsm check --format json``)."""
        return {
            "ok": self.ok,
            "paths": self.paths,
            "runs": self.runs,
            "states": self.states,
            "deduplicated": self.deduplicated,
            "exhaustive": self.exhaustive,
            "sampled": self.sampled,
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "paths_per_second": round(self.paths_per_second, 1),
            "runs_per_second": round(self.runs_per_second, 1),
            "invariants": self.invariants,
            "violations": [v.to_dict() for v in self.violations],
        }

    def to_json(self) -> str:
        """``to_dict`` as JSON text."""
        return json.dumps(self.to_dict(), indent=2)

    def raise_for_violations(self) -> None:
        """Raise ``AgentCheckFailed`` with the counterexamples when an invariant was violated."""
        if not self.ok:
            raise AgentCheckFailed(self.text(), self)


@dataclass(slots=True)
class _Checker:
    """One check: the subject, the invariants, and what was found so far."""

    subject: Subject
    invariants: list[Invariant]
    crashes: bool
    breakpoints: bool
    agent_ref: str | None
    options: dict[str, Any]
    stop_on_violation: bool
    result: CheckResult = field(default_factory=CheckResult)
    found: dict[str, Violation] = field(default_factory=dict)
    #: The first segments of paths paused at a breakpoint, found again for a path with the same answers so far.
    first_segments: Stretches = field(default_factory=Stretches)

    def judge(self, world: World, scenario: Scenario) -> bool:
        """Check every invariant on the world's run; record the first violation of each. True: all hold."""
        self.result.runs += 1
        run = world.record
        ok = True
        for inv in self.invariants:
            try:
                message = inv.violation(run)
            except ConfigurationTypeError:
                raise  # the invariant is written wrong: no path can be judged by it
            except Exception as exc:  # an invariant that raises is violated: say how
                message = f"the invariant raised {exc!r}"
            if message is None:
                continue
            ok = False
            known = self.found.get(inv.name)
            if known is None or _length(scenario) < _length(known.scenario):
                self.found[inv.name] = Violation(
                    inv.name,
                    message,
                    scenario,
                    run,
                    regression_test(
                        inv,
                        inv in BUILTIN_INVARIANTS,
                        scenario,
                        self.subject.messages,
                        self.agent_ref,
                        self.options,
                        self.subject.state,
                    ),
                    path_diagram(self.subject.agent, run),
                )
        return ok

    @property
    def max_steps(self) -> int:
        """The exploration's bound on model calls tried with every reply."""
        return self.subject.bounds.max_steps

    def done(self) -> bool:
        return self.stop_on_violation and bool(self.found)

    def variants(self, base: World) -> None:
        """The base path killed before each write to the store, and paused at each transition, then resumed."""
        answers = dict(base.answers)
        baseline = base.record.comparable
        if self.crashes:
            # Kills that leave the store as an earlier one did: the run resumed from it is found again.
            resumed = Stretches()
            seen: set[tuple[int, int, int]] = set()
            for index, point in enumerate(base.write_points):
                if point in seen:  # the same commits, effects and step: the same crash
                    self.result.deduplicated += 1
                    continue
                seen.add(point)

                def killed(answers: Mapping[Key, Any], index: int = index) -> World:
                    return after_crash(self.subject, base, index, answers, resumed)

                self._variant(killed, answers, baseline, f"killed before write {index} to the store", crash_at=index)
                if self.done():
                    return
        if self.breakpoints:
            for phase, step in sorted(_pause_points(base), key=lambda p: (p[1], p[0])):

                def paused(answers: Mapping[Key, Any], at: tuple[str, int] = (phase, step)) -> World:
                    return paused_at(self.subject, answers, at, self.first_segments)

                self._variant(paused, answers, baseline, f"paused at {phase}, step {step}", pause_at=(phase, step))
                if self.done():
                    return

    def _variant(
        self,
        run: Callable[[Mapping[Key, Any]], World],
        answers: Mapping[Key, Any],
        baseline: dict[str, Any] | None,
        where: str,
        crash_at: int | None = None,
        pause_at: tuple[str, int] | None = None,
    ) -> None:
        """Judge the variant ``run`` makes of the path with ``answers``, and with each answer only its interruption asks."""
        world = run(answers)
        self._judge_variant(world, baseline, where, crash_at, pause_at)
        # Questions only an interruption asks (a call in doubt) get each of their answers.
        for asked, _ in world.asked:
            if asked.fixed or len(asked.options) < 2:
                continue
            for other in asked.options[1:]:
                self._judge_variant(run({**answers, asked.key: other}), baseline, where, crash_at, pause_at)

    def _judge_variant(
        self,
        world: World,
        baseline: dict[str, Any] | None,
        where: str,
        crash_at: int | None,
        pause_at: tuple[str, int] | None,
    ) -> None:
        world.record.baseline, world.record.interruption = baseline, where
        self.judge(world, Scenario.from_answers(world.answers, crash_at, pause_at, self.max_steps))

    def explore(self, max_paths: int, progress: Callable[[int], None] | None) -> None:
        """Breadth first over the world's answers, up to ``max_paths`` paths."""
        queue: deque[tuple[tuple[Key, Any], ...]] = deque([()])
        fingerprints: set[str] = set()
        while queue and not self.done():
            if self.result.paths >= max_paths:
                self.result.exhaustive = False
                return
            prefix = queue.popleft()
            world = execute(self.subject, dict(prefix), remains=self.crashes)
            self.result.paths += 1
            if progress is not None:
                progress(self.result.paths)
            path = [(asked.key, answer) for asked, answer in world.asked]
            for i, (asked, _) in enumerate(world.asked):
                if asked.fixed or len(asked.options) < 2:
                    continue
                if asked.fingerprint in fingerprints:
                    self.result.deduplicated += 1
                    break
                fingerprints.add(asked.fingerprint)
                for other in asked.options[1:]:
                    queue.append((*path[:i], (asked.key, other)))
            self.result.states = len(fingerprints)
            self.judge(world, Scenario.from_answers(world.answers, max_steps=self.max_steps))
            if not self.done():
                self.variants(world)

    def sample(self, samples: int) -> None:
        """Paths drawn with hypothesis, each run as it is, killed and paused at drawn points, then resumed.

        The answers an interruption asks (a call in doubt, a deferred decision) are drawn too, and the
        same invariants checked. Every sample is drawn (unless ``stop_on_violation``): the shortest violation found is kept.
        """
        with extra_needed("check_agent's sampling past max_paths (or give samples=0)", "testing"):
            from hypothesis import HealthCheck, given, settings
            from hypothesis import strategies as st

        @settings(
            max_examples=samples,
            database=None,
            derandomize=True,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def draw(data: st.DataObject) -> None:
            if self.done():
                return

            def choose(options: tuple[Any, ...]) -> Any:
                return options[data.draw(st.integers(0, len(options) - 1))]

            base = execute(self.subject, {}, choose=choose, fingerprints=False)
            self.result.sampled += 1
            self.judge(base, Scenario.from_answers(base.answers, max_steps=self.max_steps))
            baseline = base.record.comparable
            if self.crashes and base.write_points and not self.done():
                crash = data.draw(st.integers(0, len(base.write_points) - 1))
                world = execute(self.subject, base.answers, crash_at=crash, choose=choose, fingerprints=False)
                self._judge_variant(world, baseline, f"killed before write {crash} to the store", crash, None)
            points = sorted(_pause_points(base))
            if self.breakpoints and points and not self.done():
                pause = points[data.draw(st.integers(0, len(points) - 1))]
                world = execute(self.subject, base.answers, pause_at=pause, choose=choose, fingerprints=False)
                self._judge_variant(world, baseline, f"paused at {pause[0]}, step {pause[1]}", None, pause)

        draw()


def _pause_points(base: World) -> set[tuple[str, int]]:
    """Where a breakpoint can pause the path of ``base``: each active phase it entered, at its step."""
    if not base.record.segments:
        return set()
    records = base.record.segments[0].trace
    return {(r.dest.value, r.step) for r in records if r.dest in ACTIVE_PHASES and r.trigger != "resume"}


def _length(scenario: Scenario) -> tuple[int, int]:
    """How long a path is, to keep the shortest: model replies, then answers other than each question's first."""
    answers = sum(len(getattr(scenario, question.field)) for question in CALL_QUESTIONS)
    return len(scenario.script), answers + len(scenario.hook_choices)


def check_agent(
    agent: Agent,
    messages: Sequence[ChatMessage] | None = None,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    replies: Iterable[str] = REPLY_KINDS,
    tool_outcomes: Iterable[str] = TOOL_OUTCOMES,
    decisions: bool = True,
    crashes: bool = True,
    breakpoints: bool = True,
    hook_choices: Mapping[str, Sequence[Callable[..., Any]]] | None = None,
    invariants: Iterable[Invariant | Callable[[RecordedRun], Verdict]] = (),
    builtin_invariants: bool = True,
    state: Mapping[str, Any] | None = None,
    max_paths: int = DEFAULT_MAX_PATHS,
    samples: int = 200,
    stop_on_violation: bool = False,
    progress: bool | None = None,
    agent_ref: str | None = None,
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
    guardrail_answers: Iterable[str] = GUARDRAIL_ANSWERS,
) -> CheckResult:
    """Explore the agent's paths up to the bounds and check the invariants on each; see ``docs/checking.md``.

    The agent's tools and toolsets are warmed up first (a toolset that connects lazily lists its
    tools, and stays connected: close the agent when done, ``with agent:`` or ``agent.close()``); a
    tool that reaches a server outside the process (an MCP server's) is never called: its results
    are played from its schemas, as the model's replies are.

    Args:
        agent: The agent to check. Its model is replaced by the world's replies; its tools, hooks,
            State schema, exit conditions and limits are its own; a confirmation strategy's decisions
            are the world's.
        messages: The conversation each run starts with (a user message "hi" by default).
        max_steps: Model calls at which every kind of reply is tried; later calls get a closing text.
        replies: The kinds of model reply tried (``REPLY_KINDS``: text, tool, invalid, unknown,
            parallel, error).
        tool_outcomes: What each tool execution may do: ``returns`` (its own function runs), ``raises``.
        decisions: Try every human decision (approve, reject, modify, defer) for covered calls.
        crashes: Kill the run before each write to its store and resume it from the store.
        breakpoints: Pause the run at each transition and resume it from the snapshot.
        hook_choices: Alternatives per hook point (functions of the State): each firing tries each.
        invariants: User invariants: ``Invariant`` objects or predicates over a ``RecordedRun``.
        builtin_invariants: Check ``BUILTIN_INVARIANTS`` too.
        state: Initial values of the agent's ``state_schema`` keys.
        max_paths: Paths explored exhaustively; past it, ``samples`` more are drawn with hypothesis.
        samples: How many paths hypothesis draws once ``max_paths`` is reached (hypothesis comes with
            the ``testing`` extra; without it, sampling raises ``MissingExtraError``).
        stop_on_violation: Stop at the first violation (the shortest path found so far).
        progress: Show a progress bar (rich); ``None``: when stderr is a terminal and rich is installed.
        agent_ref: ``module:attribute`` of the agent, for the regression tests' import line.
        tool_timeout: Seconds a tool call may take (a tool's own or the agent's shorter timeout
            stays): past it the call's outcome is a ``ToolTimeoutError``, and a blocking tool holds
            no path for longer.
        guardrail_answers: What each of the agent's guardrails may answer each value it is shown
            (``GUARDRAIL_ANSWERS``: pass, rewrite, tripwire); the answers are played, as the model's
            replies are (a guardrail's own check is not called).

    Returns:
        A ``CheckResult``; ``result.raise_for_violations()`` raises ``AgentCheckFailed``.
    """
    if not isinstance(agent, Agent):
        raise ConfigurationError(f"check_agent checks an Agent, got {type(agent).__name__}.")
    if agent.async_only_hooks:
        raise ConfigurationError(
            f"check_agent runs the agent synchronously, and hooks {agent.async_only_hooks} are async functions: "
            "give them a sync run (a hook object with run and run_async) to check the agent."
        )
    if max_steps < 1:
        raise ConfigurationError(f"max_steps must be at least 1, got {max_steps}.")
    kinds = tuple(replies)
    answers = tuple(guardrail_answers)
    unknown = [
        *sorted(set(kinds) - set(REPLY_KINDS)),
        *sorted(set(tool_outcomes) - set(TOOL_OUTCOMES)),
        *sorted(set(answers) - set(GUARDRAIL_ANSWERS)),
    ]
    if unknown:
        raise ConfigurationError(
            f"Unknown reply kinds, tool outcomes or guardrail answers {unknown}; replies: {REPLY_KINDS}, "
            f"tool_outcomes: {TOOL_OUTCOMES}, guardrail_answers: {GUARDRAIL_ANSWERS}."
        )
    if isinstance(tool_timeout, bool) or not isinstance(tool_timeout, int | float) or not tool_timeout > 0:
        raise ConfigurationError(f"tool_timeout must be a number of seconds > 0, got {tool_timeout!r}.")
    hook_choices = dict(hook_choices or {})
    bounds = Bounds(
        max_steps,
        kinds,
        tuple(tool_outcomes),
        decisions,
        hook_choices,
        tool_timeout=tool_timeout,
        guardrail_answers=answers,
    )
    list_tools(agent)
    subject = Subject.of(agent, messages, state, bounds)
    checks = [*(BUILTIN_INVARIANTS if builtin_invariants else ()), *map(as_invariant, invariants)]
    # Hook alternatives are functions: the regression test is given them by name.
    options = {"hook_choices": "HOOK_CHOICES"} if hook_choices else {}
    checker = _Checker(subject, checks, crashes, breakpoints, agent_ref, options, stop_on_violation)
    checker.result.invariants = [i.name for i in checks]
    started, cpu = time.perf_counter(), time.process_time()
    try:
        with _quiet(), _progress_bar(progress) as advance:
            checker.explore(max_paths, advance)
            if not checker.result.exhaustive and not checker.done() and samples > 0:
                checker.sample(samples)
    finally:
        subject.close()
    checker.result.cpu_seconds = time.process_time() - cpu
    checker.result.seconds = time.perf_counter() - started
    checker.result.violations = list(checker.found.values())
    return checker.result


def list_tools(agent: Agent) -> None:
    """Warm up the agent's tools and toolsets (not its model or hooks): a toolset that connects lazily lists its tools."""
    for part in agent._tool_parts():
        warm = getattr(part, "warm_up", None)
        if callable(warm):
            warm()


def replay(
    agent: Agent,
    scenario: Scenario,
    messages: Sequence[ChatMessage] | None = None,
    *,
    invariants: Iterable[Invariant | Callable[[RecordedRun], Verdict]] = (),
    builtin_invariants: bool = True,
    state: Mapping[str, Any] | None = None,
    hook_choices: Mapping[str, Sequence[Callable[..., Any]]] | None = None,
    max_steps: int | None = None,
) -> CheckResult:
    """Run ``agent`` along one ``Scenario`` (a counterexample's) and check the invariants on it.

    An interrupted scenario (``crash_at``, ``pause_at``) is compared with the same one uninterrupted.
    ``max_steps`` bounds the model calls as ``check_agent``'s does (default: the scenario's, else the
    length of its script); ``hook_choices`` are the alternatives the scenario's ``hook_choices`` pick from.
    """
    bounds = Bounds(
        max_steps or scenario.max_steps or max(len(scenario.script), 1),
        REPLY_KINDS,
        TOOL_OUTCOMES,
        True,
        dict(hook_choices or {}),
    )
    subject = Subject.of(agent, messages, state, bounds)
    checks = [*(BUILTIN_INVARIANTS if builtin_invariants else ()), *map(as_invariant, invariants)]
    checker = _Checker(subject, checks, False, False, None, {}, False)
    checker.result.invariants = [i.name for i in checks]
    started = time.perf_counter()
    answers = scenario.answers()
    try:
        with _quiet():
            _replay(checker, subject, scenario, answers)
    finally:
        subject.close()
    checker.result.paths = 1
    checker.result.seconds = time.perf_counter() - started
    checker.result.violations = list(checker.found.values())
    return checker.result


def _replay(checker: _Checker, subject: Subject, scenario: Scenario, answers: dict[Key, Any]) -> None:
    if scenario.interrupted:
        base = execute(subject, answers, fingerprints=False)
        world = execute(subject, answers, crash_at=scenario.crash_at, pause_at=scenario.pause_at, fingerprints=False)
        where = "killed" if scenario.crash_at is not None else "paused"
        checker._judge_variant(
            world, base.record.comparable, f"{where} as the scenario says", scenario.crash_at, scenario.pause_at
        )
    else:
        checker.judge(execute(subject, answers, fingerprints=False), scenario)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Agentfsm's standard logger off while paths run: failing paths are explored on purpose."""
    was = stdlib_logger.disabled
    stdlib_logger.disabled = True
    try:
        yield
    finally:
        stdlib_logger.disabled = was


class _progress_bar:
    """A rich progress bar of explored paths, or nothing (no rich, not a terminal, or not wanted)."""

    def __init__(self, wanted: bool | None) -> None:
        self.wanted = wanted
        self.bar: Any = None

    def __enter__(self) -> Callable[[int], None] | None:
        if self.wanted is False or (self.wanted is None and not sys.stderr.isatty()):
            return None
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return None
        self.bar = Progress(
            TextColumn("checking paths"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
        )
        self.bar.start()
        # How many paths the bounds hold is not known before they are explored: no total.
        task = self.bar.add_task("paths", total=None)
        return lambda done: self.bar.update(task, completed=done)

    def __exit__(self, *exc_info: object) -> None:
        if self.bar is not None:
            self.bar.stop()
