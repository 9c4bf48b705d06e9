"""The trailing event: sent a tick (and the margin) after a write that followed another change
of features.d by less than a tick, once, as an IN_ATTRIB that changes nothing; never in a
steady state. Decisions on a fake clock; one test lets the thread do it."""

from __future__ import annotations

import os
import select
import sys
import threading
from pathlib import Path

import pytest

from edgefd.core.nudge import Nudge, touch_attrib

OLD = 1_000_000.0  # a directory mtime long ago, on the fake wall clock's scale


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.fixture
def fdir(tmp_path: Path) -> Path:
    d = tmp_path / "features.d"
    d.mkdir()
    os.utime(d, (OLD, OLD))
    return d


def make(clock: Clock, sent: list[Path], wall: float = OLD + 3600) -> Nudge:
    def event(p: Path) -> bool:
        sent.append(p)
        return True

    return Nudge(clock=clock, wall=lambda: wall, event=event, threaded=False)


def test_a_lone_write_after_quiet_sends_nothing(fdir: Path) -> None:
    clock, sent = Clock(), []
    n = make(clock, sent)
    assert not n.recent(fdir)
    n.wrote(fdir / "usb-scan", False)
    assert n.next_due() is None
    clock.now += 10
    assert n.fire_due() == [] and sent == []


def test_a_second_write_within_the_tick_gets_one_trailing_event_after_it(fdir: Path) -> None:
    clock, sent = Clock(), []
    n = make(clock, sent)
    f = fdir / "usb-scan"
    n.wrote(f, n.recent(fdir))  # the plug
    clock.now += 0.3
    assert n.recent(fdir)  # inside the window the first write opened
    n.wrote(f, True)  # the re-enumeration
    assert n.next_due() == pytest.approx(1.2)
    clock.now += 1.19
    assert n.fire_due() == []
    clock.now += 0.01
    assert n.fire_due() == [f] and sent == [f]
    assert n.next_due() is None and n.sent == 1
    clock.now += 5
    assert n.fire_due() == [] and sent == [f]  # once


def test_a_write_a_tick_after_the_last_event_is_not_recent(fdir: Path) -> None:
    clock, sent = Clock(), []
    n = make(clock, sent)
    n.wrote(fdir / "a", False)
    clock.now += 1.21
    assert not n.recent(fdir)


def test_writes_in_a_row_coalesce_into_one_event_after_the_last(fdir: Path) -> None:
    clock, sent = Clock(), []
    n = make(clock, sent)
    f = fdir / "usb-scan"
    for _ in range(4):
        n.wrote(f, n.recent(fdir))
        clock.now += 0.5
    assert n.next_due() == pytest.approx(0.7)  # 1.2 after the fourth write
    clock.now += 0.7
    assert n.fire_due() == [f] and sent == [f]


def test_another_producers_rename_makes_a_write_recent(fdir: Path) -> None:
    """The directory's mtime: a rename by another process (or the staging directory made)."""
    clock, sent = Clock(), []
    os.utime(fdir, (OLD, OLD))
    assert make(clock, sent, wall=OLD + 0.5).recent(fdir)
    assert not make(clock, sent, wall=OLD + 1.3).recent(fdir)
    assert make(clock, sent, wall=OLD - 60).recent(fdir)  # the clock stepped back: one too many


def test_the_trailing_event_is_an_event_itself(fdir: Path) -> None:
    clock, sent = Clock(), []
    n = make(clock, sent)
    f = fdir / "usb-scan"
    n.wrote(f, False)
    clock.now += 0.3
    n.wrote(f, n.recent(fdir))
    clock.now += 1.2
    n.fire_due()
    clock.now += 0.5  # a write just after the trailing event falls in the window it opened
    assert n.recent(fdir)


def test_flush_waits_for_what_is_due_and_returns_at_once_otherwise(fdir: Path) -> None:
    clock, sent = Clock(), []
    n = make(clock, sent)
    n.flush(sleep=clock.sleep)
    assert clock.now == 100.0
    n.wrote(fdir / "a", True)
    n.flush(sleep=clock.sleep)
    assert sent == [fdir / "a"] and clock.now == pytest.approx(101.2)


def test_a_missing_file_is_no_event_and_no_error(fdir: Path) -> None:
    n = Nudge(clock=Clock(), threaded=False, margin=0.0, tick=0.0)
    n.wrote(fdir / "gone", True)
    assert n.fire_due() == [] and n.sent == 0


def test_touch_attrib_changes_nothing_but_the_ctime(fdir: Path) -> None:
    f = fdir / "usb-scan"
    f.write_bytes(b"a=1\n")
    f.chmod(0o640)
    os.utime(f, (OLD, OLD))
    before = f.stat()
    assert touch_attrib(f)
    after = f.stat()
    assert (after.st_mode, after.st_mtime, after.st_size) == (
        before.st_mode,
        before.st_mtime,
        before.st_size,
    )
    assert f.read_bytes() == b"a=1\n"


def test_touch_attrib_leaves_links_and_fifos_alone(fdir: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("x")
    target.chmod(0o600)
    (fdir / "link").symlink_to(target)
    os.mkfifo(fdir / "fifo")
    assert not touch_attrib(fdir / "link")
    assert not touch_attrib(fdir / "fifo")
    assert not touch_attrib(fdir / "missing")
    assert target.stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")
def test_touch_attrib_is_an_attrib_event_in_the_directory(fdir: Path) -> None:
    """IN_ATTRIB is fsnotify's Chmod, one of the ops nfd-worker's local source acts on."""
    from edgefd.runtime.inotify import IN_ATTRIB, Inotify

    f = fdir / "usb-scan"
    f.write_bytes(b"a=1\n")
    with Inotify() as ino:
        ino.add_watch(fdir, IN_ATTRIB)
        assert touch_attrib(f)
        ready, _, _ = select.select([ino.fileno()], [], [], 5)
        assert ready
        assert [(e.name, bool(e.mask & IN_ATTRIB)) for e in ino.read()] == [("usb-scan", True)]


def test_the_thread_sends_it_without_being_asked(fdir: Path) -> None:
    done = threading.Event()
    sent: list[Path] = []

    def event(p: Path) -> bool:
        sent.append(p)
        done.set()
        return True

    n = Nudge(tick=0.02, margin=0.0, event=event)
    n.wrote(fdir / "usb-scan", True)
    assert done.wait(5)
    assert sent == [fdir / "usb-scan"]


def test_flush_waits_for_an_event_another_thread_is_sending(tmp_path: Path) -> None:
    """The background thread takes a due event off the list, then sends it: a flush in between
    saw nothing due and let the process end before the event was sent (dt-labeller's trailing
    event, lost once in a loaded .ci/run). flush now waits for it."""
    started, release, sent = threading.Event(), threading.Event(), []

    def slow_event(p: Path) -> bool:
        started.set()
        release.wait(5)
        sent.append(p)
        return True

    n = Nudge(event=slow_event, threaded=False, clock=lambda: 100.0)
    n.wrote(tmp_path / "f", recent=True)
    n._due[tmp_path / "f"] = 0.0  # due now
    t = threading.Thread(target=n.fire_due)
    t.start()
    assert started.wait(5)
    done = threading.Event()
    flusher = threading.Thread(target=lambda: (n.flush(sleep=lambda s: None), done.set()))
    flusher.start()
    assert not done.wait(0.3) and sent == []  # still waiting for the event under way
    release.set()
    assert done.wait(5) and sent == [tmp_path / "f"]
    t.join(5)
    flusher.join(5)
