"""Each capability's part of the machine, one module each; ``agentfsm.machine.SLICES`` composes them in this order.

- ``loop``: the agent loop itself: the model's reply, the tools, the exit conditions, the step limit;
- ``flow``: the hooks' (and tools') ``stop_run`` and ``continue_run``;
- ``loops``: loop detection, a model that repeats itself;
- ``hitl``: confirming calls with a person (CONFIRM);
- ``doubt``: tool calls whose outcome a crash left unknown;
- ``retries``: a tool call run again after a failed attempt (its tool's ``Retry``);
- ``reconcile``: a call in doubt settled by its tool's reconcile function;
- ``cancel``: cancelling a run from outside;
- ``limits``: usage limits;
- ``interrupts``: a tool call or a hook asking a person a typed question (``ask_user``);
- ``output``: an answer checked against the agent's output type;
- ``guardrails``: checks of the model's input, its answer, a call's arguments and its result.

A slice declares its facts (with their words and their reader), its rules and where they stand in
each phase's order, the ways out it adds to the shared choices (``go_on``, ``ending``), its
interrupts, its edges of a tool call's life, the work its facts skip, and its constant facts (see
``agentfsm._core.rules.Slice``). Adding a capability: docs/machine.md, "Adding a capability".
"""
