"""Threads: one conversation across runs, each run a turn that continues the conversation and State of the last.

``agent.run(messages, thread="t1")`` (and ``run_async``, ``iter``, ``iter_async``) runs the next
turn of thread ``t1`` in the agent's snapshot store, which must hold threads (a ``ThreadStore``:
``SQLiteSnapshotStore`` and ``JsonFileStore`` do). Where the thread's head stands decides the run:

- a thread no run went on in yet: a new run on ``messages``, as without ``thread=``, recorded as its
  first turn;
- a head run that is done: a new run whose conversation is the head's followed by ``messages``,
  and whose State is the head's (each run counts its own steps, tool calls and usage, and
  ``state`` values given to ``run`` are merged in as State's handlers merge them), recorded as the
  thread's next turn;
- a head run that is paused: ``run(thread=..., decisions=[...])``, without messages, resumes it (the
  same turn); a failed one is retried the same way, and an active one whose process is gone is
  taken over with ``take_over=True``;
- a thread forked mid-run (``store.fork_thread(thread_id, run_id, seq)``): ``run(thread=...)``
  without messages goes on from that point as a new run, the branch's next turn.

Anything else is refused before anything runs: messages for a head that is not done, a second run
on a thread while one goes on (``ThreadBusyError``: one thread, one timeline, across processes, as
the store checks it when the turn begins), a ``system_prompt`` for a thread that has its own.

A turn stores what it adds (``SQLiteSnapshotStore`` writes only the messages after its base's,
unless a hook such as compaction rewrote the conversation), so the thousandth turn costs the store
what the tenth does. ``store.threads()`` lists threads, ``store.thread_turns(thread_id)`` gives a
thread's runs oldest first, and ``turn_messages`` reads back what each turn said.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentfsm.errors import ConfigurationError, ConfigurationTypeError
from agentfsm.machine import Phase
from agentfsm.messages import ChatMessage
from agentfsm.pauses import RunStatus
from agentfsm.state import AGENT_STATE_KEYS
from agentfsm.stores.base import ThreadInfo, ThreadStore, ThreadTurn, thread_busy

if TYPE_CHECKING:
    from agentfsm._core.runtime import AgentRun
    from agentfsm.snapshot import AgentSnapshot
    from agentfsm.stores.base import SnapshotStore

__all__ = ["ThreadInfo", "ThreadStore", "ThreadTurn", "thread_store", "turn_messages"]


def thread_store(store: SnapshotStore | None) -> ThreadStore:
    """``store`` when it holds threads; else ``ConfigurationError`` saying which stores do."""
    if not isinstance(store, ThreadStore):
        got = "no snapshot store" if store is None else f"a {type(store).__name__}, which holds no threads"
        raise ConfigurationError(
            f"thread= keeps the thread's runs in the agent's snapshot store, and the agent has {got}: give it an "
            "SQLiteSnapshotStore or a JsonFileStore (snapshot_store=SQLiteSnapshotStore(path))."
        )
    return store


def turn_messages(store: ThreadStore, turn: ThreadTurn) -> list[ChatMessage]:
    """What ``turn`` added to its thread's conversation: its run's messages after those it continued."""
    until = turn.until_seq
    snapshot = store.latest(turn.run_id) if until is None else store.load(turn.run_id, until)
    return [ChatMessage.from_dict(m) for m in snapshot.messages[turn.first_message :]]


@dataclass(slots=True)
class Turn:
    """A run of a thread under way in this process: what its store is told when it pauses or ends."""

    store: ThreadStore
    thread_id: str
    #: May the store keep only what the run adds (not for a failed run retried: its trace was cut back)?
    flat: bool
    #: The conversation's State version when the run started: the same at its end means only appended to.
    version: int = 0

    def appended(self, run: AgentRun) -> bool:
        """Whether ``run``'s conversation was only appended to since it started (no hook rewrote it)."""
        return self.flat and run.state.version("messages") == self.version

    def save(self, run: AgentRun) -> Callable[[AgentSnapshot], Any]:
        """The driver's ``save_pause`` for ``run``: the store keeps what the run added."""
        return lambda snapshot: self.store.save(snapshot, appended=self.appended(run))


@dataclass(frozen=True, slots=True)
class KnownHead:
    """A done turn this process ran: its conversation and State, to continue without reading them back.

    Used only while the store says the thread's head is still that run: a stored run that is done
    never changes, so what this process ended it with is what any process would read.
    """

    run_id: str
    conversation: tuple[ChatMessage, ...]
    carried: dict[str, Any]

    @classmethod
    def of(cls, run: AgentRun) -> KnownHead:
        """What a done ``run`` leaves its thread's next turn (its State values copied: the next run may change them)."""
        carried = {k: copy.deepcopy(v) for k, v in run.data.items() if k != "messages" and k not in AGENT_STATE_KEYS}
        return cls(run.run_id, tuple(run.data.get("messages") or ()), carried)


@dataclass(slots=True)
class TurnPlan:
    """How the next run of a thread goes on, as ``plan_turn`` reads its head."""

    store: ThreadStore
    thread_id: str
    head: ThreadInfo | None
    #: A new turn: its conversation (the head's, then the messages given) and the State values it carries.
    conversation: list[ChatMessage] | None = None
    carried: dict[str, Any] = field(default_factory=dict)
    #: Or the snapshot to go on from: the head run's (resumed in place), or a fork point's (``fork``).
    snapshot: AgentSnapshot | None = None
    fork: bool = False

    #: How many messages of the run's conversation the thread's earlier turns hold.
    base_messages: int = 0


def plan_turn(
    store: ThreadStore,
    thread_id: Any,
    messages: list[ChatMessage] | None,
    *,
    system_prompt: str | None,
    decisions: bool,
    take_over: bool,
    state_values: Callable[[Any], dict[str, Any]],
    known: KnownHead | None = None,
) -> TurnPlan:
    """What the next run of ``thread_id`` is, read from where its head stands (see the module docstring).

    Raises:
        ConfigurationTypeError: ``thread_id`` is not a string.
        ConfigurationError: the call does not fit the head (messages for a run to resume, none for a new turn...).
        ThreadBusyError: the head's run goes on, or is paused or failed and messages were given.
    """
    if not isinstance(thread_id, str) or not thread_id:
        raise ConfigurationTypeError(f"thread must be a thread id (a non-empty string), got {thread_id!r}.")
    head = store.thread(thread_id)
    if head is None:
        if decisions or take_over:
            raise ConfigurationError(f"Thread {thread_id!r} has no run yet: decisions= and take_over= resume one.")
        return TurnPlan(store, thread_id, None, conversation=messages)
    if head.head_seq is not None:  # a fork's point
        snapshot = store.load(head.head_run_id, head.head_seq)
        if snapshot.phase is not Phase.DONE:
            if messages:
                raise ConfigurationError(
                    f"Thread {thread_id!r} was forked in the middle of run {head.head_run_id!r}: run(thread=...) without "
                    "messages goes on from there (with decisions=, if it waits for them). Nothing ran."
                )
            return TurnPlan(store, thread_id, head, snapshot=snapshot, fork=True, base_messages=len(snapshot.messages))
        return _next_turn(store, thread_id, head, snapshot, messages, system_prompt, decisions, state_values)
    status = head.status
    if status is RunStatus.DONE:
        if known is not None and known.run_id == head.head_run_id:
            _check_next(thread_id, messages, system_prompt, decisions)
            assert messages is not None
            carried = {k: copy.deepcopy(v) for k, v in known.carried.items()}
            conversation = [*known.conversation, *messages]
            return TurnPlan(
                store,
                thread_id,
                head,
                conversation=conversation,
                carried=carried,
                base_messages=len(known.conversation),
            )
        snapshot = store.latest(head.head_run_id)
        return _next_turn(store, thread_id, head, snapshot, messages, system_prompt, decisions, state_values)
    if messages or (status is RunStatus.ACTIVE and not take_over):
        raise thread_busy(thread_id, head.head_run_id, status and status.value)
    return TurnPlan(store, thread_id, head, snapshot=store.latest(head.head_run_id))


def _next_turn(
    store: ThreadStore,
    thread_id: str,
    head: ThreadInfo,
    snapshot: AgentSnapshot,
    messages: list[ChatMessage] | None,
    system_prompt: str | None,
    decisions: bool,
    state_values: Callable[[Any], dict[str, Any]],
) -> TurnPlan:
    """A new turn after the done run ``snapshot`` records: its conversation, then ``messages``."""
    _check_next(thread_id, messages, system_prompt, decisions)
    carried = {k: v for k, v in state_values(snapshot.state).items() if k not in AGENT_STATE_KEYS}
    conversation = [*(ChatMessage.from_dict(m) for m in snapshot.messages), *(messages or [])]
    return TurnPlan(
        store, thread_id, head, conversation=conversation, carried=carried, base_messages=len(snapshot.messages)
    )


def _check_next(thread_id: str, messages: list[ChatMessage] | None, system_prompt: str | None, decisions: bool) -> None:
    """Refuse what a new turn after a done run cannot take."""
    if not messages:
        raise ConfigurationError(
            f"Thread {thread_id!r}'s last run is done: give the next turn's messages (run(messages, thread=...))."
        )
    if decisions:
        raise ConfigurationError(f"Thread {thread_id!r}'s last run is done: it waits for no decisions.")
    if system_prompt is not None:
        raise ConfigurationError(
            f"Thread {thread_id!r} goes on with the system prompt its conversation has: pass no system_prompt."
        )
    if not isinstance(messages, list) or not all(isinstance(m, ChatMessage) for m in messages):
        raise ConfigurationTypeError("messages must be a list of ChatMessage.")
