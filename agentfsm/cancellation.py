"""Cancelling a run from outside: a ``RunHandle`` another thread can cancel, or the task of ``run_async``.

A cancelled run takes the ``cancel`` edge from the phase it is in to PAUSED: it stops at the next
transition, and its snapshot resumes it like any paused run's (``agent.run(snapshot=...)``).
Nothing it finished is lost, and nothing runs twice: finished tool calls are kept; a tool call
under way when a task was cancelled is in doubt, as after a crash (it runs again if its tool is
idempotent, else it waits for a decision). ``after_run`` hooks run once, when the resumed run ends.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentfsm.snapshot import AgentSnapshot


class RunHandle:
    """Cancels a run from another thread: ``agent.run(..., cancel=handle)``, then ``handle.cancel()``.

    >>> handle = RunHandle()
    >>> handle.cancel()
    >>> handle.cancelled
    True

    The run stops at its next transition (a model call or tool call under way finishes first) and
    raises ``RunCancelled``, whose ``snapshot`` resumes it; ``snapshot`` here holds it too, also
    when the task of ``run_async`` was cancelled instead. A handle cancels once: a run resumed
    after a cancellation takes a new handle (a cancelled one is refused with ``ConfigurationError``).
    """

    __slots__ = ("_cancelled", "_watchers", "snapshot")

    def __init__(self) -> None:
        # A plain flag, set once from any thread (an atomic store).
        self._cancelled = False
        #: Weak references to the watchers (``on_cancel``): a handle given to many runs keeps none alive.
        self._watchers: list[weakref.ref[Callable[[], None]]] = []
        #: The snapshot of the run once it stopped for the cancellation (``None`` until then).
        self.snapshot: AgentSnapshot | None = None

    def cancel(self) -> None:
        """Ask the run to stop at its next transition; safe from any thread, and more than once."""
        self._cancelled = True
        for ref in list(self._watchers):
            watcher = ref()
            if watcher is not None:
                watcher()

    def on_cancel(self, watcher: Callable[[], None]) -> None:
        """Call ``watcher`` when ``cancel()`` is called, in the cancelling thread (at once if it was called already).

        A run given the handle watches it this way, and reads its ``cancel`` guard at its
        transitions only from then on: a handle never cancelled costs a run nothing. The handle
        holds ``watcher`` weakly (a bound method through ``weakref.WeakMethod``): keep it alive for
        as long as it should be called.
        """
        self._watchers = [ref for ref in self._watchers if ref() is not None]  # forget the runs that are gone
        self._watchers.append(weakref.WeakMethod(watcher) if inspect.ismethod(watcher) else weakref.ref(watcher))
        if self._cancelled:
            watcher()

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel()`` was called."""
        return self._cancelled
