"""A failed reload shows where an operator looks (issue 32 item 1): /readyz keeps answering
ready but names the reason, the series count failures, date the last success and say whether
the configuration in use is the file's (the state an alert holds), the tool's notice is left
for feature-sink to post as a Warning Event, and a success clears it all."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.core.notices import Notice, NoticeBoard, read_notices
from edgefd.runtime.metrics import Metrics
from edgefd.runtime.reloads import (
    EVENT_REASON,
    FAILURES,
    LAST_SUCCESS,
    SUCCESSFUL,
    ReloadStatus,
)


def test_a_failed_reload_is_ready_with_its_reason_counted_and_dated() -> None:
    m, now = Metrics(), [1000.0]
    status = ReloadStatus(m, clock=lambda: now[0])
    assert status.ready() == (True, "ok")
    assert m.value(LAST_SUCCESS) == 1000.0  # the configuration loaded at start counts
    assert m.value(SUCCESSFUL) == 1
    now[0] = 2000.0
    status.failed("c.yaml:4:4: did not find expected '-' indicator")
    ok, why = status.ready()
    assert ok and "configuration reload failed: c.yaml:4:4: did not find" in why
    assert "the configuration in use is kept" in why
    assert m.value(FAILURES) == 1 and m.value(LAST_SUCCESS) == 1000.0
    assert m.value(SUCCESSFUL) == 0  # for as long as the failed one is kept from use
    status.failed("c.yaml: again")
    assert m.value(FAILURES) == 2 and m.value(SUCCESSFUL) == 0
    status.succeeded()
    assert status.ready() == (True, "ok") and m.value(LAST_SUCCESS) == 2000.0
    assert m.value(FAILURES) == 2  # a counter: it says that failures happened, not the state
    assert m.value(SUCCESSFUL) == 1


def test_a_failed_reload_is_the_tools_notice_until_a_reload_succeeds(tmp_path: Path) -> None:
    """The tool writes into its own directory; the sink reads it as that writer's."""
    (tmp_path / "devplugin").mkdir()
    board = NoticeBoard(tmp_path / "devplugin", "devplugin")
    board.post(EVENT_REASON, "left by the run before")
    status = ReloadStatus(None, board)  # a fresh start loaded the file: nothing to tell
    assert read_notices(tmp_path) == ((), ())
    status.failed("c.yaml:4:4: did not find expected '-' indicator")
    notices, warnings = read_notices(tmp_path)
    assert warnings == ()
    assert notices == (
        Notice(
            "devplugin",
            EVENT_REASON,
            "configuration reload failed: c.yaml:4:4: did not find expected '-' indicator; "
            "kept the one in use",
        ),
    )
    status.succeeded()
    assert read_notices(tmp_path) == ((), ())


def test_a_notice_that_cannot_be_written_is_said_and_the_reload_still_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    m = Metrics()
    (tmp_path / "not-a-dir").write_text("")
    status = ReloadStatus(m, NoticeBoard(tmp_path / "not-a-dir", "usb-scan"))
    status.failed("bad")  # never raises: the log, /readyz and the metric still say it
    assert status.failure == "bad" and m.value(FAILURES) == 1
    assert "could not write the notice" in caplog.text


def test_an_unreadable_file_clears_its_notice_once_readable_again(tmp_path: Path) -> None:
    (tmp_path / "bus-scan").mkdir()
    status = ReloadStatus(None, NoticeBoard(tmp_path / "bus-scan", "usb-scan"))
    status.unreadable("/c/nfd-worker.conf: a FIFO, not a regular file")
    assert [n.writer for n in read_notices(tmp_path)[0]] == ["bus-scan"]
    status.unreadable("")
    assert read_notices(tmp_path) == ((), ())


def test_an_unreadable_file_degrades_until_readable_again_but_not_over_a_bad_config() -> None:
    m = Metrics()
    status = ReloadStatus(m)
    status.unreadable("/c/resources.yaml: a FIFO, not a regular file")
    assert "a FIFO" in status.ready()[1] and m.value(FAILURES) == 1
    assert m.value(SUCCESSFUL) == 0
    status.unreadable("")  # the same bytes as in use again: nothing pending
    assert status.ready() == (True, "ok") and m.value(SUCCESSFUL) == 1
    status.failed("c.yaml: not valid YAML")
    status.unreadable("")  # does not hide a bad configuration read since
    assert "not valid YAML" in status.ready()[1] and m.value(SUCCESSFUL) == 0
