"""devplugin against the kubelet's own device-manager code (tests/harness kubelet-devices).

The plugin runs as a subprocess on a fixture host root, exactly as deployed but with
`--host-root`; hot-plug is simulated by adding and removing device directories (and /dev
nodes) under that root. Its CDI mode (`--cdi-spec-dir`, cdi.py) too: the kubelet checkpoints
an Allocate answer of CDI names and env only, a re-plug rewrites the spec with the device's
new node (what the runtime resolves at the next container creation), and a kind whose spec
cannot be written is answered with device specs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.configmap import ConfigMapVolume
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import untimed
from tests.peers.kubelet import KubeletDevices

pytestmark = pytest.mark.realpeer

ROOT = Path(__file__).resolve().parents[2]
CORAL = "edgefd.io/coral-usb"
NCS2 = "edgefd.io/ncs2"
HAILO = "edgefd.io/hailo"
ALL = ["edgefd.io/coral-usb", "edgefd.io/coral-pcie", NCS2, "edgefd.io/ncs1", HAILO]
SERVED = [CORAL, NCS2]  # the resources rpi4-coral has a device of
PCIE = "edgefd.io/coral-pcie"
PCIE_CORAL = {
    "address": "0000:03:00.0",
    "class": "088000",
    "vendor": "1ac1",
    "device": "089a",
    "driver": "apex",
    "class_devices": [{"class": "apex", "name": "apex_0", "devname": "apex_0", "major": 509}],
}


class PluginProcess:
    """`python -m edgefd.devplugin` on a host root and plugin dir."""

    def __init__(self, host: Path, plugin_dir: str, *args: str, verbose: bool = True) -> None:
        # beside the host tree, in the test's own directory (never the machine's /tmp)
        fd, log = tempfile.mkstemp(prefix="devplugin-", suffix=".log", dir=host.parent)
        os.close(fd)
        self.log = Path(log)
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "edgefd.devplugin",
                    "--host-root",
                    str(host),
                    "--plugin-dir",
                    plugin_dir,
                    "--listen",
                    "",
                    *(["-v"] if verbose else []),
                    *args,
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=fh,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fds(self) -> list[str]:
        d = f"/proc/{self.pid}/fd"
        out = []
        for n in os.listdir(d):
            with contextlib.suppress(OSError):
                out.append(os.readlink(f"{d}/{n}"))
        return out

    def threads(self) -> int:
        with open(f"/proc/{self.pid}/status") as fh:
            for line in fh:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        raise AssertionError("no Threads line")

    def terminate(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture
def kubelet(kubelet_devices: KubeletDevices) -> KubeletDevices:
    """The kubelet's device manager, a fresh one for each test (tests/peers/kubelet.py)."""
    return kubelet_devices


@pytest.fixture
def plugin(host: Path, kubelet: KubeletDevices) -> Iterator[PluginProcess]:
    p = PluginProcess(host, kubelet.plugin_dir)
    try:
        yield p
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.terminate()
        if p.proc.poll() is None:
            p.proc.kill()


def _registered_all(kubelet: KubeletDevices, names: list[str], since: int = 0) -> None:
    for n in names:
        kubelet.wait_for("registered", resource=n, since=since, timeout=20)


def _devices_event(kubelet: KubeletDevices, res: str, healthy: list[str], since: int) -> dict:
    return kubelet.wait_for(
        lambda e: (
            e.get("event") == "devices" and e.get("resource") == res and e.get("healthy") == healthy
        ),
        since=since,
        timeout=5,
    )


def test_registration_capacity_and_zero_devices(
    plugin: PluginProcess, kubelet: KubeletDevices
) -> None:
    _registered_all(kubelet, SERVED)
    ev = kubelet.events_named("registered", resource=CORAL)[0]
    assert ev["endpoint"] == "edgefd-edgefd.io_coral-usb.sock"
    assert ev["options"]["get_preferred_allocation_available"] is False
    _devices_event(kubelet, CORAL, ["coral-usb-2-1"], 0)
    _devices_event(kubelet, NCS2, ["ncs2-1-1-1"], 0)
    cap = kubelet.capacity()
    assert cap["capacity"][CORAL] == 1 and cap["allocatable"][CORAL] == 1
    assert cap["capacity"][NCS2] == 1
    # issue 25 item 7: no zero-device resource is advertised (it was `edgefd.io/hailo: 0`)
    assert sorted(cap["capacity"]) == sorted(SERVED), cap
    assert not [e for e in kubelet.events if e.get("resource") in set(ALL) - set(SERVED)]


def test_a_resource_is_served_only_while_it_has_a_device(
    host: Path, kubelet: KubeletDevices, tmp_path: Path
) -> None:
    """Its last device forgotten, a resource stops serving: the kubelet sees the plugin go
    and its capacity drop to 0 (then, after the kubelet's own 5-minute grace, the resource
    leaves the Node); a device of it plugged later registers it again."""
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "forget_after: 1s\nresources:\n  - {name: edgefd.io/ncs2, accelerator: ncs2}\n"
        "  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n"
    )
    p = PluginProcess(host, kubelet.plugin_dir, "--config", str(cfg), verbose=False)
    try:
        _registered_all(kubelet, SERVED)
        since = kubelet.mark()
        hb = HostBuilder(host)
        hb.remove_usb("1-1.1")
        kubelet.wait_for(
            lambda e: e.get("event") == "capacity" and e.get("resource") == NCS2
            and e.get("capacity") == 0,
            since=since, timeout=10,
        )  # fmt: skip
        kubelet.wait_for("disconnected", resource=NCS2, since=since, timeout=5)
        sock = Path(kubelet.plugin_dir) / "edgefd-edgefd.io_ncs2.sock"
        assert not sock.exists()
        assert kubelet.capacity()["capacity"][CORAL] == 1  # the other resource is untouched
        since = kubelet.mark()
        hb.add_usb({"port": "1-1.1", "vendor": "03e7", "product": "2485", "serial": "03e72485"})
        kubelet.wait_for("registered", resource=NCS2, since=since, timeout=10)
        _devices_event(kubelet, NCS2, ["ncs2-1-1-1"], since)
        assert kubelet.capacity()["allocatable"][NCS2] == 1
        assert p.terminate() == 0
    finally:
        if p.proc.poll() is None:
            p.proc.kill()
    err = p.stderr()
    assert "edgefd.io/ncs2: no device left: no longer served (the kubelet drops it)" in err, err
    assert "edgefd.io/ncs2: a device: serving and registering" in err, err


def test_allocate_through_the_kubelet(plugin: PluginProcess, kubelet: KubeletDevices) -> None:
    _registered_all(kubelet, [CORAL])
    _devices_event(kubelet, CORAL, ["coral-usb-2-1"], 0)
    r = kubelet.allocate(CORAL, count=1)
    assert r["ok"], r
    assert r["device_ids"] == ["coral-usb-2-1"]
    # what the kubelet checkpointed, i.e. what it replays on container restarts
    assert r["envs"] == {"EDGEFD_CORAL_USB_DEVICES": "coral-usb-2-1"}
    [spec] = r["devices"]
    assert spec["container_path"] == "/dev/edgefd/coral-usb-2-1"
    assert spec["permissions"] == "rw"
    link = spec["host_path"]
    assert link == os.path.join(
        kubelet.plugin_dir, "edgefd-links", "edgefd.io_coral-usb", "coral-usb-2-1", "0"
    )
    assert os.readlink(link).startswith("/dev/bus/usb/002/")
    assert r["mounts"] == [
        {"container_path": "/dev/bus/usb", "host_path": "/dev/bus/usb", "read_only": True}
    ]
    # a second pod finds nothing left
    r2 = kubelet.allocate(CORAL, count=1)
    assert not r2["ok"]
    # an ID the plugin never advertised fails, saying why
    bad = kubelet.allocate(CORAL, devices=["coral-usb-9-9"])
    assert not bad["ok"] and "unknown device ID(s) coral-usb-9-9" in bad["error"]


def test_kubelet_restart_reregisters_within_a_second(
    plugin: PluginProcess, kubelet: KubeletDevices
) -> None:
    _registered_all(kubelet, SERVED)
    for _ in range(3):
        since = kubelet.mark()
        ready = kubelet.restart()
        for n in SERVED:
            ev = kubelet.wait_for("registered", resource=n, since=since, timeout=5)
            assert ev["ts"] - ready["ts"] < 1.0, (n, ev["ts"] - ready["ts"])
        _devices_event(kubelet, CORAL, ["coral-usb-2-1"], since)
        kubelet.wait_for("capacity", resource=CORAL, allocatable=1, since=since, timeout=5)


def test_plugin_restart(host: Path, kubelet: KubeletDevices) -> None:
    p = PluginProcess(host, kubelet.plugin_dir)
    try:
        _registered_all(kubelet, SERVED)
        since = kubelet.mark()
        assert p.terminate() == 0
        kubelet.wait_for("disconnected", resource=CORAL, since=since, timeout=5)
        socks = [n for n in os.listdir(kubelet.plugin_dir) if n.startswith("edgefd-")]
        assert socks == ["edgefd-links"]  # sockets removed, the links dir stays
        since = kubelet.mark()
        p = PluginProcess(host, kubelet.plugin_dir)
        _registered_all(kubelet, SERVED, since)
        _devices_event(kubelet, CORAL, ["coral-usb-2-1"], since)
    finally:
        p.terminate()


def test_unplug_and_replug_within_a_second(
    plugin: PluginProcess, kubelet: KubeletDevices, host: Path
) -> None:
    _registered_all(kubelet, [NCS2])
    _devices_event(kubelet, NCS2, ["ncs2-1-1-1"], 0)
    hb = HostBuilder(host)
    since = kubelet.mark()
    t0 = time.monotonic()
    hb.remove_usb("1-1.1")
    ev = kubelet.wait_for(
        lambda e: (
            e.get("event") == "capacity" and e.get("resource") == NCS2 and e.get("allocatable") == 0
        ),
        since=since,
        timeout=5,
    )
    assert ev["capacity"] == 1  # still listed, Unhealthy
    assert ev["ts"] - t0 < 1.0, ev["ts"] - t0
    since = kubelet.mark()
    t0 = time.monotonic()
    hb.add_usb({"port": "1-1.1", "vendor": "03e7", "product": "2485", "serial": "03e72485"})
    ev = _devices_event(kubelet, NCS2, ["ncs2-1-1-1"], since)
    assert ev["ts"] - t0 < 1.0, ev["ts"] - t0
    assert kubelet.capacity()["allocatable"][NCS2] == 1


def test_default_log_tells_the_story(host: Path, kubelet: KubeletDevices) -> None:
    """Issue 25 item 1: at the default level devplugin wrote nothing when the NCS2 was
    unplugged. Now: the start-up line, each registration, each device change with its
    resource, each resource's new counts; a steady state (rescans) says nothing more."""
    p = PluginProcess(host, kubelet.plugin_dir, "--rescan-interval", "0.5s", verbose=False)
    try:
        _registered_all(kubelet, SERVED)
        _devices_event(kubelet, NCS2, ["ncs2-1-1-1"], 0)
        time.sleep(1.5)  # three rescans with nothing new
        quiet = p.stderr()
        since = kubelet.mark()
        HostBuilder(host).remove_usb("1-1.1")
        kubelet.wait_for(
            lambda e: e.get("event") == "capacity" and e.get("resource") == NCS2
            and e.get("allocatable") == 0,
            since=since,
            timeout=5,
        )  # fmt: skip
        time.sleep(0.3)
        assert p.terminate() == 0
    finally:
        if p.proc.poll() is None:
            p.proc.kill()
    err = untimed(p.stderr())
    lines = err.splitlines()
    assert lines[0].startswith("devplugin: INFO: edgefd "), err
    assert "starting, mode device-plugin: resources=edgefd.io/coral-usb," in lines[0], err
    assert f"plugin-dir={kubelet.plugin_dir}" in lines[0] and "rescan=500ms" in lines[0], err
    for res in SERVED:
        assert f"{res}: registered with the kubelet as " in err, err
    assert "edgefd.io/hailo: no device: not served until one comes" in err, err
    assert "device ncs2-1-1-1 (edgefd.io/ncs2): added: ncs2 (boot) at port 1-1.1" in err, err
    assert "device ncs2-1-1-1 (edgefd.io/ncs2): re-enumerating at port 1-1.1" in err, err
    assert "edgefd.io/ncs2: 0 healthy, 1 unhealthy" in err, err
    assert all(": INFO: " in ln for ln in lines), err  # a healthy run warns of nothing
    assert not [ln for ln in lines if "DEBUG" in ln]
    # the rescans before the unplug added nothing to the log
    assert err.count("\n") - quiet.count("\n") <= 4, err[len(quiet) :]


def test_a_configmap_update_is_applied_without_a_restart(
    host: Path, kubelet: KubeletDevices, tmp_path: Path
) -> None:
    """Issue 25 item 4: an edited ConfigMap reached devplugin only on a restart (allocatable
    0 for ~9 s). The kubelet swaps the volume's `..data` symlink; the new resource registers,
    the unchanged one stays registered, with no restart and no signal."""
    one = "resources: [{name: edgefd.io/coral-usb, accelerator: coral-usb}]\n"
    two = one.replace("]", ", {name: edgefd.io/ncs2, accelerator: ncs2}]")
    vol = ConfigMapVolume(tmp_path / "config", {"resources.yaml": one})
    p = PluginProcess(host, kubelet.plugin_dir, "--config", str(vol.path("resources.yaml")),
                      verbose=False)  # fmt: skip
    try:
        _registered_all(kubelet, [CORAL])
        since = kubelet.mark()
        t0 = time.monotonic()
        vol.update({"resources.yaml": two})
        kubelet.wait_for("registered", resource=NCS2, since=since, timeout=10)
        took = time.monotonic() - t0
        _devices_event(kubelet, NCS2, ["ncs2-1-1-1"], since)
        assert not kubelet.events_named("registered", resource=CORAL, since=since)
        assert p.proc.poll() is None and took < 3.0, took
        assert p.terminate() == 0
    finally:
        if p.proc.poll() is None:
            p.proc.kill()
    err = p.stderr()
    assert f"devplugin: INFO: {vol.path('resources.yaml')} changed\n" in err, err
    assert "devplugin: INFO: configuration reloaded: edgefd.io/ncs2: added\n" in err, err


def test_coral_boot_to_runtime_keeps_the_id(
    plugin: PluginProcess, kubelet: KubeletDevices, host: Path
) -> None:
    _registered_all(kubelet, [CORAL])
    _devices_event(kubelet, CORAL, ["coral-usb-2-1"], 0)
    r = kubelet.allocate(CORAL, count=1)
    link = r["devices"][0]["host_path"]
    before = os.readlink(link)
    since = kubelet.mark()
    hb = HostBuilder(host)
    # firmware upload: the boot device goes, the runtime one arrives on the same port
    hb.remove_usb("2-1")
    hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 5})
    time.sleep(1.0)
    devs = kubelet.events_named("devices", since=since, resource=CORAL)
    assert all(set(e["healthy"]) | set(e["unhealthy"]) == {"coral-usb-2-1"} for e in devs)
    assert kubelet.capacity()["devices"][CORAL] == {"healthy": ["coral-usb-2-1"], "unhealthy": []}
    after = os.readlink(link)
    assert after == "/dev/bus/usb/002/005" != before  # the replayed DeviceSpec follows it
    # the allocated pod keeps its device: the kubelet still counts it as in use
    assert kubelet.allocate(CORAL, count=1)["ok"] is False


def test_bad_config_fails_naming_the_field(
    host: Path, kubelet: KubeletDevices, tmp_path: Path
) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources:\n  - {name: coral, accelerator: coral-usb}\n")
    p = PluginProcess(host, kubelet.plugin_dir, "--config", str(cfg))
    assert p.proc.wait(30) == 3
    assert "resources[0].name: 'coral' must be <domain>/<name>" in p.stderr()
    assert not kubelet.events_named("registered")


# -- the CDI mode (--cdi-spec-dir)


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


def test_a_hot_coral_pcie_is_unhealthy_until_it_cools_below_the_hysteresis(
    kubelet: KubeletDevices, tmp_path: Path
) -> None:
    """Issue 31 item 4: the gasket driver's temperature (apex_N/temp, milli-°C) above the
    resource's limit makes the device Unhealthy to the kubelet, with the temperature in the
    log; it is Healthy again only below the limit minus the hysteresis."""
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    child = {**PCIE_CORAL["class_devices"][0], "attributes": {"temp": 45300}}  # type: ignore[index]
    HostBuilder(host).add_pci({**PCIE_CORAL, "class_devices": [child]})
    temp = host / "sys/class/apex/apex_0/temp"
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n  - {accelerator: coral-pcie, temperature: {limit: 80, hysteresis: 5}}\n"
    )
    name = "coral-pcie-0000-03-00-0"
    p = PluginProcess(
        host, kubelet.plugin_dir, "--config", str(cfg), "--rescan-interval=0.5s", verbose=False
    )
    try:
        _registered_all(kubelet, [PCIE])
        _devices_event(kubelet, PCIE, [name], 0)
        since = kubelet.mark()
        temp.write_text("82100\n")
        ev = kubelet.wait_for(
            lambda e: e.get("event") == "devices" and e.get("resource") == PCIE
            and e.get("unhealthy") == [name],
            since=since, timeout=5,
        )  # fmt: skip
        assert ev["healthy"] == []
        assert kubelet.capacity()["allocatable"][PCIE] == 0
        since = kubelet.mark()
        temp.write_text("77000\n")  # below the limit, above limit - hysteresis
        time.sleep(1.5)  # several rescans
        assert kubelet.capacity()["devices"][PCIE] == {"healthy": [], "unhealthy": [name]}
        temp.write_text("74800\n")
        _devices_event(kubelet, PCIE, [name], since)
        assert kubelet.capacity()["allocatable"][PCIE] == 1
        # a lower limit in the ConfigMap: the same device Unhealthy, no server restarted
        since = kubelet.mark()
        cfg.write_text("resources:\n  - {accelerator: coral-pcie, temperature: {limit: 70}}\n")
        kubelet.wait_for(
            lambda e: e.get("event") == "devices" and e.get("resource") == PCIE
            and e.get("unhealthy") == [name],
            since=since, timeout=10,
        )  # fmt: skip
        assert not [e for e in kubelet.events[since:] if e.get("event") == "registered"]
        assert p.terminate() == 0
    finally:
        if p.proc.poll() is None:
            p.proc.kill()
    err = p.stderr()
    assert "82.1 °C, above the limit 80 °C" in err, err
    assert (
        "configuration reloaded: edgefd.io/coral-pcie: temperature limit 80 °C, hysteresis 5 °C"
        " → limit 70 °C, hysteresis 5 °C" in err
    ), err
    assert "restarting" not in err, err


# -- leaks


@pytest.mark.slow
def test_hundred_kubelet_restarts_leak_nothing(host: Path, kubelet: KubeletDevices) -> None:
    p = PluginProcess(host, kubelet.plugin_dir)
    try:
        _registered_all(kubelet, SERVED)
        # settle, then measure
        for _ in range(3):
            since = kubelet.mark()
            kubelet.restart()
            _registered_all(kubelet, SERVED, since)
        time.sleep(0.5)
        fds0, threads0 = len(p.fds()), p.threads()
        for _ in range(100):
            since = kubelet.mark()
            kubelet.restart()
            _registered_all(kubelet, SERVED, since)
        # connections of the last restart close asynchronously: allow a few seconds to
        # settle; a leak (one or more per restart) would be ~100 over, not a few
        deadline = time.monotonic() + 10
        while True:
            fds1, threads1 = p.fds(), p.threads()
            if len(fds1) <= fds0 + 2 and threads1 <= threads0 + 2:
                break
            if time.monotonic() > deadline:
                kinds = Counter(f.split(":")[0] for f in fds1)
                raise AssertionError(
                    f"fds {fds0} -> {len(fds1)} {dict(kinds)}, threads {threads0} -> {threads1}"
                )
            time.sleep(0.2)
        socks = [n for n in os.listdir(kubelet.plugin_dir) if n.endswith(".sock")]
        assert sorted(socks) == sorted(
            ["kubelet.sock"] + ["edgefd-" + n.replace("/", "_") + ".sock" for n in SERVED]
        )
        assert p.proc.poll() is None
    finally:
        p.terminate()
        shutil.rmtree(p.log, ignore_errors=True)
