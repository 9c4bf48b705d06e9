"""The keeper's own source of moves (source.py): the device inventory on fixture hosts, where a
device re-enumerates (same place, new IDs and major:minor). The first snapshot is a catch-up
of every served device; then exactly the devices devplugin serves that came back with another
node move, from the node last seen present to the node there now; another model at the port,
a new device, a forgotten one that returns and one without a number move nothing; the source
ends when stopped."""

from __future__ import annotations

from pathlib import Path

from edgefd.device_keeper.holders import DeviceRef
from edgefd.device_keeper.rules import DeviceNumber
from edgefd.device_keeper.source import InventorySource, MoveTracker
from tests.fixturegen import HostBuilder

from .keeper_inventory import CORAL_RUNTIME, fast_inventory, node_of, without_catch_ups


def test_a_re_enumeration_across_scans_is_one_move_from_the_granted_node(host: Path) -> None:
    inv, hb, tracker = fast_inventory(host), HostBuilder(host), MoveTracker("node1")
    snaps = [inv.refresh()]
    boot = node_of(inv, "coral-usb-2-1")
    hb.remove_usb("2-1")
    snaps.append(inv.refresh())  # away: re-enumerating, the boot node still its last
    hb.add_usb(CORAL_RUNTIME)
    snaps.append(inv.refresh())
    moves = [tracker.moves(s) for s in snaps]  # type: ignore[arg-type]
    # the first scan is a catch-up of every present device; an absence moves nothing
    assert [(m.device.name, m.old, m.new) for m in moves[0]] == [
        ("coral-usb-2-1", None, boot),
        ("ncs2-1-1-1", None, DeviceNumber("c", 189, 2)),
    ]
    assert moves[1] == []
    [move] = moves[2]
    assert (move.old, move.new) == (boot, DeviceNumber("c", 189, 136))
    assert move.container_path == "/dev/edgefd/coral-usb-2-1"
    assert move.seen == snaps[2].time  # type: ignore[union-attr]
    assert move.device == DeviceRef(
        "coral-usb-2-1",
        ids=frozenset({"coral-usb-2-1"}),
        dra=frozenset({("edgefd.io", "node1", "coral-usb-2-1")}),
    )
    assert tracker.moves(inv.refresh()) == []  # type: ignore[arg-type]  # a rescan: nothing


def test_a_re_plug_between_two_scans_moves_too_and_from_the_last_node(host: Path) -> None:
    inv, hb, tracker = fast_inventory(host), HostBuilder(host), MoveTracker()
    tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("2-1")
    hb.add_usb(CORAL_RUNTIME)
    [first] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("2-1")
    hb.add_usb({**CORAL_RUNTIME, "devnum": 12})
    [second] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert second.old == first.new and second.new == DeviceNumber("c", 189, 139)
    assert second.device.dra == frozenset({("edgefd.io", "", "coral-usb-2-1")})  # any pool


def test_another_model_at_the_port_or_a_new_device_moves_nothing(host: Path) -> None:
    inv, hb, tracker = fast_inventory(host), HostBuilder(host), MoveTracker()
    tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("1-1.3")  # not a device devplugin serves (the webcam): never followed
    hb.add_usb({"port": "1-1.3", "vendor": "046d", "product": "0825", "class": "ef"})
    hb.remove_usb("1-1.1")  # the NCS2 goes; a Coral takes its port: another device
    hb.add_usb({"port": "1-1.1", "vendor": "18d1", "product": "9302", "devnum": 30})
    hb.add_usb({"port": "1-1.2", "vendor": "03e7", "product": "2485", "devnum": 31})
    snap = inv.refresh()
    assert {c.name for c in snap.diff.changes} == {  # type: ignore[union-attr]
        "coral-usb-1-1-1",
        "ncs2-1-1-1",
        "ncs2-1-1-2",
    }
    # no moves; the two served devices new to this process are caught up (nobody may hold
    # them, but one away at the keeper's start may be held already)
    got = tracker.moves(snap)  # type: ignore[arg-type]
    assert without_catch_ups(got) == []
    assert sorted(m.device.name for m in got) == ["coral-usb-1-1-1", "ncs2-1-1-2"]


def test_a_device_away_at_the_first_scan_is_caught_up_when_it_comes(host: Path) -> None:
    """Issue 30 item 6: a Coral loading its firmware as the keeper starts is not in the first
    scan; when it appears it is caught up (its holders were given its boot node), once."""
    hb = HostBuilder(host)
    hb.remove_usb("2-1")
    inv, tracker = fast_inventory(host), MoveTracker()
    first = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert "coral-usb-2-1" not in {m.device.name for m in first}
    hb.add_usb(CORAL_RUNTIME)
    [move] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert (move.device.name, move.old, move.new) == (
        "coral-usb-2-1",
        None,
        DeviceNumber("c", 189, 136),
    )
    hb.remove_usb("2-1")
    tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.add_usb({**CORAL_RUNTIME, "devnum": 12})
    [again] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert (again.old, again.new) == (move.new, DeviceNumber("c", 189, 139))  # a move now


def test_a_forgotten_device_that_returns_is_new() -> None:
    from edgefd.bus.key import DeviceKey
    from edgefd.bus.key import DevNode as BusNode
    from edgefd.inventory.device import Device
    from edgefd.inventory.snapshot import Snapshot, diff

    shots: list[Snapshot] = []

    def snap(*devices: Device) -> Snapshot:
        before = {d.name: d for d in shots[-1].devices} if shots else {}
        shots.append(
            Snapshot(
                seq=len(shots) + 1,
                time=1.0,
                devices=devices,
                scans={},
                held={},
                diff=diff(before, {d.name: d for d in devices}),
            )
        )
        return shots[-1]

    key = DeviceKey("usb", "1-1")
    node = BusNode("/dev/bus/usb/001/002", "189:1")
    dev = Device("ncs2-1-1", key, "ncs2", "myriadx", nodes=(node,), resources=("edgefd.io/ncs2",))
    moved = dev._replace(nodes=(BusNode("/dev/bus/usb/001/003", "189:2"),))
    tracker = MoveTracker()
    assert [m.old for m in tracker.moves(snap(dev))] == [None]  # the catch-up
    assert tracker.moves(snap()) == tracker.moves(snap(moved)) == []  # forgotten, then new
    no_number = moved._replace(nodes=(BusNode("/dev/bus/usb/001/004", None),))
    assert tracker.moves(snap(no_number)) == []  # nothing a cgroup could name
    unserved = dev._replace(resources=())
    assert tracker.moves(snap(unserved)) == []  # devplugin does not hand it out: not followed


def test_the_source_ends_when_stopped() -> None:
    source = InventorySource(MoveTracker())
    source.stop()
    assert list(source) == []
