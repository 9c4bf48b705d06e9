"""What `devplugin --dry-run` shows (dryrun.py), through the command: every resource with its
devices, kubelet IDs and the Allocate answer each would get, as JSON and as text, writing
nothing; and host strings that forge lines or are not UTF-8 shown escaped, one printable line
per entry, the JSON strict UTF-8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from edgefd.devplugin.v1beta1.advertised import NOT_SERVED
from edgefd.devplugin.v1beta1.resource import socket_name
from tests.devplugin.command import ROOT, run_plugin
from tests.devplugin.kubelet import FakeKubelet
from tests.devplugin.running import Running
from tests.fixturegen import HostBuilder
from tests.helpers import wait_until

CORAL = "edgefd.io/coral-usb"


def test_dry_run_json_and_text(host: Path, tmp_path: Path) -> None:
    proc = run_plugin(
        ["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"), "--dry-run", "-o", "json"]
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    coral = next(r for r in doc["resources"] if r["resource"] == CORAL)
    [dev] = coral["devices"]
    assert dev["id"] == "coral-usb-2-1" and dev["state"] == "boot"
    assert dev["allocate"]["envs"] == {"EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
    assert not (tmp_path / "dp").exists()  # a dry run writes nothing
    proc = run_plugin(["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"), "--dry-run"])
    out, _ = proc.communicate(timeout=30)
    assert "coral-usb-2-1: Healthy, usb 2-1, 1a6e:089a boot" in out


def test_dry_run_shows_a_hot_coral_pcie_unhealthy_with_its_temperature(tmp_path: Path) -> None:
    from tests.fixturegen import build_host

    host = build_host("x86-coral-pcie", tmp_path / "host", devicetree=False)
    (host / "sys/class/apex/apex_0/temp").write_text("88300\n")
    proc = run_plugin(["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"), "--dry-run"])
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "edgefd.io/coral-pcie: 0 healthy, 1 unhealthy" in out, out
    assert "coral-pcie-0000-02-00-0: Unhealthy (88.3 °C, above the limit 84.8 °C)" in out, out


def test_dry_run_shows_hostile_device_strings_escaped_and_json_strict(tmp_path: Path) -> None:
    """A Coral whose serial forges lines (and is its ID source) and an NCS2 whose sysfs name is
    not UTF-8: the text is one printable line per entry, the JSON strict UTF-8."""
    root = tmp_path / "host"
    b = HostBuilder(root)
    b.add_usb({"port": "usb1", "vendor": "1d6b", "product": "0002", "class": "09"})
    coral = b.add_usb({"port": "1-1", "vendor": "1a6e", "product": "089a", "class": "fe"})
    (coral / "serial").write_bytes(b"AB\ndevplugin: ERROR: forged\x1b[2J\xff\n")
    ncs2 = b.add_usb({"port": "1-2", "vendor": "03e7", "product": "2485", "class": "ff"})
    bus = root / "sys/bus/usb/devices"
    weird = os.fsencode(ncs2.parent) + b"/1-\xff"
    os.rename(os.fsencode(ncs2), weird)
    os.unlink(bus / "1-2")
    os.symlink(os.path.relpath(weird, os.fsencode(bus)), os.fsencode(bus) + b"/1-\xff")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb, id_from: serial}\n"
        "  - {name: edgefd.io/ncs2, accelerator: ncs2}\n"
    )
    argv = ["--host-root", str(root), "--plugin-dir", str(tmp_path / "dp"), "--config", str(cfg)]
    for output in ("text", "json"):
        proc = subprocess.run(
            [sys.executable, "-m", "edgefd.devplugin", *argv, "--dry-run", "-o", output],
            cwd=ROOT,
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr  # a name that is not UTF-8 was exit 70
        out = proc.stdout.decode("utf-8", "strict")
        if output == "json":
            doc = json.loads(out)
            json.dumps(doc, ensure_ascii=False).encode("utf-8", "strict")
            ncs2_dev = next(r for r in doc["resources"] if r["resource"] == "edgefd.io/ncs2")
            assert ncs2_dev["devices"][0]["location"] == "1-\\xff"
        else:
            assert "\x1b" not in out and "\r" not in out
            assert not any(line.startswith("devplugin: ") for line in out.splitlines())
            assert "usb 1-\\xff" in out


def test_the_dry_run_serves_what_the_live_plugin_serves(
    plugin: Running, kubelet: FakeKubelet, host: Path, tmp_path: Path
) -> None:
    """Issue 32 item 8: the dry run listed `edgefd.io/ncs1 (0 device(s), socket ...)` where the
    live plugin serves no socket for it. Both now take Advertised.served: the same resources
    served, with the same kubelet IDs, and the others said the same way."""
    proc = run_plugin(["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"),
                       "--dry-run", "-o", "json"])  # fmt: skip
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    doc = {r["resource"]: r for r in json.loads(out)["resources"]}
    served = {name for name, r in doc.items() if r["served"]}
    assert served and served != set(doc)  # the sample host has resources of both kinds
    wait_until(lambda: all(kubelet.last(n) is not None for n in served))
    time.sleep(0.3)  # a resource the dry run does not serve would have registered by now
    assert {r for _, r, _ in kubelet.registrations} == served
    for name in served:
        ids = [i for d in doc[name]["devices"] for i in d["kubelet_ids"]]
        assert sorted(i for i, _ in kubelet.last(name) or []) == sorted(ids)
        assert doc[name]["socket"].endswith(socket_name(name))
    assert all(doc[n]["socket"] is None for n in set(doc) - served)
    proc = run_plugin(["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"), "--dry-run"])
    text, _ = proc.communicate(timeout=30)
    for name in set(doc) - served:
        assert f"\n{name}: {NOT_SERVED}\n" in text
    assert "0 device(s)" not in text


ISSUE_31 = [
    ("rpi5-hailo10h", "edgefd.io/hailo10h", "hailo10h-0001-01-00-0", "pci 0001:01:00.0, 1e60:45c4",
     "/dev/hailo0"),
    ("rpi5-hailo10h-h1x", "edgefd.io/hailo10h", "hailo10h-0001-01-00-0",
     "pci 0001:01:00.0, 1e60:45c4", "/dev/h1x-0"),
    ("x86-intel-npu", "edgefd.io/intel-npu", "intel-npu-0000-00-0b-0",
     "pci 0000:00:0b.0, 8086:7d1d", "/dev/accel/accel0"),
    ("rk3588-npu", "edgefd.io/rockchip-npu", "rockchip-npu-rknn", "platform rknn",
     "/dev/accel/accel0"),
]  # fmt: skip


def test_issue_31_devices_once_healthy_with_their_node(tmp_path: Path) -> None:
    """A Hailo-10H under either node name, an Intel NPU beside another driver's accel node
    (accel1 is never given), an RK3588 NPU on the platform bus: each one device, Healthy,
    its node (and only it) in the Allocate answer."""
    from tests.fixturegen import build_host

    for node, resource, name, where, path in ISSUE_31:
        host = build_host(node, tmp_path / node, devicetree=False)
        args = ["--host-root", str(host), "--plugin-dir", str(tmp_path / "dp"), "--dry-run"]
        proc = run_plugin([*args, "-o", "json"])
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        served = {r["resource"]: r["devices"] for r in json.loads(out)["resources"] if r["devices"]}
        assert list(served) == [resource], node
        [dev] = served[resource]
        assert (dev["id"], dev["health"]) == (name, "Healthy"), node
        assert [d["container_path"] for d in dev["allocate"]["devices"]] == [path], node
        proc = run_plugin(args)
        text, _ = proc.communicate(timeout=30)
        assert f"  {name}: Healthy, {where}\n" in text, node
