"""The Inventory on fixture hosts: what a snapshot holds (every record, every accelerator),
another model at a device's port being another device (labels keep the old one through the
hold), subscribers (each snapshot once; a late one gets the current; a broken one harms no
other), a host that cannot be read, the memory across a restart, and hot-plug through one
watcher."""

from __future__ import annotations

import os
from pathlib import Path

from edgefd.bus.key import DeviceKey
from edgefd.core.service import WatchSettings
from edgefd.inventory.snapshot import Snapshot
from edgefd.runtime.metrics import Metrics
from tests.fixturegen import HostBuilder
from tests.helpers import wait_until

from .inventories import Clock, inventory


def test_a_snapshot_has_every_record_and_every_accelerator(host: Path) -> None:
    snap = inventory(host).refresh()
    assert snap is not None and snap.seq == 1
    assert [d.name for d in snap.devices] == ["coral-usb-2-1", "ncs2-1-1-1"]
    coral = snap.device("coral-usb-2-1")
    assert coral is not None and coral.present and coral.healthy
    assert (coral.key, coral.model, coral.kind, coral.state) == (
        DeviceKey("usb", "2-1"),
        "coral-usb",
        "edgetpu",
        "boot",
    )
    [node] = coral.nodes
    assert node.dev is not None and node.dev.startswith("189:")
    assert coral.facts.device_version == "1.0.0"
    assert {r.name for r in snap.scans["usb"].devices} >= {"usb1", "usb2", "2-1", "1-1.1"}
    assert [c.kind for c in snap.diff.changes] == ["added", "added"]


def test_another_model_at_the_port_is_another_device(host: Path) -> None:
    inv, hb = inventory(host), HostBuilder(host)
    inv.refresh()
    hb.remove_usb("1-1.1")
    hb.add_usb({"port": "1-1.1", "vendor": "18d1", "product": "9302"})
    snap = inv.refresh()
    assert snap is not None
    new, ncs2 = snap.device("coral-usb-1-1-1"), snap.device("ncs2-1-1-1")
    assert new is not None and new.present and ncs2 is not None and not ncs2.present
    assert {c.name: c.kind for c in snap.diff.changes} == {
        "coral-usb-1-1-1": "added",
        "ncs2-1-1-1": "changed",
    }
    # the labels still count the NCS2 through the hold, beside the Coral
    ids = [r.id for r in snap.label_scans()["usb"].devices if r.name == "1-1.1"]
    assert sorted(ids) == ["03e7:2485", "18d1:9302"]


def test_subscribers_get_every_snapshot_once_and_late_ones_the_current(host: Path) -> None:
    inv = inventory(host)
    early: list[Snapshot] = []
    inv.subscribe(early.append)
    inv.refresh()

    def broken(_snap: Snapshot) -> None:
        raise RuntimeError("a consumer's bug")

    inv.subscribe(broken)
    late: list[Snapshot] = []
    unsubscribe = inv.subscribe(late.append)
    inv.refresh()
    unsubscribe()
    inv.refresh()
    assert [s.seq for s in early] == [1, 2, 3] and [s.seq for s in late] == [1, 2]


def test_an_unreadable_host_gives_no_snapshot_and_tells_the_subscribers(host: Path) -> None:
    inv = inventory(host)
    errors: list[Exception] = []
    seen: list[Snapshot] = []
    inv.subscribe(seen.append, on_error=errors.append)
    inv.refresh()
    bus = host / "sys/bus/usb/devices"
    os.rename(bus, host / "sys/bus/usb/gone")
    bus.write_text("not a directory\n")
    assert inv.refresh() is None
    assert len(seen) == 1 and "cannot list /sys/bus/usb/devices" in str(errors[0])
    assert inv.snapshot is seen[0]


def test_remembered_across_a_restart_and_forgotten_after_forget_after(
    host: Path, tmp_path: Path
) -> None:
    path, clock = tmp_path / "state.json", Clock()
    inv = inventory(host, state_file=path, forget_after=3600, clock=clock, monotonic=clock.mono)
    inv.refresh()
    inv.stop()
    HostBuilder(host).remove_usb("2-1")
    clock.t += 60
    clock.base = 5.0  # another process: its own monotonic clock
    again = inventory(host, state_file=path, forget_after=3600, clock=clock, monotonic=clock.mono)
    snap = again.refresh()
    assert snap is not None
    coral = snap.device("coral-usb-2-1")
    assert coral is not None and not coral.present
    assert coral.reason == "not seen since the start (last at port 2-1)"
    clock.t += 3540
    assert again.refresh().device("coral-usb-2-1") is not None  # type: ignore[union-attr]
    clock.t += 1
    assert again.refresh().device("coral-usb-2-1") is None  # type: ignore[union-attr]


def test_hot_plug_reaches_subscribers_through_one_watcher(host: Path) -> None:
    m = Metrics()
    settings = WatchSettings(poll_interval=0.05, rescan_interval=30.0)
    inv = inventory(host, settings=settings, metrics=m, hold=0.5)
    seen: list[Snapshot] = []
    inv.subscribe(seen.append)
    inv.start()
    try:
        HostBuilder(host).remove_usb("2-1")
        wait_until(lambda: seen[-1].device("coral-usb-2-1").reason == "re-enumerating at port 2-1")  # type: ignore[union-attr]
        assert seen[-1].held_count == 1
        # the hold ends by itself: the inventory wakes and says so
        wait_until(lambda: seen[-1].device("coral-usb-2-1").reason == "unplugged from port 2-1")  # type: ignore[union-attr]
        assert seen[-1].held_count == 0
    finally:
        inv.stop()
    assert m.value("edgefd_inventory_scans_total") == inv.scans >= 3
    assert m.value("edgefd_inventory_devices", presence="absent") == 1
    assert inv.describe() == {"mode": "inotify", "hold_seconds": 0.5, "held_devices": 0}


def test_a_platform_npu_comes_and_goes_like_any_device(tmp_path: Path) -> None:
    """Issue 31 item 2: the platform bus is watched like the others (its listing; uevents
    with SUBSYSTEM=platform on a real host): the RK3588's NPU unbound and its `rknn` gone is
    an absent device, and back it is healthy again, under the same name."""
    from edgefd.bus import platform
    from edgefd.bus.catalogue import load_catalogue
    from edgefd.core.hostroot import HostRoot
    from edgefd.inventory.inventory import Inventory
    from tests.fixturegen import build_host
    from tests.fixturegen.platform import add_platform, remove_platform

    root = build_host("rk3588-npu", tmp_path / "rk", devicetree=False)
    settings = WatchSettings(poll_interval=0.05, rescan_interval=30.0)
    inv = Inventory(
        HostRoot.of(root), (platform.READER,), catalogue=load_catalogue(), settings=settings,
        hold=0.0,
    )  # fmt: skip
    seen: list[Snapshot] = []
    inv.subscribe(seen.append)
    inv.start()
    name = "rockchip-npu-rknn"
    try:
        npu = seen[-1].device(name)
        assert npu is not None and npu.healthy and npu.devnodes == ("/dev/accel/accel0",)
        b = HostBuilder(root)
        cores = ["fdab0000.npu", "fdac0000.npu", "fdad0000.npu"]
        for core in [*cores, "rknn"]:
            remove_platform(b, core)
        wait_until(lambda: not seen[-1].device(name).present)  # type: ignore[union-attr]
        assert seen[-1].device(name).reason == "gone from platform device rknn"  # type: ignore[union-attr]
        for core in cores:
            add_platform(b, {"name": core, "compatible": ["rockchip,rk3588-rknn-core"],
                             "driver": "rocket"})  # fmt: skip
        # the cores bound, the driver's device not (yet) there: present, no node
        wait_until(lambda: seen[-1].device(name).present)  # type: ignore[union-attr]
        assert "no device node (driver rocket)" in seen[-1].device(name).reason  # type: ignore[union-attr]
        add_platform(b, {"name": "rknn", "class_devices": [
            {"class": "accel", "name": "accel0", "devname": "accel/accel0"}]})  # fmt: skip
        wait_until(lambda: seen[-1].device(name).healthy)  # type: ignore[union-attr]
        assert [d.name for d in seen[-1].devices] == [name]
    finally:
        inv.stop()
