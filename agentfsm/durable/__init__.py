"""Durable runs: an agent's runs as DBOS workflows (``pip install 'agentfsm[dbos]'``).

``DurableAgent(agent)`` runs the same ``Agent`` as a DBOS workflow whose id is the run id. Each model
call, tool call, confirmation and hook point is a DBOS step, checkpointed in DBOS's system database
(SQLite on one machine, PostgreSQL for many processes). When a worker dies, DBOS runs the workflow
again (``DBOS.launch()`` of an executor with the same id, or a queue's next worker): every recorded
step gives back its recorded output instead of running, and the run goes on from the first step
that was not recorded. The run's snapshot is derived from the same checkpoints
(``DurableAgent.snapshot``): the run is rebuilt from its workflow's input and driven over its
recorded steps, with no other record to keep in step.

A run that pauses (a confirmation to take, a breakpoint, tool calls in doubt) ends its workflow
with the pause snapshot as output, so a waiting run is rows in the database, not a thread or a
process. A decision starts the continuation: workflow ``RUN_ID/1``, then ``RUN_ID/2``...; DBOS
refuses a second workflow with the same id, so two decisions on one pause cannot both run.

Tool calls are DBOS steps, run at least once: a call that started and whose result was never
recorded (its worker died) runs again only when its tool is idempotent (``@tool(idempotent=True)``);
otherwise the run pauses with break point ``outcome_unknown`` until a decision settles the call.

``cancel(db, run_id)`` stops a running durable run from any process, as in-process through the
run's ``cancel`` edge: DBOS stops its workflow before the next step, and the cancellation's own
workflow takes the edge where that one's record ends. The run is then paused (reason
``cancelled``), and any continuation resumes it (``resume_cancelled(db, run_id)`` is one).
"""

from agentfsm import _extras

with _extras.extra_needed("agentfsm.durable", "dbos"):
    from agentfsm.durable.agent import DurableAgent, DurableRun
    from agentfsm.durable.executor import launch
    from agentfsm.durable.records import (
        DEFAULT_QUEUE,
        RunRecord,
        cancel,
        continue_run,
        decide,
        find_run,
        list_runs,
        resume_cancelled,
    )
    from agentfsm.durable.views import DurableRuns

__all__ = [
    "DEFAULT_QUEUE",
    "DurableAgent",
    "DurableRun",
    "DurableRuns",
    "RunRecord",
    "cancel",
    "continue_run",
    "decide",
    "find_run",
    "launch",
    "list_runs",
    "resume_cancelled",
]
