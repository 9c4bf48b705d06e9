"""The body of a bus scanner (producer.py) with --watch, as the pod runs it: one process for
both buses (`--also pci-scan`) writing both files, /readyz and /metrics; a device change
rewritten within a second; a host that cannot be read keeping the last files; and a
ConfigMap update of the NFD config relabelling without a restart (a bad edit kept out)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.configmap import ConfigMapVolume
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import feature_files, free_port, seconds_until, wait_until

from .process import ROOT, readyz, scan_proc, stop

# the Coral with its runtime IDs, as it comes back after loading its firmware
CORAL = {
    "port": "2-2",
    "vendor": "18d1",
    "product": "9302",
    "class": "00",
    "interfaces": [{"class": "ff", "subclass": "ff", "protocol": "ff"}],
}


def read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_one_process_two_files_and_readiness(host: Path, tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir(exist_ok=True)  # a producer makes no features.d
    port = free_port()
    proc = scan_proc("--watch", "--also", "pci-scan", "--host-root", str(host),
                     "--features-dir", str(features), "--listen", f"127.0.0.1:{port}")  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while readyz(port)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        code, body = readyz(port)
        assert code == 200 and body.startswith("ok (usb-scan, pci-scan; inotify)"), body
        assert feature_files(features) == ["pci-scan", "usb-scan"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            metrics = r.read().decode()
        assert 'edgefd_watch_mode{component="inventory",mode="inotify"} 1.0' in metrics
        assert 'edgefd_scan_writes_total{producer="pci-scan"} 1.0' in metrics
    finally:
        stop(proc)


def test_unreadable_host_keeps_the_last_files(host: Path, tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir(exist_ok=True)  # a producer makes no features.d
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


def test_a_configmap_update_of_the_nfd_config_relabels_without_a_restart(
    host: Path, tmp_path: Path
) -> None:
    """Issue 25 item 4, for the scanners' mounted --config: the kubelet swaps `..data`; the
    labels follow the new settings (here: HID class 03 whitelisted), with no restart. A bad
    edit is kept out, and shows (issue 32 item 1): /readyz still 200 with the reason, and
    counted in /metrics."""
    conf = "sources:\n  usb:\n    deviceClassWhitelist: [{classes}]\n"
    vol = ConfigMapVolume(tmp_path / "config", {"nfd-worker.conf": conf.format(classes='"fe"')})
    features = tmp_path / "features.d"
    port = free_port()
    features.mkdir(exist_ok=True)  # a producer makes no features.d
    proc = scan_proc("--watch", "--host-root", str(host), "--features-dir", str(features),
                     "--config", str(vol.path("nfd-worker.conf")),
                     "--listen", f"127.0.0.1:{port}")  # fmt: skip
    f = features / "usb-scan"
    try:
        wait_until(lambda: f.exists() and "usb-fe_1a6e_089a" in f.read_text(), 20)
        assert "usb-03_046d_c31c" not in f.read_text()
        vol.update({"nfd-worker.conf": conf.format(classes='"fe", "03"')})
        wait_until(lambda: "usb-03_046d_c31c.present=true" in f.read_text(), 10)
        assert "reload failed" not in readyz(port)[1]
        vol.update({"nfd-worker.conf": "sources: [not, a, mapping]\n"})  # a bad edit: kept
        wait_until(lambda: "configuration reload failed" in readyz(port)[1], 10)
        code, body = readyz(port)
        assert code == 200 and "the configuration in use is kept" in body, body
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            assert "edgefd_config_reload_failures_total 1.0" in r.read().decode()
        assert "usb-03_046d_c31c.present=true" in f.read_text()
        # issue 46 item 7: a key given twice (the last would have dropped 03) is kept out too
        dup = 'sources:\n  usb:\n    deviceClassWhitelist: ["fe", "03"]\n'
        vol.update({"nfd-worker.conf": dup + '    deviceClassWhitelist: ["fe"]\n'})
        wait_until(lambda: "duplicate key" in readyz(port)[1], 10)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            assert "edgefd_config_reload_failures_total 2.0" in r.read().decode()
        assert "usb-03_046d_c31c.present=true" in f.read_text()
    finally:
        _, err = stop(proc)
    assert ":4:5: duplicate key 'deviceClassWhitelist' (first at line 3)" in err, err
    assert f"usb-scan: INFO: {vol.path('nfd-worker.conf')} changed" in err, err
    assert (
        "configuration reloaded from "
        f"{vol.path('nfd-worker.conf')}: usb-scan: deviceClassWhitelist [fe] → [fe, 03]\n"
    ) in err, err
    assert "keeping the configuration in use" in err, err


def test_watch_rewrites_within_a_second(tmp_path: Path) -> None:
    root = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    out = tmp_path / "features.d"
    out.mkdir(exist_ok=True)  # a producer makes no features.d
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgefd.usb_scan", "--watch", "--host-root", str(root),
         "--features-dir", str(out), "--poll-interval", "0.1", "--hold", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    f = out / "usb-scan"
    try:
        assert seconds_until(lambda: "usb-fe_1a6e_089a" in read(f), 10), read(f)
        b = HostBuilder(root)
        # unplug the Coral (boot IDs) ...
        b.remove_usb("2-1")
        t = seconds_until(lambda: "usb-fe_1a6e_089a" not in read(f), 1.0)
        assert t is not None, read(f)
        assert "edgefd.io/edgetpu" not in read(f)
        # ... and it comes back on another port with its runtime IDs
        b.add_usb(CORAL)
        t2 = seconds_until(lambda: "usb-ff_18d1_9302" in read(f), 1.0)
        assert t2 is not None, read(f)
        assert "edgefd.io/edgetpu.count=1" in read(f)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
@pytest.mark.parametrize(("tool", "node"), [("usb-scan", "rpi4"), ("pci-scan", "x86")])
def test_output_path_that_is_not_a_regular_file_exits_4_without_hanging(
    request: pytest.FixtureRequest, tmp_path: Path, tool: str, node: str, kind: str
) -> None:
    """Issue 11 item 7: a FIFO at the output path hung the producer for ever. Whatever is in
    the way (a FIFO, a directory, a symlink to a file elsewhere) is left as it is."""
    out_dir = tmp_path / "features.d"
    out_dir.mkdir()
    out = out_dir / tool
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "directory":
        out.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("precious\n")
        out.symlink_to(tmp_path / "elsewhere")
    host = request.getfixturevalue(node)
    p = subprocess.run(
        [sys.executable, "-m", f"edgefd.{tool.replace('-', '_')}", "--host-root", str(host),
         "--features-dir", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert p.returncode == 4, p.stderr
    # the x86 node's device without subsystem_vendor is warned about first
    (line,) = [ln for ln in p.stderr.splitlines() if "WARNING" not in ln]
    assert line.startswith(f"{tool}: error: {out} is ") and line.endswith("refusing to write there")
    if kind == "fifo":
        assert out.is_fifo()
    elif kind == "directory":
        assert out.is_dir() and list(out.iterdir()) == []
    else:
        assert out.is_symlink() and (tmp_path / "elsewhere").read_text() == "precious\n"
    assert feature_files(out_dir) == [tool]
