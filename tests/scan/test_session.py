"""The scan session (session.py), the scanners' subscriber of the inventory: ready only once
every producer's file was written; with --watch --dry-run each new file version on stdout,
once; with --output json each document says how changes are seen."""

from __future__ import annotations

import json
import os
import select
import time
from pathlib import Path

from edgefd.core.hostroot import HostRoot
from edgefd.core.publish import Publisher
from edgefd.scan.session import Producer, ScanSession
from tests.fixturegen import HostBuilder
from tests.scan.live import CORAL_RUNTIME

from .process import scan_proc, stop


def test_ready_only_once_every_file_was_written(tmp_path: Path) -> None:
    from edgefd.pci_scan.labels import SPEC as PCI
    from edgefd.usb_scan.labels import SPEC as USB

    producers = [
        Producer(s, None, [], Publisher(tmp_path, s.producer, False))  # type: ignore[arg-type]
        for s in (USB, PCI)
    ]
    session = ScanSession(HostRoot.of(tmp_path), producers, None, ())
    ok, why = session.ready()
    assert not ok and why == "not written yet: usb-scan, pci-scan"
    producers[0].publisher.publish({})
    assert session.ready() == (False, "not written yet: pci-scan")


def test_watch_dry_run_streams_each_new_file_version(host: Path) -> None:
    """`usb-scan --watch --dry-run | ...`: each version as it would be written, once."""
    proc = scan_proc("--watch", "--dry-run", "--hold", "0", "--host-root", str(host))
    assert proc.stdout is not None
    buf = ""

    def read_until(needle: str, timeout: float = 10.0) -> str:
        nonlocal buf
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        while needle not in buf and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                buf += os.read(fd, 65536).decode()
        assert needle in buf, buf
        return buf

    try:
        read_until("usb-fe_1a6e_089a")
        HostBuilder(host).add_usb({**CORAL_RUNTIME, "port": "2-2"})
        read_until("edgefd.io/edgetpu.count=2")
        time.sleep(0.5)
    finally:
        out, _ = stop(proc)
    text = buf + out
    versions = text.count("# written by usb-scan")
    assert versions == 2, text  # the first file, then the one with the second Coral


def test_watch_json_says_how_changes_are_seen(host: Path) -> None:
    proc = scan_proc("--watch", "--dry-run", "-o", "json", "--host-root", str(host))
    try:
        time.sleep(2.0)
    finally:
        out, _ = stop(proc)
    first = json.loads(out[: out.index("\n}\n") + 2])
    assert first["watch"] == {"mode": "inotify", "hold_seconds": 3.0, "held_devices": 0}


def test_a_bug_while_watching_is_logged_with_its_traceback_and_ends_the_run(
    tmp_path: Path, caplog
) -> None:
    """The runner ends a run whose component died of a bug with 70 and one line
    (edgefd.runtime.runner.died): the traceback is the component's to log, and this one did
    not (issue 30 item 2's runner change)."""
    import logging
    from types import SimpleNamespace

    from edgefd.runtime.runner import Lifeline
    from edgefd.scan.session import WatchContext

    lifeline = Lifeline()
    session = ScanSession(
        HostRoot.of(tmp_path), [], None, (), watch=WatchContext(inventory=None, lifeline=lifeline)
    )

    def broken(snap: object) -> None:
        raise RuntimeError("a bug")

    session._publish = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        session.on_snapshot(SimpleNamespace(diff=SimpleNamespace(changes=[])))  # type: ignore[arg-type]
    assert isinstance(lifeline.failure, RuntimeError)
    assert "publishing the labels died: a bug" in caplog.text and "Traceback" in caplog.text


def test_stopping_sends_the_trailing_event_still_due(tmp_path: Path) -> None:
    """A watch stopped right after a second change within NFD's tick: the trailing event
    (edgefd.core.nudge) goes out before the process ends, or NFD would keep the first."""
    from edgefd.core.nudge import Nudge
    from edgefd.usb_scan.labels import SPEC as USB

    sent: list[Path] = []
    nudge = Nudge(tick=0.05, margin=0.0, event=lambda p: sent.append(p) or True, threaded=False)
    pub = Publisher(tmp_path, USB.producer, False, nudge=nudge)
    session = ScanSession(HostRoot.of(tmp_path), [Producer(USB, None, [], pub)], None, ())  # type: ignore[arg-type]
    pub.publish({"a.io/x": "1"})
    pub.publish({"a.io/x": "2"})
    assert sent == []
    session.stop()
    assert sent == [tmp_path / USB.producer]
