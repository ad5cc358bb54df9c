"""Structured logging of runs: one event per transition, silent unless turned on.

By default agentfsm logs through the standard library logger ``"agentfsm"`` (wrapped by
structlog), which has only a ``NullHandler``: nothing is printed until the application configures
logging, and then the events go wherever its logging configuration sends them. The quickest way
to see every transition::

    import agentfsm
    agentfsm.configure_logging()            # key=value lines on stderr
    agentfsm.configure_logging(json=True)   # one JSON object per line

``configure_logging`` writes the events straight to the stream with structlog, without building a
standard-library ``LogRecord`` for each (~8-12 µs an event instead of ~50-75);
``use_standard_logging()`` sends them back through the ``"agentfsm"`` logger. Transition events
are logged at DEBUG, the max-steps warning at WARNING. An event with a ``message`` field is
printed by standard logging as that text: the max-steps warning's is Haystack's
("Agent reached maximum agent steps of 3, stopping."), which its users' tests and log searches
match.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog

LOGGER_NAME = "agentfsm"
stdlib_logger = logging.getLogger(LOGGER_NAME)
stdlib_logger.addHandler(logging.NullHandler())


class _RecordMessage(dict[str, Any]):
    """An event as the message of a standard-library record: its fields, printed as its ``message``.

    Handlers that read the fields (structlog's ``ProcessorFormatter``) get the dict; ``%(message)s``,
    ``caplog.text`` and ``caplog.messages`` get the event's ``message`` text, when it has one (the
    max-steps warning carries Haystack's), else the dict as before.
    """

    def __str__(self) -> str:
        message = self.get("message")
        return message if isinstance(message, str) else super().__str__()


def _as_record_message(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> _RecordMessage:
    return _RecordMessage(event)


# ``bind()`` turns structlog's lazy proxy into the bound logger once, not on every event.
_THROUGH_STANDARD_LOGGING: Any = structlog.wrap_logger(
    stdlib_logger,
    processors=[
        structlog.stdlib.add_log_level,
        _as_record_message,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    wrapper_class=structlog.stdlib.BoundLogger,
).bind()


class EventLogger:
    """agentfsm's logger: forwards each event to the route chosen by ``configure_logging``."""

    __slots__ = ("route",)

    def __init__(self, route: Any) -> None:
        self.route = route

    def debug(self, event: str, **values: Any) -> None:
        """Log ``event`` at DEBUG."""
        self.route.debug(event, **values)

    def warning(self, event: str, **values: Any) -> None:
        """Log ``event`` at WARNING."""
        self.route.warning(event, **values)

    def error(self, event: str, **values: Any) -> None:
        """Log ``event`` at ERROR."""
        self.route.error(event, **values)


logger = EventLogger(_THROUGH_STANDARD_LOGGING)


def _json(event: dict[str, Any], **_options: Any) -> str:
    return orjson.dumps(event, default=str).decode()


def configure_logging(level: int | str = logging.DEBUG, *, json: bool = False, stream: TextIO | None = None) -> None:
    """Write agentfsm's events at ``level`` and above to ``stream`` (stderr by default), as key=value or JSON lines."""
    numeric = logging.getLevelName(level) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"Unknown logging level {level!r}; use a logging level such as 'DEBUG' or logging.INFO.")
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json)
        if json
        else structlog.processors.KeyValueRenderer(key_order=["level", "event"])
    )
    logger.route = structlog.wrap_logger(
        structlog.WriteLogger(stream or sys.stderr),
        processors=[structlog.processors.add_log_level, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
    ).bind()
    # The runtime asks this logger whether transitions are logged before it builds their events.
    stdlib_logger.setLevel(numeric)


def use_standard_logging() -> None:
    """Send agentfsm's events through the standard-library logger ``"agentfsm"`` again (the default)."""
    logger.route = _THROUGH_STANDARD_LOGGING
    stdlib_logger.setLevel(logging.NOTSET)
