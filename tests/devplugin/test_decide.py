"""What devplugin decides for each device it serves, written for device-keeper (decide.py), on
fixture hosts through devplugin's own inventory: the kubelet IDs and DRA device, and at which
container path and number each node is given, by the resource's own rule (a USB device beside
the host's bus at /dev/edgefd/<name>, without the bus at its bus path, a PCI device at its own
node); a re-enumeration is a new version the keeper turns into the move to make (the keeper's
MoveTracker reads the very file), with the pairs given before; nothing is rewritten when
nothing changed, and a restarted devplugin carries the history on."""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from edgefd.core.hostroot import HostRoot
from edgefd.device_keeper.moves import MoveTracker, number
from edgefd.devplugin.app import Options, make_inventory
from edgefd.devplugin.decide import DecisionsFile
from edgefd.devplugin.resources import Config, default_config, parse_config
from edgefd.inventory.decisions import read
from edgefd.inventory.inventory import Inventory
from tests.fixturegen import HostBuilder, build_host

CORAL_RUNTIME = {"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9}


def _follow(
    host: Path, tmp_path: Path, config: Config, device_plugin: bool = True, pool: str | None = None
) -> tuple[Inventory, DecisionsFile]:
    inv = make_inventory(Options("/nonexistent", HostRoot.of(host)), config)
    out = DecisionsFile(str(tmp_path / "decisions.json"), config, device_plugin, pool)
    inv.subscribe(out.on_snapshot)
    return inv, out


def _reenumerate(host: Path, runtime: dict = CORAL_RUNTIME) -> None:
    hb = HostBuilder(host)
    hb.remove_usb(runtime["port"])
    hb.add_usb(runtime)


def test_each_served_device_with_its_ids_its_dra_device_and_its_nodes(
    host: Path, tmp_path: Path
) -> None:
    config = parse_config(
        yaml.safe_load(
            "resources: [{name: edgefd.io/coral-usb, accelerator: coral-usb, replicas: 2},"
            " {name: edgefd.io/ncs2, accelerator: ncs2}]"
        ),
        "test",
    )
    inv, out = _follow(host, tmp_path, config, pool="node-1")
    inv.refresh()
    got = {h.device: h for h in read(out.path).handouts}  # type: ignore[union-attr]
    coral, ncs2 = got["coral-usb-2-1"], got["ncs2-1-1-1"]
    assert coral.plugin == (("edgefd.io/coral-usb", ("coral-usb-2-1-r0", "coral-usb-2-1-r1")),)
    assert coral.dra == (("edgefd.io", "node-1", "coral-usb-2-1"),)
    [node] = coral.nodes
    dev = inv.snapshot.device("coral-usb-2-1")  # type: ignore[union-attr]
    assert (node.path, node.number, node.was) == (
        "/dev/edgefd/coral-usb-2-1",
        f"c:{dev.nodes[0].dev}",
        (),
    )
    assert ncs2.plugin == (("edgefd.io/ncs2", ("ncs2-1-1-1",)),) and coral.present
    assert set(got) == {"coral-usb-2-1", "ncs2-1-1-1"}  # the webcam is selected by nothing


def test_only_the_apis_served_are_written(host: Path, tmp_path: Path) -> None:
    inv, out = _follow(host, tmp_path, default_config(), device_plugin=False, pool="n1")
    inv.refresh()
    [coral] = [h for h in read(out.path).handouts if h.device == "coral-usb-2-1"]  # type: ignore[union-attr]
    assert coral.plugin == () and coral.dra == (("edgefd.io", "n1", "coral-usb-2-1"),)
    inv, out = _follow(host, tmp_path / "dp", default_config())
    (tmp_path / "dp").mkdir()
    inv.refresh()
    [coral] = [h for h in read(out.path).handouts if h.device == "coral-usb-2-1"]  # type: ignore[union-attr]
    assert coral.dra == () and coral.plugin[0][0] == "edgefd.io/coral-usb"


def test_a_re_enumeration_is_the_move_the_keeper_reads(host: Path, tmp_path: Path) -> None:
    inv, out = _follow(host, tmp_path, default_config())
    tracker = MoveTracker()
    inv.refresh()
    catch_ups = tracker.moves(read(out.path))  # type: ignore[arg-type]
    boot = {m.device: m.new for m in catch_ups}["coral-usb-2-1"]
    HostBuilder(host).remove_usb("2-1")
    inv.refresh()  # away, re-enumerating: nothing moves
    assert tracker.moves(read(out.path)) == []  # type: ignore[arg-type]
    HostBuilder(host).add_usb(CORAL_RUNTIME)
    inv.refresh()
    decisions = read(out.path)
    [move] = tracker.moves(decisions)  # type: ignore[arg-type]
    assert (move.device, move.old, move.new) == ("coral-usb-2-1", boot, number("c:189:136"))
    assert move.path == move.old_path == "/dev/edgefd/coral-usb-2-1"
    assert move.seen == decisions.time == inv.snapshot.time  # type: ignore[union-attr]
    assert move.was == (("/dev/edgefd/coral-usb-2-1", boot),)


def test_without_the_bus_mount_the_node_is_given_at_its_bus_path_and_moves_with_it(
    host: Path, tmp_path: Path
) -> None:
    config = parse_config(
        yaml.safe_load(
            "resources: [{name: example.com/tpu, accelerator: coral-usb, usb_bus_mount: false}]"
        ),
        "test",
    )
    inv, out = _follow(host, tmp_path, config)
    tracker = MoveTracker()
    inv.refresh()
    [catch_up] = tracker.moves(read(out.path))  # type: ignore[arg-type]
    old_path = inv.snapshot.device("coral-usb-2-1").nodes[0].path  # type: ignore[union-attr]
    assert catch_up.path == old_path and old_path.startswith("/dev/bus/usb/002/")
    _reenumerate(host)
    inv.refresh()
    [move] = tracker.moves(read(out.path))  # type: ignore[arg-type]
    assert (move.old_path, move.path) == (old_path, "/dev/bus/usb/002/009")
    assert move.was == ((old_path, catch_up.new),)  # where a container made before has it


def test_a_pci_device_at_its_own_node_moves_its_number_in_place(tmp_path: Path) -> None:
    host = build_host("x86-coral-pcie", tmp_path / "x86", devicetree=False)
    inv, out = _follow(host, tmp_path, default_config())
    tracker = MoveTracker()
    inv.refresh()
    [catch_up] = tracker.moves(read(out.path))  # type: ignore[arg-type]
    assert (catch_up.device, catch_up.path, catch_up.new) == (
        "coral-pcie-0000-02-00-0",
        "/dev/apex_0",
        number("c:509:0"),
    )
    hb = HostBuilder(host)  # the driver reloaded: the same function, another minor
    desc = yaml.safe_load((Path("tests/fixtures/nodes/x86-coral-pcie.yaml")).read_text())
    [apex] = [d for d in desc["pci"] if d["address"] == "0000:02:00.0"]
    apex["class_devices"][0]["minor"] = 1
    hb.remove_pci("0000:02:00.0")
    hb.add_pci(apex)
    inv.refresh()
    [move] = tracker.moves(read(out.path))  # type: ignore[arg-type]
    assert (move.path, move.old, move.new) == ("/dev/apex_0", number("c:509:0"), number("c:509:1"))


def test_two_resources_giving_one_device_at_two_paths_are_two_handouts(
    host: Path, tmp_path: Path
) -> None:
    config = parse_config(
        yaml.safe_load(
            "resources: [{name: edgefd.io/coral-usb, accelerator: coral-usb},"
            " {name: example.com/raw, accelerator: coral-usb, usb_bus_mount: false}]"
        ),
        "test",
    )
    inv, out = _follow(host, tmp_path, config, pool="n1")
    inv.refresh()
    mine = [h for h in read(out.path).handouts if h.device == "coral-usb-2-1"]  # type: ignore[union-attr]
    assert [(h.plugin[0][0], h.dra, h.nodes[0].path[:13]) for h in mine] == [
        ("edgefd.io/coral-usb", (("edgefd.io", "n1", "coral-usb-2-1"),), "/dev/edgefd/c"),
        ("example.com/raw", (), "/dev/bus/usb/"),  # DRA gives it as its first resource
    ]


def test_nothing_rewritten_when_nothing_changed_and_a_restart_carries_history_on(
    host: Path, tmp_path: Path
) -> None:
    inv, out = _follow(host, tmp_path, default_config())
    inv.refresh()
    before = out.path.stat()
    inv.refresh()
    after = out.path.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    boot = read(out.path).by_key()  # type: ignore[union-attr]
    _reenumerate(host)
    inv2, out2 = _follow(host, tmp_path, default_config())  # a restarted devplugin
    inv2.refresh()
    [coral] = [h for h in read(out2.path).handouts if h.device == "coral-usb-2-1"]  # type: ignore[union-attr]
    [was_node] = boot[coral.key].nodes
    assert coral.nodes[0].was == (was_node.pair,)


def test_a_file_it_cannot_write_is_said_once_and_nothing_raises(
    host: Path, tmp_path: Path, caplog
) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "decisions.json").mkdir()  # a directory in its place
    inv = make_inventory(Options("/nonexistent", HostRoot.of(host)), default_config())
    out = DecisionsFile(str(tmp_path / "ro" / "decisions.json"), default_config(), True)
    inv.subscribe(out.on_snapshot)
    with caplog.at_level(logging.ERROR):
        inv.refresh()
        _reenumerate(host)
        inv.refresh()
    said = [r for r in caplog.records if "device-keeper cannot follow moves" in r.getMessage()]
    assert len(said) == 1
