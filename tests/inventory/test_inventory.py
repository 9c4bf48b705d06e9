"""The Inventory on fixture hosts: what a snapshot says, what a diff says (a new node for the
same device, a device that is another model at the same port), selectors, subscribers, a host
that cannot be read, and the memory across a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgefd.bus import pci, usb
from edgefd.bus.catalogue import PciId, UsbId, load_catalogue
from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.inventory.inventory import Inventory
from edgefd.inventory.select import Selector
from edgefd.inventory.snapshot import Snapshot
from edgefd.runtime.metrics import Metrics
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until

READERS = (usb.READER, pci.READER)
CORAL_RUNTIME = {"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9}


class Clock:
    """A wall clock (call it) and a monotonic one (`mono`) that move together."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0
        self.base = 1_000.0

    def __call__(self) -> float:
        return self.t

    def mono(self) -> float:
        return self.t - 1_800_000_000.0 + self.base


@pytest.fixture
def rpi(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "rpi", devicetree=False)


def inventory(root: Path, **kw: object) -> Inventory:
    kw.setdefault("catalogue", load_catalogue())
    return Inventory(HostRoot.of(root), READERS, **kw)  # type: ignore[arg-type]


def test_a_snapshot_has_every_record_and_every_accelerator(rpi: Path) -> None:
    snap = inventory(rpi).refresh()
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


def test_the_diff_says_same_device_new_node_and_keeps_both_numbers(rpi: Path) -> None:
    inv, hb = inventory(rpi), HostBuilder(rpi)
    first = inv.refresh()
    assert first is not None
    old = first.device("coral-usb-2-1").nodes[0]  # type: ignore[union-attr]
    hb.remove_usb("2-1")
    gone = inv.refresh()
    assert gone is not None
    [change] = gone.diff.changes
    assert change.kind == "changed" and change.fields == ("present", "reason")
    assert change.after is not None and change.after.reason == "re-enumerating at port 2-1"
    assert change.after.nodes == (old,)  # the last node it had, with its number
    hb.add_usb(CORAL_RUNTIME)
    back = inv.refresh()
    assert back is not None
    [change] = back.diff.changes
    assert set(change.fields) == {"present", "reason", "state", "ids", "nodes"}
    assert change.before.nodes == (old,)  # type: ignore[union-attr]
    assert change.after.nodes == (DevNode("/dev/bus/usb/002/009", "189:136"),)  # type: ignore[union-attr]
    assert change.describe() == (
        "coral-usb-2-1: back at port 2-1; state boot -> runtime; node "
        f"{old.path} ({old.dev}) -> /dev/bus/usb/002/009 (189:136); ids changed"
    )
    # replugged between two scans: present before and after, a new node
    hb.remove_usb("2-1")
    hb.add_usb({**CORAL_RUNTIME, "devnum": 12})
    again = inv.refresh()
    assert again is not None
    [change] = again.diff.changes
    assert change.moved and change.fields == ("nodes",)
    assert inv.refresh().diff.changes == ()  # type: ignore[union-attr]


def test_another_model_at_the_port_is_another_device(rpi: Path) -> None:
    inv, hb = inventory(rpi), HostBuilder(rpi)
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


def test_selectors_pick_devices_by_model_kind_ids_serial_and_glob(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path / "x86", devicetree=False)
    sels = [
        Selector("edgefd.io/tpu", kind="edgetpu"),
        Selector("example.com/t4", pci=(PciId("10de", "1eb8"),)),
        Selector("example.com/coral", usb=(UsbId("18d1", "9302"),), id_from="serial"),
        Selector("example.com/dri", dev_globs=("/dev/dri/card*",)),
        Selector("edgefd.io/coral-pcie", accelerator="coral-pcie", dev_globs=("/dev/nope*",)),
    ]
    snap = inventory(root, selectors=sels).refresh()
    assert snap is not None
    by = {d.name: d for d in snap.devices}
    assert by["coral-pcie-0000-02-00-0"].resources == ("edgefd.io/tpu", "edgefd.io/coral-pcie")
    # the first selector decides which nodes it gets: edgefd.io/tpu has no globs, so the
    # catalogue's (/dev/apex_*)
    assert by["coral-pcie-0000-02-00-0"].nodes == (DevNode("/dev/apex_0", "120:0"),)
    assert by["coral-pcie-0000-02-00-0"].facts.pcie_root == "pci0000:00"
    [usb_coral] = [d for d in snap.devices if d.key.bus == "usb"]
    assert usb_coral.resources == ("edgefd.io/tpu", "example.com/coral")
    assert usb_coral.state == "runtime" and usb_coral.model == "coral-usb"
    assert [d.name for d in snap.of_resource("example.com/dri")] == [
        "dri-dri-card0",
        "dri-dri-card1",
    ]
    assert snap.of_resource("example.com/dri")[0].key == DeviceKey("dev", "/dev/dri/card0")
    assert "hailo8-0000-04-00-0" in by and by["hailo8-0000-04-00-0"].resources == ()
    # IDs the catalogue does not know: the resource names the model
    t4 = by["t4-0000-01-00-0"]
    assert (t4.model, t4.kind, t4.resources) == ("t4", "t4", ("example.com/t4",))
    assert t4.devnodes == ("/dev/dri/card1",) and t4.healthy


def test_subscribers_get_every_snapshot_once_and_late_ones_the_current(rpi: Path) -> None:
    inv = inventory(rpi)
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


def test_an_unreadable_host_gives_no_snapshot_and_tells_the_subscribers(rpi: Path) -> None:
    inv = inventory(rpi)
    errors: list[Exception] = []
    seen: list[Snapshot] = []
    inv.subscribe(seen.append, on_error=errors.append)
    inv.refresh()
    bus = rpi / "sys/bus/usb/devices"
    os.rename(bus, rpi / "sys/bus/usb/gone")
    bus.write_text("not a directory\n")
    assert inv.refresh() is None
    assert len(seen) == 1 and "cannot list /sys/bus/usb/devices" in str(errors[0])
    assert inv.snapshot is seen[0]


def test_remembered_across_a_restart_and_forgotten_after_forget_after(
    rpi: Path, tmp_path: Path
) -> None:
    path, clock = tmp_path / "state.json", Clock()
    inv = inventory(rpi, state_file=path, forget_after=3600, clock=clock, monotonic=clock.mono)
    inv.refresh()
    inv.stop()
    HostBuilder(rpi).remove_usb("2-1")
    clock.t += 60
    clock.base = 5.0  # another process: its own monotonic clock
    again = inventory(rpi, state_file=path, forget_after=3600, clock=clock, monotonic=clock.mono)
    snap = again.refresh()
    assert snap is not None
    coral = snap.device("coral-usb-2-1")
    assert coral is not None and not coral.present
    assert coral.reason == "not seen since the start (last at port 2-1)"
    clock.t += 3540
    assert again.refresh().device("coral-usb-2-1") is not None  # type: ignore[union-attr]
    clock.t += 1
    assert again.refresh().device("coral-usb-2-1") is None  # type: ignore[union-attr]


def test_hot_plug_reaches_subscribers_through_one_watcher(rpi: Path) -> None:
    m = Metrics()
    settings = WatchSettings(poll_interval=0.05, rescan_interval=30.0)
    inv = inventory(rpi, settings=settings, metrics=m, hold=0.5)
    seen: list[Snapshot] = []
    inv.subscribe(seen.append)
    inv.start()
    try:
        HostBuilder(rpi).remove_usb("2-1")
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
