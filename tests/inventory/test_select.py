"""What the selectors pick, through the inventory on the x86 fixture host: devices by
catalogue model, kind, own PCI and USB IDs (a serial-named one), and bare /dev globs; the
first selector decides a device's nodes, every selecting resource is listed in order, and IDs
the catalogue does not know make a device named by its resource."""

from __future__ import annotations

from pathlib import Path

from edgefd.bus.catalogue import PciId, UsbId
from edgefd.bus.key import DeviceKey, DevNode
from edgefd.inventory.select import Selector
from tests.fixturegen import build_host

from .inventories import inventory


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
