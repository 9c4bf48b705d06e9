"""A failed reload shows where an operator looks (issue 32 item 1): /readyz keeps answering
ready but names the reason, the two series count failures and date the last success, a
Warning Event is asked for where the tool can post one, and a success clears it all."""

from __future__ import annotations

import pytest

from edgefd.runtime.metrics import Metrics
from edgefd.runtime.reloads import EVENT_REASON, FAILURES, LAST_SUCCESS, ReloadStatus


def test_a_failed_reload_is_ready_with_its_reason_counted_and_dated() -> None:
    m, now = Metrics(), [1000.0]
    status = ReloadStatus(m, clock=lambda: now[0])
    assert status.ready() == (True, "ok")
    assert m.value(LAST_SUCCESS) == 1000.0  # the configuration loaded at start counts
    now[0] = 2000.0
    status.failed("c.yaml:4:4: did not find expected '-' indicator")
    ok, why = status.ready()
    assert ok and "configuration reload failed: c.yaml:4:4: did not find" in why
    assert "the configuration in use is kept" in why
    assert m.value(FAILURES) == 1 and m.value(LAST_SUCCESS) == 1000.0
    status.succeeded()
    assert status.ready() == (True, "ok") and m.value(LAST_SUCCESS) == 2000.0
    assert m.value(FAILURES) == 1  # a counter: alerts use increase()


def test_a_failed_reload_asks_for_a_warning_event_and_survives_a_refused_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    posted: list[tuple[str, str]] = []
    ReloadStatus(None, warn=lambda reason, msg: posted.append((reason, msg))).failed("bad")
    assert posted == [(EVENT_REASON, "configuration reload failed: bad; kept the one in use")]

    def refused(reason: str, msg: str) -> None:
        raise RuntimeError("403 Forbidden")

    status = ReloadStatus(None, warn=refused)
    status.failed("bad")  # never raises: the log and /readyz still say it
    assert status.failure == "bad" and "could not post the ConfigReloadFailed event" in caplog.text


def test_an_unreadable_file_degrades_until_readable_again_but_not_over_a_bad_config() -> None:
    m = Metrics()
    status = ReloadStatus(m)
    status.unreadable("/c/resources.yaml: a FIFO, not a regular file")
    assert "a FIFO" in status.ready()[1] and m.value(FAILURES) == 1
    status.unreadable("")  # the same bytes as in use again: nothing pending
    assert status.ready() == (True, "ok")
    status.failed("c.yaml: not valid YAML")
    status.unreadable("")  # does not hide a bad configuration read since
    assert "not valid YAML" in status.ready()[1]
