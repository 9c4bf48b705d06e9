"""`serve`'s own source of moves, `Following` on the keeper's inventory (watch.py): built as
devplugin builds its own, so a serial-named and a custom-ID device are followed under
devplugin's names, and a configuration change follows devplugin's new names; running, the
inventory's moves reach the service on the worker's thread, /readyz says what is followed, and
a worker that dies ends the process with its error."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.device_keeper.holders import holders
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.rules import DeviceNumber
from edgefd.device_keeper.service import Keeper, Move
from edgefd.device_keeper.source import MoveTracker
from edgefd.device_keeper.watch import Following, keeper_inventory
from edgefd.inventory.resources import default_config, parse_config
from edgefd.runtime.runner import Lifeline
from tests.fixturegen import HostBuilder
from tests.helpers import wait_until

from .keeper_inventory import (
    CORAL_RUNTIME,
    FAST,
    Recorder,
    fast_inventory,
    node_of,
    without_catch_ups,
)
from .pods import plugin, pod


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
    host: Path, document: str, port: str, after: dict, name: str
) -> None:
    import yaml

    from edgefd.devplugin.app import Options, make_inventory

    config = parse_config(yaml.safe_load(document), "test")
    inv, hb, tracker = fast_inventory(host, config), HostBuilder(host), MoveTracker("node1")
    first = inv.refresh()
    theirs = make_inventory(Options("/nonexistent", HostRoot.of(host)), config).scan()
    assert name in {d.name for d in theirs.devices if d.resources}  # devplugin's name for it
    [catch_up] = [m for m in tracker.moves(first) if m.device.name == name]  # type: ignore[arg-type]
    hb.remove_usb(port)
    hb.add_usb({"port": port, **after})
    [move] = tracker.moves(inv.refresh())  # type: ignore[arg-type]
    assert move.device.name == name and move.old == catch_up.new != move.new
    assert move.container_path == f"/dev/edgefd/{name}"
    pods = [pod("ns", "app", [plugin("c", config.resources[0].name, f"{name}-r1")])]
    assert [h.pod for h in holders(pods, move.device)] == ["app"]  # a replica ID is the device


def test_the_running_inventory_feeds_the_service_and_stops_on_request(host: Path) -> None:
    """serve without --events: the watcher sees the re-enumeration, the service gets the move
    on its own thread (dry run: nobody holds it), /readyz says what is followed."""
    metrics = KeeperMetrics()
    inventory = keeper_inventory(str(host), default_config(), FAST, metrics, use_uevents=False)
    keeper = Keeper(Recorder(), None, "/nonexistent", "/proc", metrics, dry_run=True)  # type: ignore[arg-type]
    reported: list[Move] = []
    lifeline = Lifeline()
    following = Following(inventory, keeper, lambda m, d: reported.append(m), lifeline, "node1")
    assert following.ready()[0] is False
    following.start()
    try:
        wait_until(lambda: following.ready()[0], timeout=10)
        assert following.ready()[1].startswith("following 2 device(s)")
        boot = node_of(inventory, "coral-usb-2-1")
        hb = HostBuilder(host)
        hb.remove_usb("2-1")
        hb.add_usb(CORAL_RUNTIME)
        wait_until(lambda: without_catch_ups(reported), timeout=10)
    finally:
        following.stop()
    assert not following.worker.thread.is_alive() and not lifeline.stopping
    catch_ups = [m.device.name for m in reported if m.old is None]
    assert catch_ups == ["coral-usb-2-1", "ncs2-1-1-1"]
    [move] = without_catch_ups(reported)
    assert (move.device.name, move.old, move.new) == (
        "coral-usb-2-1",
        boot,
        DeviceNumber("c", 189, 136),
    )
    assert metrics.value("edgefd_device_keeper_moves_total") == 1
    assert following.alive()[0]


def test_a_worker_that_dies_ends_the_process_with_its_error(host: Path) -> None:
    class Broken(Keeper):
        def run(self, source, report):  # type: ignore[no-untyped-def,override]
            raise RuntimeError("a bug")

    metrics = KeeperMetrics()
    inventory = keeper_inventory(str(host), default_config(), FAST, metrics, use_uevents=False)
    keeper = Broken(Recorder(), None, "/nonexistent", "/proc", metrics, dry_run=True)  # type: ignore[arg-type]
    lifeline = Lifeline()
    following = Following(inventory, keeper, lambda m, d: None, lifeline, "node1")
    following.start()
    try:
        wait_until(lambda: lifeline.stopping, timeout=10)
    finally:
        following.stop()
    assert isinstance(lifeline.failure, RuntimeError)


def test_a_configuration_change_follows_devplugins_new_names(host: Path) -> None:
    import yaml

    inv = fast_inventory(host)
    metrics = KeeperMetrics()
    keeper = Keeper(Recorder(), None, "/nonexistent", "/proc", metrics, dry_run=True)  # type: ignore[arg-type]
    following = Following(inv, keeper, lambda m, d: None, Lifeline(), "node1")
    inv.refresh()
    assert inv.snapshot.device("ncs2-1-1-1") is not None  # type: ignore[union-attr]
    doc = "resources: [{name: edgefd.io/ncs2, accelerator: ncs2, id_from: serial}]"
    following.reconfigure(parse_config(yaml.safe_load(doc), "new"))
    served = {d.name for d in inv.snapshot.devices if d.present and d.resources}  # type: ignore[union-attr]
    assert served == {"ncs2-sn-03e72485"}
