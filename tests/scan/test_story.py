"""What a watching scanner tells its log at the default level (story.py): the start-up line,
each device change in words (added, re-enumerated, re-enumerating, hold expired), each write
with the labels it added and removed, nothing for a rescan that finds nothing new, and a
warning every scan repeats said once while it lasts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixturegen import HostBuilder
from tests.helpers import untimed, wait_until
from tests.scan.live import CORAL_RUNTIME

from .process import scan_proc, stop


def test_default_log_tells_the_story_and_a_steady_state_is_silent(
    host: Path, tmp_path: Path
) -> None:
    """Issue 25 item 1: at the default level a watching scanner said nothing when a device
    came, went or re-enumerated. Now: the start-up line, each device change, each write with
    its label counts; a rescan that finds nothing new says nothing."""
    features = tmp_path / "features.d"
    features.mkdir(exist_ok=True)  # a producer makes no features.d
    proc = scan_proc("--watch", "--host-root", str(host), "--features-dir", str(features),
                     "--hold", "0.5s", "--rescan-interval", "0.5s")  # fmt: skip
    f = features / "usb-scan"

    def wait_file(pred: Callable[[str], bool]) -> None:
        deadline = time.monotonic() + 20
        while not (f.exists() and pred(f.read_text())) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f.exists() and pred(f.read_text())

    try:
        wait_file(lambda t: "edgefd.io/edgetpu.count=1" in t)
        time.sleep(1.0)  # a few rescans with nothing new
        b = HostBuilder(host)
        b.remove_usb("2-1")  # the Coral boots into its runtime IDs at the same port
        b.add_usb({**CORAL_RUNTIME, "port": "2-1"})
        wait_file(lambda t: "usb-ff_18d1_9302" in t and "usb-fe_1a6e_089a" not in t)
        b.remove_usb("1-1.1")  # the NCS2 is unplugged: its labels go when the hold ends
        wait_file(lambda t: "edgefd.io/myriadx" not in t)
        time.sleep(0.3)
    finally:
        _, err = stop(proc)
    err = untimed(err)
    lines = err.splitlines()
    assert lines[0].startswith("usb-scan: INFO: edgefd ") and " starting, mode watch: " in lines[0]
    assert "producers=usb-scan, host-root=" in lines[0] and "hold=500ms" in lines[0], lines[0]
    assert f"usb-scan: INFO: wrote {f}: " in err
    assert "device coral-usb-2-1: added: coral-usb (boot) at port 2-1" in err, err
    # the devplugin's words for the same event (issue 32 item 2)
    assert "device coral-usb-2-1: re-enumerated (boot -> runtime) at port 2-1" in err, err
    # an NCS2 in its boot state that vanishes is most likely loading its firmware, until the
    # hold ends
    assert "device ncs2-1-1-1: re-enumerating at port 1-1.1" in err, err
    assert "device ncs2-1-1-1: hold expired, its labels go (last seen at port 1-1.1)" in err, err
    removed = [ln for ln in lines if "-edgefd.io/myriadx.present" in ln]
    assert len(removed) == 1 and " removed (" in removed[0], err
    assert all(": INFO: " in ln or ": WARNING: " in ln for ln in lines), err
    assert lines[-1] == "usb-scan: INFO: stopping"
    # nothing repeats: no line twice, although the bus was rescanned every 0.5 s
    assert len(lines) == len(set(lines)), err


def test_a_repeated_scan_warning_is_said_once(tmp_path: Path, caplog: Any) -> None:
    from edgefd.scan.story import Warnings

    w = Warnings()
    assert w.new(["a", "b", "a"]) == ["a", "b"]
    assert w.new(["a", "b"]) == []
    assert w.new(["b"]) == []
    assert w.new(["a", "b"]) == ["a"]  # gone and back: said again


def test_json_log_lines_carry_the_device_and_label_fields(host: Path, tmp_path: Path) -> None:
    """Issue 32 item 2: `--log-format json`: one object per line, the start-up and stopping
    lines marked, each device line with its device, event and place, each write with its
    producer and labels; `--log-level warning` then hides all of it (a healthy run)."""
    import json

    features = tmp_path / "features.d"
    features.mkdir()  # the pod's emptyDir: a producer makes no features.d
    common = ["--watch", "--host-root", str(host), "--features-dir", str(features)]
    proc = scan_proc(*common, "--log-format", "json", "--hold", "0.3s")
    f = features / "usb-scan"
    try:
        wait_until(lambda: f.exists() and "edgefd.io/edgetpu.count=1" in f.read_text(), 20)
        HostBuilder(host).remove_usb("2-1")
        wait_until(lambda: "edgefd.io/edgetpu.count" not in f.read_text(), 20)
        time.sleep(0.3)  # the write's log line follows the file
    finally:
        _, err = stop(proc)
    objs = [json.loads(ln) for ln in err.splitlines()]
    assert all(o["tool"] == "usb-scan" and o["level"] == "info" for o in objs), err
    assert objs[0].get("event") == "start" and "starting, mode watch" in objs[0]["msg"], err
    assert [o.get("event") for o in objs].count("stop") == 1, err
    coral = [o for o in objs if o.get("device") == "coral-usb-2-1"]
    assert [o["event"] for o in coral] == ["added", "gone", "removed"], coral
    assert coral[0]["place"] == "port 2-1" and coral[0]["state"] == "boot"
    writes = [o for o in objs if o.get("producer") == "usb-scan"]
    assert writes[0]["labels"]["edgefd.io/edgetpu.count"] == "1"
    assert "edgefd.io/edgetpu.count" in writes[-1]["removed"]

    proc = scan_proc(*common, "--log-level", "warning")
    try:
        time.sleep(1.5)
    finally:
        _, err = stop(proc)
    assert err == ""
