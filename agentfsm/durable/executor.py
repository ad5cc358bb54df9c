"""Launching DBOS in a process that runs durable runs (a worker, or an application)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any, Literal

import dbos._dbos as dbos_core
from dbos import DBOS

from agentfsm.durable.records import DEFAULT_QUEUE


def dbos_launched() -> bool:
    """Whether DBOS is launched in this process.

    DBOS has no public API for it: this is the one place agentfsm reads DBOS's private state
    (``dbos._dbos._dbos_global_instance._launched``); a test fails when DBOS moves it.
    """
    instance = dbos_core._dbos_global_instance
    return instance is not None and bool(instance._launched)


def launch(
    system_database_url: str,
    *,
    app_name: str = "agentfsm",
    executor_id: str | None = None,
    queues: dict[str, int | None] | None = None,
    polling_interval: float = 0.1,
    application_version: str | None = None,
    log_level: str = "WARNING",
) -> None:
    """Configure and launch DBOS in this process, and listen to the durable agents' queues.

    ``executor_id``: give each worker its own, stable across restarts: a restarted worker recovers
    the workflows its previous life left unfinished. ``queues``: the per-worker concurrency limit of
    each queue to listen to (default: the ``agentfsm`` queue, no limit given). DBOS keeps a queue's
    limit in the database, for all its workers: a limit given here sets it, ``None`` leaves it. ``polling_interval``: how often, in
    seconds, the worker looks for queued runs and for notifications it waits on (DBOS's default is
    1 s: a second's wait per run, and a second's wait to shut down).

    ``application_version``: DBOS recovers and dequeues a workflow only in executors of its version.
    Its default is a hash of the workflows a process registers, so a worker hosting other durable
    agents would be another version and leave these runs alone; here it is agentfsm's version: the
    workflow code is agentfsm's driver, and each run checks its agent's fingerprint itself.
    """
    limits = queues if queues is not None else {DEFAULT_QUEUE: None}
    config: dict[str, Any] = {
        "name": app_name,
        "system_database_url": system_database_url,
        "application_version": application_version or f"agentfsm-{version('agentfsm')}",
        "log_level": log_level,
        "notification_listener_polling_interval_sec": polling_interval,
    }
    if executor_id is not None:
        config["executor_id"] = executor_id
    DBOS(config=config)  # type: ignore[arg-type]
    DBOS.listen_queues(list(limits))
    DBOS.launch()
    for queue, limit in limits.items():
        # The limit is the queue's, kept in the database for all its workers: one given sets it, none
        # leaves what another worker set.
        conflict: Literal["never_update", "always_update"] = "never_update" if limit is None else "always_update"
        DBOS.register_queue(
            queue, worker_concurrency=limit, on_conflict=conflict, polling_interval_sec=polling_interval
        )
