"""The stream cap both front-ends' watch streams share (streamcap.py): at most `limit` open,
a refusal beyond it that frees nothing and counts nothing, room again once one ends, and the
refusal logged once per time the cap is reached, not once per refused call. Over real gRPC
servers: tests/devplugin/v1beta1/test_server.py (ListAndWatch) and
tests/devplugin/dra/test_health.py (NodeWatchResources)."""

from __future__ import annotations

import logging
import threading

import pytest

from edgefd.devplugin.streamcap import StreamCap


def test_at_most_the_limit_and_room_again_once_one_ends(caplog: pytest.LogCaptureFixture) -> None:
    cap = StreamCap(2, "r: Watch")
    assert cap.enter() and cap.enter()
    with caplog.at_level(logging.WARNING):
        assert [cap.enter() for _ in range(50)] == [False] * 50
    assert cap.open == 2
    assert cap.refusal == "r: Watch: 2 streams are open already"
    assert len(caplog.records) == 1  # a client looping on the call does not flood the log
    cap.leave()
    assert cap.open == 1 and cap.enter() and not cap.enter()
    assert len(caplog.records) == 2  # reached again: said again


def test_threads_racing_never_pass_the_limit() -> None:
    cap = StreamCap(5, "w")
    got: list[bool] = []
    lock = threading.Lock()
    barrier = threading.Barrier(20)

    def one() -> None:
        barrier.wait()
        ok = cap.enter()
        with lock:
            got.append(ok)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert got.count(True) == 5 and cap.open == 5


def test_a_cap_needs_room_for_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StreamCap(0, "w")
