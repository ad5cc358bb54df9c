"""Structured logging of runs: one event per transition, silent unless turned on.

agentfsm logs through the standard library logger ``"agentfsm"`` (wrapped by structlog), which
has only a ``NullHandler``: nothing is printed until the application configures logging. The
quickest way to see every transition::

    import agentfsm
    agentfsm.configure_logging()            # readable lines on stderr
    agentfsm.configure_logging(json=True)   # one JSON object per line

Transition events are logged at DEBUG, the max-steps warning at WARNING.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

import structlog

LOGGER_NAME = "agentfsm"
stdlib_logger = logging.getLogger(LOGGER_NAME)
stdlib_logger.addHandler(logging.NullHandler())

logger: Any = structlog.wrap_logger(
    stdlib_logger,
    processors=[structlog.stdlib.add_log_level, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
    wrapper_class=structlog.stdlib.BoundLogger,
)


def configure_logging(level: int | str = logging.DEBUG, *, json: bool = False, stream: IO[str] | None = None) -> None:
    """Print agentfsm's events to ``stream`` (stderr by default), readable or as JSON lines."""
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_log_level],
        )
    )
    handler.set_name("agentfsm-configured")
    for existing in list(stdlib_logger.handlers):
        if existing.get_name() == "agentfsm-configured":
            stdlib_logger.removeHandler(existing)
    stdlib_logger.addHandler(handler)
    stdlib_logger.setLevel(level)
