"""Stop requests from signals: a flag and a wake-up in the loop, and during start-up an
exception that ends whatever call is blocking (a FIFO's open, a read that never returns)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from edgefd.runtime.signals import Signals, StopDuringStartup


def _kill_soon(sig: int, after: float = 0.2) -> threading.Timer:
    t = threading.Timer(after, os.kill, (os.getpid(), sig))
    t.start()
    return t


def test_a_stop_signal_while_starting_ends_a_blocked_call() -> None:
    r, w = os.pipe()
    try:
        with Signals() as s:
            _kill_soon(signal.SIGTERM)
            t0 = time.monotonic()
            with pytest.raises(StopDuringStartup, match="SIGTERM"), s.starting():
                os.read(r, 1)  # nothing ever writes: only the signal ends this
            assert time.monotonic() - t0 < 5
            assert s.stop_requested
    finally:
        os.close(r)
        os.close(w)


def test_after_start_up_a_stop_signal_only_sets_the_flag() -> None:
    with Signals(reload=True) as s:
        with s.starting():
            pass
        _kill_soon(signal.SIGTERM, 0.05).join()
        s.wait(5)
        assert s.stop_requested
        # and a stop that came before start-up ends start-up before it begins
        with pytest.raises(StopDuringStartup), s.starting():
            raise AssertionError("not reached")


def test_sighup_while_starting_is_a_reload_not_a_stop() -> None:
    with Signals(reload=True) as s:
        with s.starting():
            _kill_soon(signal.SIGHUP, 0.05).join()
            time.sleep(0.05)
        assert s.take_reload() and not s.stop_requested


def test_a_stop_signal_another_thread_receives_wakes_the_loop_at_once() -> None:
    """The kernel may deliver SIGTERM to any thread; Python runs its handler in the main thread
    only, so a main thread asleep in wait() slept on (a keeper with gRPC threads ignored its
    stop for good, one run in three): the interpreter's own handler now wakes it."""
    with Signals() as s:
        with s.starting():
            pass
        t = threading.Timer(0.1, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGTERM))
        t.start()
        t0 = time.monotonic()
        s.wait(20)
        took = time.monotonic() - t0
        t.join()
        assert took < 10, f"the loop slept {took:.1f} s through a stop"
        assert s.stop_requested
