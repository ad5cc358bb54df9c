"""The live view's stream: a run's stored events as Server-Sent Events, for its page to follow.

A store that keeps events (``record_events=True``, an ``EventStore``) holds what the runs of any
process emit. Each message's data is an event's ``stored_dict`` and its id the event's number, so
a reconnecting browser resumes after the last one it got (``Last-Event-ID``). After a run's last
event (``run_ended``) the stream ends with an ``end`` event, and the page stops listening.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import orjson
from starlette.concurrency import run_in_threadpool

from agentfsm.errors import DeserializationError, SerializationError, SnapshotError
from agentfsm.events import stored_dict
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
    """
    yield f"retry: {RETRY_MS}\n\n"
    if after and await run_in_threadpool(_ended_with, store, run_id, after):
        yield _END
        return
    started = time.monotonic()
    ends, heard, batch = started + STREAM_SECONDS, started, EVENTS_PER_READ
    while time.monotonic() < ends:
        try:
            found = await run_in_threadpool(store.events, run_id, after, batch)
            messages = [f"id: {s.number}\ndata: {dump_json(stored_dict(s.event)).decode()}\n\n" for s in found]
        except (DeserializationError, SerializationError, SnapshotError) as exc:
            if batch > 1:  # read one at a time: the events before the one that cannot be read go out
                batch = 1
                continue
            yield f"event: problem\ndata: {orjson.dumps({'error': str(exc)}).decode()}\n\n"
            return
        if found:
            after, heard = found[-1].number, time.monotonic()
            yield "".join(messages)
            if found[-1].event.kind == "run_ended":  # its last: the browser stops listening
                yield _END
                return
            if len(found) == batch:
                continue  # more are waiting
        elif time.monotonic() - heard > KEEPALIVE_SECONDS:
            heard = time.monotonic()
            yield ": no new events\n\n"
        await asyncio.sleep(POLL_SECONDS)


def _ended_with(store: EventStore, run_id: str, number: int) -> bool:
    """Whether the run's event ``number`` is its last (``run_ended``); an event that cannot be read is not."""
    try:
        found = store.events(run_id, number - 1, 1)
    except (DeserializationError, SerializationError, SnapshotError):
        return False  # the stream reads it again, and says why it cannot
    return bool(found) and found[0].number == number and found[0].event.kind == "run_ended"
