"""The DRA view of one snapshot (table.py): every device a configured resource selects, under
its one name, present or remembered, with the first of its resources that the configuration
has (a device no configured resource selects is not in the pool), its attributes, and its
ResourceSlice entry (a remembered device tainted)."""

from __future__ import annotations

from dataclasses import replace

from edgefd.devplugin.dra import slices
from edgefd.devplugin.dra.table import build
from edgefd.devplugin.resources import Config
from edgefd.inventory.device import Device
from edgefd.inventory.snapshot import Diff, Snapshot
from tests.devplugin.devices import CORAL, PCIE, apex, coral


def snapshot(*devices: Device) -> Snapshot:
    return Snapshot(seq=1, time=0.0, devices=devices, scans={}, held={}, diff=Diff())


def test_each_selected_device_once_with_the_first_configured_resource() -> None:
    tpu = replace(CORAL, name="example.com/tpu")
    usb = coral(resources=("example.com/tpu", CORAL.name))
    gone = coral(port="1-1.2", resources=(CORAL.name,), present=False, reason="unplugged")
    stray = coral(port="1-1.3", resources=("example.com/not-configured",))
    snap = snapshot(usb, gone, stray, apex(resources=(PCIE.name,)))
    both = build(snap, Config((CORAL, tpu, PCIE)))
    assert {n: e.resource.name for n, e in both.items()} == {
        "coral-usb-2-1": "example.com/tpu",  # its first resource, not the configuration's
        "coral-usb-1-1-2": CORAL.name,
        "coral-pcie-0000-02-00-0": PCIE.name,
    }
    only = build(snap, Config((CORAL,)))
    assert {n: e.resource.name for n, e in only.items()} == {
        "coral-usb-2-1": CORAL.name,
        "coral-usb-1-1-2": CORAL.name,
    }
    entry = only["coral-usb-1-1-2"]
    assert (entry.name, entry.device, entry.attributes) == (
        "coral-usb-1-1-2",
        gone,
        slices.attributes(gone),
    )
    assert entry.api() == slices.api_device(entry.name, entry.attributes, gone)
    assert entry.api()["taints"][0]["value"] == "unplugged"
    assert "taints" not in only["coral-usb-2-1"].api()


def test_nothing_selected_is_an_empty_table() -> None:
    assert build(snapshot(coral()), Config((CORAL,))) == {}  # selected by no resource
    assert build(snapshot(), Config((CORAL,))) == {}
