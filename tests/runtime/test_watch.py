"""The one Watcher (edgefd.runtime.watch): it sees bus listings change (inotify on a fixture tree,
polling without it, uevents on real sysfs, under umockdev), debounces bursts, rescans
periodically and stops its thread; in an ordinary directory it reports each name changed (an
atomic rename, an edit, a delete), watches a directory created late once it exists, and with
no debounce reports at once. (usb-scan --watch rewriting its file within a second is
tests/scan/test_producer.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from edgefd.runtime.watch import Debouncer, Watcher
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import seconds_until

REPO = Path(__file__).resolve().parents[2]
CORAL = {
    "port": "2-2",
    "vendor": "18d1",
    "product": "9302",
    "class": "00",
    "interfaces": [{"class": "ff", "subclass": "ff", "protocol": "ff"}],
}


@pytest.mark.parametrize("use_inotify", [True, False])
def test_reenumeration_same_port_is_noticed(tmp_path: Path, use_inotify: bool) -> None:
    """A Coral switching from boot to runtime IDs keeps its port name (2-1).

    On real sysfs (kernfs) a re-created entry always has a new inode number, so even an
    instant swap changes the listing; a fixture filesystem may reuse the freed inode at
    once, so here the device is gone for one poll period, as a real re-enumeration is
    (the disconnect and the reconnect are separate events)."""
    root = build_host("rpi4-coral", tmp_path, devicetree=False)
    calls: list[frozenset[str]] = []
    bus = root / "sys/bus/usb/devices"
    w = Watcher(calls.append, [bus], poll_interval=0.1, use_inotify=use_inotify)
    with w:
        assert w.mode == ("inotify" if use_inotify else "poll")
        b = HostBuilder(root)
        b.remove_usb("2-1")
        time.sleep(0.25)
        b.add_usb({**CORAL, "port": "2-1"})
        assert seconds_until(lambda: any("2-1" in c for c in calls), 1.0) is not None


def test_burst_is_debounced(tmp_path: Path) -> None:
    root = build_host("rpi4-coral", tmp_path, devicetree=False)
    calls: list[frozenset[str]] = []
    w = Watcher(calls.append, [root / "sys/bus/usb/devices"], poll_interval=0.05,
                debounce=0.3, max_delay=0.9)  # fmt: skip
    with w:
        b = HostBuilder(root)
        for i in range(5):
            b.add_usb({**CORAL, "port": f"3-{1 + i}"})
            time.sleep(0.06)
        time.sleep(1.2)
    assert 1 <= len(calls) <= 2
    assert set().union(*calls) >= {f"3-{1 + i}" for i in range(5)}


def test_periodic_rescan_and_stop(tmp_path: Path) -> None:
    calls: list[frozenset[str]] = []
    w = Watcher(calls.append, [tmp_path], rescan_interval=0.2, name="hotplug-test")
    w.start()
    time.sleep(0.7)
    w.stop()
    n = len(calls)
    assert n >= 2 and all(c == frozenset() for c in calls)  # "anything may have changed"
    time.sleep(0.3)
    assert len(calls) == n
    assert not any(t.name == "hotplug-test" for t in threading.enumerate())


# --------------------------------------------------------------------------- umockdev

UMOCKDEV_HELPER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    import gi
    gi.require_version("UMockdev", "1.0")
    from gi.repository import UMockdev

    tb = UMockdev.Testbed.new()
    env = dict(os.environ, UMOCKDEV_DIR=tb.get_root_dir())
    child = subprocess.Popen([sys.argv[1], "-c", sys.argv[2]], env=env, cwd=sys.argv[3],
                             stdout=subprocess.PIPE, text=True)
    print("child:", child.stdout.readline().strip(), flush=True)
    time.sleep(0.3)
    sp = tb.add_device("usb", "usb2/2-1", None,
                        ["idVendor", "18d1", "idProduct", "9302", "bDeviceClass", "00"],
                        ["DEVTYPE", "usb_device"])
    t0 = time.monotonic()
    tb.uevent(sp, "add")
    line = child.stdout.readline().strip()
    print("child:", line, "after %.3f s" % (time.monotonic() - t0), flush=True)
    child.terminate()
    child.wait(5)
    """
)

UMOCKDEV_CHILD = textwrap.dedent(
    """
    import sys, threading
    from edgefd.runtime.watch import Debouncer, Watcher
    got = threading.Event()
    w = Watcher(lambda names: got.set(), ["/sys/bus/usb/devices"], uevent_subsystems=["usb"],
                poll_interval=3600, use_uevents=True, uevent_source="udev")
    w.start()
    print("mode=" + w.mode.split("+")[0], flush=True)
    print("event" if got.wait(5) else "no-event", flush=True)
    w.stop()
    """
)


# scripts/bootstrap installs these (scripts/lib/packages, pkgs_hotplug): never skip on their absence
UMOCKDEV = "umockdev (Debian: umockdev gir1.2-umockdev-1.0 python3-gi; run scripts/bootstrap)"


def test_pyudev_monitor_under_umockdev() -> None:
    if not shutil.which("umockdev-wrapper") or not Path("/usr/bin/python3").exists():
        pytest.fail(f"{UMOCKDEV} not installed", pytrace=False)
    check = subprocess.run(
        ["/usr/bin/python3", "-c", "import gi; gi.require_version('UMockdev', '1.0')"],
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        pytest.fail(
            f"UMockdev not importable by /usr/bin/python3: {check.stderr.strip()} ({UMOCKDEV})",
            pytrace=False,
        )
    res = subprocess.run(
        ["umockdev-wrapper", "/usr/bin/python3", "-c", UMOCKDEV_HELPER, sys.executable,
         UMOCKDEV_CHILD, str(REPO)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip
    assert "child: mode=uevent" in res.stdout, res.stdout + res.stderr
    assert "child: event" in res.stdout, res.stdout + res.stderr


# --------------------------------------------------------------------------- directories


def wait_call(calls: list[frozenset[str]], n: int, timeout: float = 2.0) -> bool:
    return seconds_until(lambda: len(calls) >= n, timeout) is not None


@pytest.mark.parametrize("use_inotify", [True, False])
def test_directory_atomic_rename_edit_and_delete(tmp_path: Path, use_inotify: bool) -> None:
    calls: list[frozenset[str]] = []
    w = Watcher(calls.append, [tmp_path], poll_interval=0.05, debounce=0.05,
                use_inotify=use_inotify)  # fmt: skip
    with w:
        assert w.mode == ("inotify" if use_inotify else "poll")
        time.sleep(0.2)
        assert calls == []
        tmp = tmp_path / ".usb.tmp"
        tmp.write_text("a/b=1\n")
        os.replace(tmp, tmp_path / "usb")
        assert wait_call(calls, 1) and "usb" in calls[-1]
        time.sleep(0.1)
        (tmp_path / "usb").write_text("a/b=2\n")
        assert wait_call(calls, 2) and "usb" in calls[-1]
        time.sleep(0.1)
        (tmp_path / "usb").unlink()
        assert wait_call(calls, 3) and "usb" in calls[-1]
        time.sleep(0.3)
        assert len(calls) == 3


def test_directory_created_late_is_watched_once_it_exists(tmp_path: Path) -> None:
    d = tmp_path / "features.d"
    calls: list[frozenset[str]] = []
    with Watcher(calls.append, [d], poll_interval=0.05, debounce=0.05) as w:
        assert w.mode == "poll"
        d.mkdir()
        assert wait_call(calls, 1)
        assert seconds_until(lambda: w.mode == "inotify", 1.0) is not None
        (d / "x").write_text("a/b=1\n")
        assert wait_call(calls, 2) and "x" in calls[-1]
        # removed and created again: back to polling, then watched anew
        shutil.rmtree(d)
        assert wait_call(calls, 3)
        d.mkdir()
        (d / "y").write_text("a/b=1\n")
        assert seconds_until(lambda: any("y" in c for c in calls) or calls[-1] == frozenset(), 2.0)


def test_no_debounce_reports_each_name_at_once(tmp_path: Path) -> None:
    calls: list[frozenset[str]] = []
    with Watcher(calls.append, [tmp_path], debounce=0.0, max_delay=0.0):
        (tmp_path / "kubelet.sock").write_text("")
        t = seconds_until(lambda: any("kubelet.sock" in c for c in calls), 1.0)
        assert t is not None and t < 0.2


def test_debouncer_quiet_window_and_latency_cap():
    d = Debouncer(quiet=0.1, max_latency=0.5)
    assert not d.due(0.0) and d.deadline() is None
    d.event(1.0)
    assert d.deadline() == pytest.approx(1.1)
    assert not d.due(1.05) and d.due(1.1)
    # a steady trickle every 50 ms keeps postponing, but never past first + max_latency
    for i in range(1, 20):
        d.event(1.0 + i * 0.05)
    assert d.deadline() == pytest.approx(1.5)
    d.reset()
    assert not d.pending
