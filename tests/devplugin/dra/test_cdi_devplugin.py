"""The device plugin's CDI mode (`--cdi-spec-dir`) against the kubelet's own device-manager
code (tests/harness kubelet-devices): the specs are written for the devices it advertises, the
kubelet checkpoints an Allocate answer of CDI names and env only, and a re-plug rewrites the
spec with the device's new node (what the runtime resolves at the next container creation);
a kind whose spec cannot be written is answered with device specs."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.devplugin.test_realpeer import PluginProcess, _devices_event, _registered_all
from tests.fixturegen import HostBuilder, build_host
from tests.peers.kubelet import KubeletDevices

pytestmark = pytest.mark.realpeer

CORAL = "edgefd.io/coral-usb"
PCIE = "edgefd.io/coral-pcie"
PCIE_CORAL = {
    "address": "0000:03:00.0",
    "class": "088000",
    "vendor": "1ac1",
    "device": "089a",
    "driver": "apex",
    "class_devices": [{"class": "apex", "name": "apex_0", "devname": "apex_0", "major": 509}],
}


@pytest.fixture
def kubelet() -> Iterator[KubeletDevices]:
    kd = KubeletDevices()
    try:
        kd.start()
        yield kd
    finally:
        kd.close()


def test_allocate_answers_with_cdi_names_whose_specs_follow_the_device(
    kubelet: KubeletDevices, tmp_path: Path
) -> None:
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    cdi = tmp_path / "cdi"
    p = PluginProcess(host, kubelet.plugin_dir, f"--cdi-spec-dir={cdi}")
    try:
        _registered_all(kubelet, [CORAL])
        _devices_event(kubelet, CORAL, ["coral-usb-2-1"], 0)
        r = kubelet.allocate(CORAL, count=1)
        assert r["ok"], r
        assert r["device_ids"] == ["coral-usb-2-1"]
        # what the kubelet checkpointed and replays: names and env, no nodes, no mounts
        assert r["cdi_devices"] == [{"name": "edgefd.io/coral-usb=coral-usb-2-1"}]
        assert not r["devices"] and not r["mounts"]
        assert r["envs"] == {"EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
        spec_file = cdi / "edgefd.io-coral-usb.json"
        spec = json.loads(spec_file.read_text())
        assert spec["kind"] == "edgefd.io/coral-usb"
        [dev] = [d for d in spec["devices"] if d["name"] == "coral-usb-2-1"]
        node = dev["containerEdits"]["deviceNodes"][0]
        assert node["path"] == "/dev/edgefd/coral-usb-2-1"
        old = node["hostPath"]
        assert old.startswith("/dev/bus/usb/002/")
        # re-plugged with another devnum: the spec names the new node within a second
        hb = HostBuilder(host)
        hb.remove_usb("2-1")
        hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 11})

        def current() -> str:
            s = json.loads(spec_file.read_text())
            return next(d for d in s["devices"] if d["name"] == "coral-usb-2-1")["containerEdits"][
                "deviceNodes"
            ][0]["hostPath"]

        deadline = time.monotonic() + 3
        while current() != "/dev/bus/usb/002/011" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert current() == "/dev/bus/usb/002/011", (old, current())
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.terminate()
        if p.proc.poll() is None:
            p.proc.kill()


def test_a_symlink_at_one_kinds_spec_path_costs_that_kind_only(
    kubelet: KubeletDevices, tmp_path: Path
) -> None:
    """Its devices are answered with device specs (never a CDI name without a spec), the other
    kinds are written, one warning however many scans, and the link's target is untouched."""
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    HostBuilder(host).add_pci(PCIE_CORAL)
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text("keep\n")
    (cdi / "edgefd.io-coral-usb.json").symlink_to(target)
    p = PluginProcess(host, kubelet.plugin_dir, f"--cdi-spec-dir={cdi}", "--rescan-interval=0.5s")
    try:
        _registered_all(kubelet, [CORAL, PCIE])
        _devices_event(kubelet, CORAL, ["coral-usb-2-1"], 0)
        r = kubelet.allocate(CORAL, count=1)
        assert r["ok"], r
        assert not r["cdi_devices"]
        assert [d["container_path"] for d in r["devices"]] == ["/dev/edgefd/coral-usb-2-1"]
        assert r["envs"] == {"EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
        _devices_event(kubelet, PCIE, ["coral-pcie-0000-03-00-0"], 0)
        r = kubelet.allocate(PCIE, count=1)
        assert r["ok"], r
        assert r["cdi_devices"] == [{"name": "edgefd.io/coral-pcie=coral-pcie-0000-03-00-0"}]
        assert json.loads((cdi / "edgefd.io-coral-pcie.json").read_text())["devices"]
        time.sleep(2.0)  # several rescans
        warnings = [
            line for line in p.log.read_text().splitlines() if "edgefd.io-coral-usb.json" in line
        ]
        assert len(warnings) == 1, warnings
        assert "is a symlink" in warnings[0] and "device specs instead" in warnings[0]
        assert target.read_text() == "keep\n"
        assert (cdi / "edgefd.io-coral-usb.json").is_symlink()
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.terminate()
        if p.proc.poll() is None:
            p.proc.kill()
