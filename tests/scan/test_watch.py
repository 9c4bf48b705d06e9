"""`usb-scan --watch` as the pod runs it: both buses from one process (`--also pci-scan`),
/readyz only after both files were written, every new file version on stdout with --dry-run
(for pipelines), how changes are seen in --output json, and a host that cannot be read keeping
the last files."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.core.publish import Publisher
from edgefd.scan.session import Producer, ScanSession
from tests.configmap import ConfigMapVolume
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import free_port, wait_until
from tests.scan.live import CORAL_RUNTIME

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "host", devicetree=False)


def scan_proc(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "edgefd.usb_scan", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return out, err


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


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


def test_one_process_two_files_and_readiness(host: Path, tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    port = free_port()
    proc = scan_proc("--watch", "--also", "pci-scan", "--host-root", str(host),
                     "--features-dir", str(features), "--listen", f"127.0.0.1:{port}")  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while readyz(port)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        code, body = readyz(port)
        assert code == 200 and body.startswith("ok (usb-scan, pci-scan; inotify)"), body
        assert {p.name for p in features.iterdir()} == {"usb-scan", "pci-scan"}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            metrics = r.read().decode()
        assert 'edgefd_watch_mode{component="inventory",mode="inotify"} 1.0' in metrics
        assert 'edgefd_scan_writes_total{producer="pci-scan"} 1.0' in metrics
    finally:
        stop(proc)


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


def test_unreadable_host_keeps_the_last_files(host: Path, tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    proc = scan_proc("--watch", "--host-root", str(host), "--features-dir", str(features),
                     "--rescan-interval", "0.5s")  # fmt: skip
    try:
        f = features / "usb-scan"
        deadline = time.monotonic() + 20
        while not f.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        before = f.read_text()
        bus = host / "sys/bus/usb/devices"
        os.rename(bus, host / "sys/bus/usb/gone")
        bus.write_text("not a directory\n")  # the bus can no longer be listed
        time.sleep(1.5)
        assert f.read_text() == before
    finally:
        _, err = stop(proc)
    assert "cannot list /sys/bus/usb/devices" in err and "keeping the last snapshot" in err


def test_default_log_tells_the_story_and_a_steady_state_is_silent(
    host: Path, tmp_path: Path
) -> None:
    """Issue 25 item 1: at the default level a watching scanner said nothing when a device
    came, went or re-enumerated. Now: the start-up line, each device change, each write with
    its label counts; a rescan that finds nothing new says nothing."""
    features = tmp_path / "features.d"
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
    lines = err.splitlines()
    assert lines[0].startswith("usb-scan: INFO: edgefd ") and " starting, mode watch: " in lines[0]
    assert "producers=usb-scan, host-root=" in lines[0] and "hold=0.5s" in lines[0], lines[0]
    assert f"usb-scan: INFO: wrote {f}: " in err
    assert "device coral-usb-2-1: added, coral-usb (boot) at port 2-1" in err, err
    assert "device coral-usb-2-1: re-enumerated (boot -> runtime)" in err, err
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


def test_a_configmap_update_of_the_nfd_config_relabels_without_a_restart(
    host: Path, tmp_path: Path
) -> None:
    """Issue 25 item 4, for the scanners' mounted --config: the kubelet swaps `..data`; the
    labels follow the new settings (here: HID class 03 whitelisted), with no restart."""
    conf = "sources:\n  usb:\n    deviceClassWhitelist: [{classes}]\n"
    vol = ConfigMapVolume(tmp_path / "config", {"nfd-worker.conf": conf.format(classes='"fe"')})
    features = tmp_path / "features.d"
    proc = scan_proc("--watch", "--host-root", str(host), "--features-dir", str(features),
                     "--config", str(vol.path("nfd-worker.conf")))  # fmt: skip
    f = features / "usb-scan"
    try:
        wait_until(lambda: f.exists() and "usb-fe_1a6e_089a" in f.read_text(), 20)
        assert "usb-03_046d_c31c" not in f.read_text()
        vol.update({"nfd-worker.conf": conf.format(classes='"fe", "03"')})
        wait_until(lambda: "usb-03_046d_c31c.present=true" in f.read_text(), 10)
        vol.update({"nfd-worker.conf": "sources: [not, a, mapping]\n"})  # a bad edit: kept
        time.sleep(1.5)
        assert "usb-03_046d_c31c.present=true" in f.read_text()
    finally:
        _, err = stop(proc)
    assert f"usb-scan: INFO: {vol.path('nfd-worker.conf')} changed" in err, err
    assert "usb-scan: INFO: configuration reloaded from " in err, err
    assert "keeping the configuration in use" in err, err
