"""The keeper's own source of moves: the device inventory on fixture hosts, where a device
re-enumerates (same place, new IDs and major:minor). Exactly the devices that came back at
their place with another node move, from the node last seen present to the node there now;
and the moves reach the service through a running inventory (the hot-plug watcher), one by
one, with the device named as both APIs name it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from edgefd.bus import pci, usb
from edgefd.bus.catalogue import load_catalogue
from edgefd.core.hostroot import HostRoot
from edgefd.device_keeper.holders import DeviceRef, holders
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.rules import DevNode
from edgefd.device_keeper.service import Keeper, Move
from edgefd.device_keeper.source import InventorySource, MoveTracker, char_node
from edgefd.device_keeper.watch import Watching, watch_inventory
from edgefd.inventory.inventory import Inventory
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until

from .test_holders import _dra, _plugin, _pod

CORAL_RUNTIME = {"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9}


@pytest.fixture
def rpi(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "rpi", devicetree=False)


def _inventory(root: Path) -> Inventory:
    return Inventory(HostRoot.of(root), (usb.READER, pci.READER), catalogue=load_catalogue())


def _moved(moves: list[Move]) -> list[Move]:
    """Moves proper, without the first look's catch-ups (old None)."""
    return [m for m in moves if m.old is not None]


def _node(inv: Inventory, name: str) -> DevNode:
    dev = inv.snapshot.device(name)  # type: ignore[union-attr]
    node = char_node(dev.nodes[0].dev)  # type: ignore[union-attr]
    assert node is not None
    return node


def test_a_re_enumeration_across_scans_is_one_move_from_the_granted_node(rpi: Path) -> None:
    inv, hb, tracker = _inventory(rpi), HostBuilder(rpi), MoveTracker("node1")
    snaps = [inv.refresh()]
    boot = _node(inv, "coral-usb-2-1")
    hb.remove_usb("2-1")
    snaps.append(inv.refresh())  # away: re-enumerating, the boot node still its last
    hb.add_usb(CORAL_RUNTIME)
    snaps.append(inv.refresh())
    moves = [tracker.moves(s) for s in snaps]  # type: ignore[arg-type]
    # the first scan is a catch-up of every present device; an absence moves nothing
    assert [(m.device.name, m.old, m.new) for m in moves[0]] == [
        ("coral-usb-2-1", None, boot),
        ("ncs2-1-1-1", None, DevNode("c", 189, 2)),
    ]
    assert moves[1] == []
    [move] = moves[2]
    assert (move.old, move.new) == (boot, DevNode("c", 189, 136))
    assert move.container_path == "/dev/edgefd/coral-usb-2-1"
    assert move.seen == snaps[2].time  # type: ignore[union-attr]
    assert move.device == DeviceRef(
        "coral-usb-2-1",
        ids=frozenset({"coral-usb-2-1"}),
        dra=frozenset({("edgefd.io", "node1", "coral-usb-2-1")}),
    )
    assert tracker.moves(inv.refresh()) == []  # type: ignore[arg-type]  # a rescan: nothing


def test_a_re_plug_between_two_scans_moves_too_and_from_the_last_node(rpi: Path) -> None:
    inv, hb, tracker = _inventory(rpi), HostBuilder(rpi), MoveTracker()
    tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("2-1")
    hb.add_usb(CORAL_RUNTIME)
    [first] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("2-1")
    hb.add_usb({**CORAL_RUNTIME, "devnum": 12})
    [second] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert second.old == first.new and second.new == DevNode("c", 189, 139)
    assert second.device.dra == frozenset({("edgefd.io", "", "coral-usb-2-1")})  # any pool


def test_another_model_at_the_port_or_a_new_device_moves_nothing(rpi: Path) -> None:
    inv, hb, tracker = _inventory(rpi), HostBuilder(rpi), MoveTracker()
    tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("1-1.1")  # the NCS2 goes; a Coral takes its port: another device
    hb.add_usb({"port": "1-1.1", "vendor": "18d1", "product": "9302", "devnum": 30})
    hb.add_usb({"port": "1-1.2", "vendor": "03e7", "product": "2485", "devnum": 31})
    snap = inv.refresh()
    assert {c.name for c in snap.diff.changes} == {  # type: ignore[union-attr]
        "coral-usb-1-1-1",
        "ncs2-1-1-1",
        "ncs2-1-1-2",
    }
    assert tracker.moves(snap) == []  # type: ignore[arg-type]


def test_a_forgotten_device_that_returns_is_new() -> None:
    from edgefd.bus.key import DeviceKey
    from edgefd.bus.key import DevNode as BusNode
    from edgefd.inventory.device import Device
    from edgefd.inventory.snapshot import Diff, Snapshot

    def snap(*devices: Device) -> Snapshot:
        return Snapshot(seq=1, time=1.0, devices=devices, scans={}, held={}, diff=Diff())

    key = DeviceKey("usb", "1-1")
    dev = Device(
        "ncs2-1-1", key, "ncs2", "myriadx", nodes=(BusNode("/dev/bus/usb/001/002", "189:1"),)
    )
    moved = dev._replace(nodes=(BusNode("/dev/bus/usb/001/003", "189:2"),))
    tracker = MoveTracker()
    assert [m.old for m in tracker.moves(snap(dev))] == [None]  # the catch-up
    assert tracker.moves(snap()) == tracker.moves(snap(moved)) == []
    no_number = moved._replace(nodes=(BusNode("/dev/bus/usb/001/004", None),))
    assert tracker.moves(snap(no_number)) == []  # nothing a cgroup could name


def test_the_ref_finds_holders_by_either_api_under_any_resource() -> None:
    inv_name = "coral-usb-2-1"
    ref = DeviceRef(
        inv_name, ids=frozenset({inv_name}), dra=frozenset({("edgefd.io", "", inv_name)})
    )
    pods = [
        _pod("ns", "plugin", [_plugin("app", "edgefd.io/coral-usb", inv_name)]),
        _pod("ns", "custom", [_plugin("app", "example.com/tpu", f"{inv_name}-r2")]),
        _pod("ns", "dra", [_dra("app", "edgefd.io", "node7", inv_name)]),
        _pod("ns", "neighbour", [_plugin("app", "edgefd.io/coral-usb", "coral-usb-2-2")]),
        _pod("ns", "lookalike", [_plugin("app", "edgefd.io/coral-usb", f"{inv_name}-rx")]),
        _pod("ns", "other-driver", [_dra("app", "gpu.example.com", "node7", inv_name)]),
    ]  # fmt: skip
    assert [(h.pod, h.via) for h in holders(pods, ref)] == [
        ("custom", "device-plugin"),
        ("dra", "dra"),
        ("plugin", "device-plugin"),
    ]


class _Recorder:
    """Stands in for the kubelet and the runtime: who was asked about what."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def list(self) -> list[object]:
        return []


def test_the_running_inventory_feeds_the_service_and_stops_on_request(rpi: Path) -> None:
    """serve without --events: the watcher sees the re-enumeration, the service gets the move
    on its own thread (dry run: nobody holds it), /readyz says what is followed."""
    metrics = KeeperMetrics()
    fast = dict(poll_interval=0.05, rescan_interval=0.5)
    watching = watch_inventory(str(rpi), "node1", **fast, metrics=metrics, use_uevents=False)
    assert isinstance(watching, Watching) and watching.readyz()[0] is False
    keeper = Keeper(_Recorder(), None, "/nonexistent", "/proc", metrics, dry_run=True)  # type: ignore[arg-type]
    reported: list[Move] = []

    class Stop:
        stop_requested = False

        def wait(self, timeout: float) -> None:
            threading.Event().wait(min(timeout, 0.02))

    stop = Stop()
    t = threading.Thread(target=watching.run, args=(keeper, lambda m, d: reported.append(m), stop))
    t.start()
    try:
        wait_until(lambda: watching.readyz()[0], timeout=10)
        assert watching.readyz()[1].startswith("following 2 device(s)")
        boot = _node(watching.inventory, "coral-usb-2-1")
        hb = HostBuilder(rpi)
        hb.remove_usb("2-1")
        hb.add_usb(CORAL_RUNTIME)
        wait_until(lambda: _moved(reported), timeout=10)
    finally:
        stop.stop_requested = True
        t.join(timeout=10)
    assert not t.is_alive()
    catch_ups = [m.device.name for m in reported if m.old is None]
    assert catch_ups == ["coral-usb-2-1", "ncs2-1-1-1"]
    [move] = _moved(reported)
    assert (move.device.name, move.old, move.new) == ("coral-usb-2-1", boot, DevNode("c", 189, 136))
    assert metrics.value("edgefd_device_keeper_moves_total") == 1
    assert watching.healthz()[0]


def test_the_source_ends_when_stopped() -> None:
    source = InventorySource(MoveTracker())
    source.stop()
    assert list(source) == []
