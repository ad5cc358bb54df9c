"""Where each thread stands, and one run at a time on each."""

from __future__ import annotations

import pytest

from agentfsm._serving.threads import ThreadHead, ThreadRuns
from agentfsm.errors import ProtocolRequestError, ThreadBusyError


def test_a_thread_has_a_head_once_a_run_went_on_in_it() -> None:
    threads = ThreadRuns()
    assert threads.head("t1") is None
    threads.moved("t1", ThreadHead("r1", paused=True))
    assert threads.head("t1") == ThreadHead("r1", paused=True) and threads.head("t2") is None
    threads.moved("t1", None)
    assert threads.head("t1") is None


def test_a_second_run_on_a_thread_is_refused_while_the_first_goes_on() -> None:
    threads = ThreadRuns()
    with threads.running("t1"):
        with pytest.raises(ThreadBusyError, match="one thread, one timeline") as raised, threads.running("t1"):
            pass
        assert isinstance(raised.value, ProtocolRequestError)
        with threads.running("t2"):  # other threads are free
            pass
    with threads.running("t1"):  # and so is this one, once its run is over
        pass
