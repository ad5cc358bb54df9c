"""The core of agentfsm: one run moved along the declared tables of ``agentfsm.machine``.

Private machinery; users reach it through ``Agent`` (``agentfsm.agent``). Each module owns one part:

- ``runtime``: ``AgentRun``, the sans-I/O run (actions out, reports in, the one place that takes edges).
- ``drivers``: ``drive_sync`` / ``drive_async``, the only places where a run's I/O happens.
- ``resume``: rebuilding a run from its snapshot and moving it along the ``resume`` edge.
- ``decisions``: the one check every human decision on a tool call goes through.

Nothing here imports an application (the CLI, the review page, durable runs, the built-in hooks);
``tests/core/test_layout.py`` keeps it so.
"""
