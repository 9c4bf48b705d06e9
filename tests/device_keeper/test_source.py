"""The keeper's own source of moves: the device inventory on fixture hosts, built from the same
resources configuration as devplugin's, where a device re-enumerates (same place, new IDs and
major:minor). Exactly the devices devplugin serves that came back with another node move, from
the node last seen present to the node there now, under devplugin's own names (a serial-named
and a custom-ID device included); and the moves reach the service through a running inventory
(the hot-plug watcher), one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.device_keeper.holders import DeviceRef, holders
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.rules import DeviceNumber
from edgefd.device_keeper.service import Keeper, Move
from edgefd.device_keeper.source import InventorySource, MoveTracker, char_node
from edgefd.device_keeper.watch import Following, keeper_inventory
from edgefd.inventory.inventory import Inventory
from edgefd.inventory.resources import Config, default_config, parse_config
from edgefd.runtime.runner import Lifeline
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import wait_until

from .test_holders import _dra, _plugin, _pod

CORAL_RUNTIME = {"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9}
FAST = WatchSettings(poll_interval=0.05, rescan_interval=0.5)


@pytest.fixture
def rpi(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "rpi", devicetree=False)


def _inventory(root: Path, config: Config | None = None) -> Inventory:
    return keeper_inventory(str(root), config or default_config(), FAST, KeeperMetrics())


def _moved(moves: list[Move]) -> list[Move]:
    """Moves proper, without the first look's catch-ups (old None)."""
    return [m for m in moves if m.old is not None]


def _node(inv: Inventory, name: str) -> DeviceNumber:
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


def test_a_re_plug_between_two_scans_moves_too_and_from_the_last_node(rpi: Path) -> None:
    inv, hb, tracker = _inventory(rpi), HostBuilder(rpi), MoveTracker()
    tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("2-1")
    hb.add_usb(CORAL_RUNTIME)
    [first] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    hb.remove_usb("2-1")
    hb.add_usb({**CORAL_RUNTIME, "devnum": 12})
    [second] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert second.old == first.new and second.new == DeviceNumber("c", 189, 139)
    assert second.device.dra == frozenset({("edgefd.io", "", "coral-usb-2-1")})  # any pool


def test_another_model_at_the_port_or_a_new_device_moves_nothing(rpi: Path) -> None:
    inv, hb, tracker = _inventory(rpi), HostBuilder(rpi), MoveTracker()
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
    assert tracker.moves(snap) == []  # type: ignore[arg-type]


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


@pytest.mark.parametrize(
    ("document", "port", "after", "name"),
    [
        (  # named by its serial: the NCS2 boots (03e7:2485 -> 03e7:f63b), same serial
            "resources: [{name: edgefd.io/ncs2, accelerator: ncs2, id_from: serial}]",
            "1-1.1",
            {"vendor": "03e7", "product": "f63b", "serial": "03e72485", "class": "00",
             "interfaces": [{"class": "ff"}], "devnum": 40},
            "ncs2-sn-03e72485",
        ),
        (  # selected by IDs of its own resource (no catalogue model): the webcam, re-plugged
            "resources: [{name: example.com/cam, usb: [{vendor: '046d', product: '0825'}]}]",
            "1-1.3",
            {"vendor": "046d", "product": "0825", "class": "ef", "devnum": 41},
            "cam-1-1-3",
        ),
    ],
)  # fmt: skip
def test_a_serial_named_and_a_custom_id_device_are_followed_as_devplugin_names_them(
    rpi: Path, document: str, port: str, after: dict, name: str
) -> None:
    import yaml

    from edgefd.devplugin.app import Options, make_inventory

    config = parse_config(yaml.safe_load(document), "test")
    inv, hb, tracker = _inventory(rpi, config), HostBuilder(rpi), MoveTracker("node1")
    first = inv.refresh()
    theirs = make_inventory(Options("/nonexistent", HostRoot.of(rpi)), config).scan()
    assert name in {d.name for d in theirs.devices if d.resources}  # devplugin's name for it
    [catch_up] = [m for m in tracker.moves(first) if m.device.name == name]  # type: ignore[arg-type]
    hb.remove_usb(port)
    hb.add_usb({"port": port, **after})
    [move] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert move.device.name == name and move.old == catch_up.new != move.new
    assert move.container_path == f"/dev/edgefd/{name}"
    pods = [_pod("ns", "app", [_plugin("c", config.resources[0].name, f"{name}-r1")])]
    assert [h.pod for h in holders(pods, move.device)] == ["app"]  # a replica ID is the device


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
    inventory = keeper_inventory(str(rpi), default_config(), FAST, metrics, use_uevents=False)
    keeper = Keeper(_Recorder(), None, "/nonexistent", "/proc", metrics, dry_run=True)  # type: ignore[arg-type]
    reported: list[Move] = []
    lifeline = Lifeline()
    following = Following(inventory, keeper, lambda m, d: reported.append(m), lifeline, "node1")
    assert following.ready()[0] is False
    following.start()
    try:
        wait_until(lambda: following.ready()[0], timeout=10)
        assert following.ready()[1].startswith("following 2 device(s)")
        boot = _node(inventory, "coral-usb-2-1")
        hb = HostBuilder(rpi)
        hb.remove_usb("2-1")
        hb.add_usb(CORAL_RUNTIME)
        wait_until(lambda: _moved(reported), timeout=10)
    finally:
        following.stop()
    assert not following.worker.thread.is_alive() and not lifeline.stopping
    catch_ups = [m.device.name for m in reported if m.old is None]
    assert catch_ups == ["coral-usb-2-1", "ncs2-1-1-1"]
    [move] = _moved(reported)
    assert (move.device.name, move.old, move.new) == (
        "coral-usb-2-1",
        boot,
        DeviceNumber("c", 189, 136),
    )
    assert metrics.value("edgefd_device_keeper_moves_total") == 1
    assert following.alive()[0]


def test_a_worker_that_dies_ends_the_process_with_its_error(rpi: Path) -> None:
    class Broken(Keeper):
        def run(self, source, report):  # type: ignore[no-untyped-def,override]
            raise RuntimeError("a bug")

    metrics = KeeperMetrics()
    inventory = keeper_inventory(str(rpi), default_config(), FAST, metrics, use_uevents=False)
    keeper = Broken(_Recorder(), None, "/nonexistent", "/proc", metrics, dry_run=True)  # type: ignore[arg-type]
    lifeline = Lifeline()
    following = Following(inventory, keeper, lambda m, d: None, lifeline, "node1")
    following.start()
    try:
        wait_until(lambda: lifeline.stopping, timeout=10)
    finally:
        following.stop()
    assert isinstance(lifeline.failure, RuntimeError)


def test_a_configuration_change_follows_devplugins_new_names(rpi: Path) -> None:
    import yaml

    inv = _inventory(rpi)
    metrics = KeeperMetrics()
    keeper = Keeper(_Recorder(), None, "/nonexistent", "/proc", metrics, dry_run=True)  # type: ignore[arg-type]
    following = Following(inv, keeper, lambda m, d: None, Lifeline(), "node1")
    inv.refresh()
    assert inv.snapshot.device("ncs2-1-1-1") is not None  # type: ignore[union-attr]
    doc = "resources: [{name: edgefd.io/ncs2, accelerator: ncs2, id_from: serial}]"
    following.reconfigure(parse_config(yaml.safe_load(doc), "new"))
    served = {d.name for d in inv.snapshot.devices if d.present and d.resources}  # type: ignore[union-attr]
    assert served == {"ncs2-sn-03e72485"}


def test_the_source_ends_when_stopped() -> None:
    source = InventorySource(MoveTracker())
    source.stop()
    assert list(source) == []
