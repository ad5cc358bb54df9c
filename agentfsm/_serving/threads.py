"""Which run a protocol's conversation stands at: AG-UI's thread, A2A's context, mapped onto the agent's runs.

A thread (AG-UI ``threadId``, A2A ``contextId``) is a conversation; each turn of it is a run of
the agent. ``ThreadRuns`` knows, for each thread, its head: the run it last went on in, and
whether that run is paused (its snapshot waits in the agent's snapshot store for answers). It also
holds the one-timeline rule for threads: while a run of a thread goes on, a second one is refused
(``ThreadBusyError``).

The endpoints ask only ``head``, ``running`` and ``moved``. ``ThreadRuns`` keeps the heads in
this process (a restart forgets which run a thread was at, not the runs). ``StoreThreads``, the
endpoints' default for an agent whose snapshot store holds threads (``agentfsm.threads``), reads
them from the store: each run is the thread's next turn (the endpoint runs it with ``thread=``),
a restarted endpoint, or another one on the same store, knows where every thread stands, and the
store refuses a second run on a thread whichever process starts it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from agentfsm.errors import ThreadBusyError
from agentfsm.pauses import RunStatus
from agentfsm.stores.base import ThreadStore


@dataclass(frozen=True, slots=True)
class ThreadHead:
    """Where a thread stands: the run it last went on in, and whether that run waits to be resumed."""

    run_id: str
    #: The run is paused: its snapshot, the newest of the run in the agent's store, resumes it.
    paused: bool


class ThreadRuns:
    """The head of each thread, and the threads a run goes on in now (one at a time each)."""

    #: The runs are the turns of threads the agent's store holds: the endpoint runs them with ``thread=``.
    in_store = False

    def __init__(self) -> None:
        self._heads: dict[str, ThreadHead] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def head(self, thread_id: str) -> ThreadHead | None:
        """The thread's head, or None for a thread no run went on in yet."""
        with self._lock:
            return self._heads.get(thread_id)

    @contextlib.contextmanager
    def running(self, thread_id: str) -> Iterator[None]:
        """Hold the thread for one run: while the block runs, another ``running`` of it raises.

        Raises:
            ThreadBusyError: a run of the thread goes on already.
        """
        with self._lock:
            if thread_id in self._running:
                raise ThreadBusyError(
                    f"Thread {thread_id!r} has a run going on: one thread, one timeline. Wait for it to end "
                    "(or pause), then send the next input. Nothing ran."
                )
            self._running.add(thread_id)
        try:
            yield
        finally:
            with self._lock:
                self._running.discard(thread_id)

    def moved(self, thread_id: str, head: ThreadHead | None) -> None:
        """The thread now stands at ``head`` (None: at no run, as a new thread does)."""
        with self._lock:
            if head is None:
                self._heads.pop(thread_id, None)
            else:
                self._heads[thread_id] = head


class StoreThreads(ThreadRuns):
    """The threads a store holds (``agentfsm.threads``): where each stands is read from the store, not kept here."""

    in_store = True

    def __init__(self, store: ThreadStore) -> None:
        super().__init__()
        self.store = store

    def head(self, thread_id: str) -> ThreadHead | None:
        """The thread's head run, as the store has it (paused: it waits for answers)."""
        info = self.store.thread(thread_id)
        if info is None:
            return None
        return ThreadHead(info.head_run_id, paused=info.head_seq is None and info.status is RunStatus.PAUSED)

    def moved(self, thread_id: str, head: ThreadHead | None) -> None:
        """Nothing to keep: the store moved the thread's head as the run began, paused or ended."""
