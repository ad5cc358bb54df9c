"""The live view's stream: a run's stored events as Server-Sent Events, for its page to follow.

A store that keeps events (``record_events=True``, an ``EventStore``) holds what the runs of any
process emit. Each message's data is an event's ``stored_dict`` and its id the event's number, so
a reconnecting browser resumes after the last one it got (``Last-Event-ID``). After a run's last
event (``run_ended``) the stream ends with an ``end`` event, and the page stops listening.

A stored event that cannot be read back (damaged, or naming a class the allow-list refuses) is sent
as a ``problem`` event with its number as its id, saying why, and the stream goes on with the next:
the events before and after it reach the page. A finished run whose last stored event is such a
one ends its stream with ``end`` too, so its page does not reconnect for ever. A store that cannot
be read at all just now (locked, damaged) ends the stream with a ``problem`` event with no number:
the browser reconnects, and the stream goes on from its last event.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import orjson
from starlette.concurrency import run_in_threadpool

from agentfsm.errors import DeserializationError, SerializationError, SnapshotError
from agentfsm.events import stored_dict
from agentfsm.pauses import RunStatus
from agentfsm.serialization import dump_json

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from agentfsm.stores.base import EventStore

#: How often a live view's stream looks for new events in the store, how many it reads at once,
#: how long one stream lasts (then the browser opens the next, from the last event it got: a page
#: that stops waits for no stream longer than that), and after how long a quiet one sends a comment
#: (so that proxies keep it open). ``RETRY_MS`` is how soon the browser reconnects.
POLL_SECONDS = 0.2
EVENTS_PER_READ = 200
STREAM_SECONDS = 15.0
KEEPALIVE_SECONDS = 5.0
RETRY_MS = 500

#: The Server-Sent Event after a run's last one: the page stops listening.
_END = "event: end\ndata: {}\n\n"


async def event_stream(store: EventStore, run_id: str, after: int) -> AsyncIterator[str]:
    """The Server-Sent Events of the run's stored events numbered above ``after``, for ``STREAM_SECONDS``.

    It ends at the run's last event (``run_ended``), with an ``end`` event: at once when that
    is the event numbered ``after`` (a page drawn after the run ended, a browser reconnecting).
    An event that cannot be read is a ``problem`` event (see the module docstring).
    """
    yield f"retry: {RETRY_MS}\n\n"
    last = await run_in_threadpool(_last_event, store, run_id, after) if after else "readable"
    if last == "run_ended":
        yield _END
        return
    unreadable = last == "unreadable"  # the newest event known cannot be read: it may have been the run's last
    started = time.monotonic()
    ends, heard, batch = started + STREAM_SECONDS, started, EVENTS_PER_READ
    while time.monotonic() < ends:
        try:
            found = await run_in_threadpool(store.events, run_id, after, batch)
            messages = [f"id: {s.number}\ndata: {dump_json(stored_dict(s.event)).decode()}\n\n" for s in found]
        except (DeserializationError, SerializationError) as exc:
            if batch > 1:  # read one at a time: the events before the one that cannot be read go out
                batch = 1
                continue
            after, heard, batch, unreadable = after + 1, time.monotonic(), EVENTS_PER_READ, True
            yield f"id: {after}\nevent: problem\ndata: {orjson.dumps({'number': after, 'error': str(exc)}).decode()}\n\n"
            continue
        except SnapshotError as exc:  # the store cannot be read now (locked, damaged): the browser comes back
            yield f"event: problem\ndata: {orjson.dumps({'number': None, 'error': str(exc)}).decode()}\n\n"
            return
        if found:
            after, heard, batch, unreadable = found[-1].number, time.monotonic(), EVENTS_PER_READ, False
            yield "".join(messages)
            if found[-1].event.kind == "run_ended":  # its last: the browser stops listening
                yield _END
                return
            if len(found) == batch:
                continue  # more are waiting
        elif unreadable and await run_in_threadpool(_finished, store, run_id):
            yield _END  # a finished run whose last event cannot be read: nothing more will come
            return
        elif time.monotonic() - heard > KEEPALIVE_SECONDS:
            heard = time.monotonic()
            yield ": no new events\n\n"
        await asyncio.sleep(POLL_SECONDS)


def _last_event(store: EventStore, run_id: str, number: int) -> str:
    """What the run's event ``number`` is: ``"run_ended"`` (its last), ``"readable"`` (another), or ``"unreadable"``."""
    try:
        found = store.events(run_id, number - 1, 1)
    except (DeserializationError, SerializationError, SnapshotError):
        return "unreadable"
    return "run_ended" if found and found[0].number == number and found[0].event.kind == "run_ended" else "readable"


def _finished(store: EventStore, run_id: str) -> bool:
    """Whether the store says the run is done or failed (a store that lists no runs says nothing)."""
    runs = getattr(store, "runs", None)
    if not callable(runs):
        return False
    try:
        return any(r.run_id == run_id and r.status in (RunStatus.DONE, RunStatus.FAILED) for r in runs())
    except (DeserializationError, SnapshotError):
        return False
