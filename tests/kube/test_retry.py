"""edgefd.kube.retry: the one way a loop that talks to the API server retries: a jittered,
capped exponential backoff, never sooner than the server's Retry-After, reset by a success;
said once per kind of failure and once when it ends (or not at all, for a caller that says it
in its own words), every retry counted. Pure units."""

from __future__ import annotations

import logging

import pytest

from edgefd.kube.errors import ApiUnreachable
from edgefd.kube.retry import Retry


def test_retry_backs_off_honours_retry_after_and_speaks_once(caplog: pytest.LogCaptureFixture):
    counted: list[str] = []
    r = Retry("watching node n1", initial=0.2, cap=4.0, on_retry=counted.append)
    with caplog.at_level(logging.DEBUG, logger="edgefd.kube.retry"):
        delays = [r.failed(ApiUnreachable("down"), "unreachable") for _ in range(8)]
        assert r.failed(ApiUnreachable("slow", retry_after=20.0), "unreachable") >= 20.0
        r.succeeded()
        again = r.failed(ApiUnreachable("down"), "unreachable")
    # jittered exponential: each delay within [d/2, d], d doubling from 0.2 up to the cap
    for i, d in enumerate(delays):
        base = min(4.0, 0.2 * 2**i)
        assert base / 2 <= d <= base
    assert 0.1 <= again <= 0.2  # reset by the success
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # once per kind of failure: the same kind with another message is not news
    assert warnings == [
        "watching node n1 failed (unreachable): down",
        "watching node n1 succeeded again after 9 failure(s)",
        "watching node n1 failed (unreachable): down",
    ]
    assert counted == ["unreachable"] * 10


def test_a_quiet_retry_says_nothing_but_backs_off_and_counts(caplog: pytest.LogCaptureFixture):
    """speak=False (the sink's loop reports its failures itself, with how long they lasted)."""
    counted: list[str] = []
    r = Retry("sync", initial=0.2, cap=4.0, on_retry=counted.append, speak=False)
    with caplog.at_level(logging.DEBUG, logger="edgefd.kube.retry"):
        first = r.failed(ApiUnreachable("down"), "unreachable")
        second = r.failed(ApiUnreachable("refused"), "refused")
        assert r.failing and r.last_reason == "refused" and r.last_error == "refused"
        r.succeeded()
    assert caplog.records == []
    assert 0.1 <= first <= 0.2 and 0.2 <= second <= 0.4
    assert counted == ["unreachable", "refused"] and not r.failing
