"""What the agents served over protocols share: their request checks, their threads, their questions.

``agentfsm.ag_ui`` and ``agentfsm.a2a`` serve an agent to front ends and to other agents. Both
answer only requests for an allowed host, from an allowed origin, with the token when one is set,
of a bounded size (``guard``); both map a protocol's conversation (AG-UI's thread, A2A's context)
onto the agent's runs (``threads``: ``StoreThreads`` when the agent's store holds threads, else ``ThreadRuns``); and both ask a
paused run's questions and read their answers as decisions the same way (``questions``).
``hosts`` holds the host and origin names both they and the review page check.
"""
