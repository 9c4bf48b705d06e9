"""The Allocate answer and the preferred allocation (allocate.py), pure functions of the
devices, the resource and the link layout: a USB device's link at its container path with the
read-only bus mount, a PCI device's own node name, the raw node without links, CDI names
(never one without a spec on disk), replicas folding into their device, unknown IDs refused,
and the preferred IDs spread over devices."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.bus.catalogue import UsbId as UsbMatch
from edgefd.bus.key import DeviceKey, DevNode
from edgefd.devplugin.cdi import cdi_name
from edgefd.devplugin.links import LinkLayout
from edgefd.devplugin.resources import Resource, parse_config
from edgefd.devplugin.v1beta1.advertised import Advertised
from edgefd.devplugin.v1beta1.allocate import (
    UnknownDevice,
    container_response,
    preferred,
    resolve,
)
from edgefd.inventory.device import Device
from tests.devplugin import devices

CORAL = Resource(
    name="edgefd.io/coral-usb",
    usb=(UsbMatch("1a6e", "089a", "boot"), UsbMatch("18d1", "9302", "runtime")),
    env=(("EDGETPU", "1"),),
)


def _cfg(*resources: dict, **top: object) -> dict:
    return {"resources": list(resources), **top}


def _dev(name: str, node: str = "/dev/x", bus: str = "usb", place: str = "1-1") -> Device:
    return Device(name, DeviceKey(bus, place), "m", "m", nodes=(DevNode(node, None),))


USB_DEV = _dev("coral-usb-1-1-3", "/dev/bus/usb/001/004", "usb", "1-1.3")
PCI_DEV = _dev("coral-pcie-0000-02-00-0", "/dev/apex_0", "pci", "0000:02:00.0")
LINKS = LinkLayout("/var/lib/kubelet/device-plugins/edgefd-links")


def test_usb_allocate_uses_links_alias_and_bus_mount() -> None:
    r = container_response(CORAL, [USB_DEV], LINKS)
    assert [(d.container_path, d.host_path, d.permissions) for d in r.devices] == [
        (
            "/dev/edgefd/coral-usb-1-1-3",
            "/var/lib/kubelet/device-plugins/edgefd-links/edgefd.io_coral-usb/coral-usb-1-1-3/0",
            "rw",
        )
    ]
    assert [(m.container_path, m.host_path, m.read_only) for m in r.mounts] == [
        ("/dev/bus/usb", "/dev/bus/usb", True)
    ]
    assert dict(r.envs) == {"EDGETPU": "1", "EDGEFD_CORAL_USB_DEVICES": "coral-usb-1-1-3"}
    assert list(r.cdi_devices) == []


def test_allocate_without_links_or_mount_gives_the_raw_node() -> None:
    res = Resource(name="edgefd.io/coral-usb", usb=CORAL.usb, usb_bus_mount=False)
    r = container_response(res, [USB_DEV], LinkLayout(None))
    assert [(d.container_path, d.host_path) for d in r.devices] == [
        ("/dev/bus/usb/001/004", "/dev/bus/usb/001/004")
    ]
    assert list(r.mounts) == []


def test_pci_allocate_keeps_node_name_and_adds_cdi() -> None:
    res = parse_config(
        _cfg(
            {
                "name": "edgefd.io/coral-pcie",
                "accelerator": "coral-pcie",
                "mounts": [{"host_path": "/usr/lib/edgetpu", "read_only": False}],
            }
        ),
        "x",
    ).resources[0]
    r = container_response(res, [PCI_DEV], LINKS, cdi_prefix="edgefd.io")
    assert [(d.container_path, d.host_path) for d in r.devices] == [
        (
            "/dev/apex_0",
            "/var/lib/kubelet/device-plugins/edgefd-links/edgefd.io_coral-pcie/"
            "coral-pcie-0000-02-00-0/0",
        )
    ]
    assert [c.name for c in r.cdi_devices] == ["edgefd.io/coral-pcie=coral-pcie-0000-02-00-0"]
    assert [(m.host_path, m.read_only) for m in r.mounts] == [("/usr/lib/edgetpu", False)]
    assert r.envs["EDGEFD_CORAL_PCIE_DEVICES"] == "coral-pcie-0000-02-00-0"
    assert cdi_name("vendor.com/tpu", res, "x") == "vendor.com/tpu=x"


def test_without_a_spec_registry_allocate_never_names_cdi_devices(tmp_path: Path) -> None:
    layout = LinkLayout(None, cdi_spec_dir=str(tmp_path))
    r = container_response(devices.CORAL, [devices.coral()], layout, "edgefd.io", None)
    assert not r.cdi_devices and r.devices


def test_resolve_folds_replicas_and_refuses_unknown_ids() -> None:
    adv = Advertised.build([USB_DEV, PCI_DEV], 2)
    devs = resolve(["coral-usb-1-1-3-r1", "coral-usb-1-1-3-r0"], adv.by_kubelet_id)
    assert devs == [USB_DEV]
    with pytest.raises(UnknownDevice) as e:
        resolve(["coral-usb-9-9"], adv.by_kubelet_id)
    assert "unknown device ID(s) coral-usb-9-9" in str(e.value)
    assert "coral-pcie-0000-02-00-0-r0" in str(e.value)


def test_preferred_allocation_spreads_over_devices() -> None:
    devs = [_dev("a"), _dev("b"), _dev("c")]
    adv = Advertised.build(devs, 2)
    ids = sorted(adv.by_kubelet_id)
    assert preferred(ids, [], 3, adv.by_kubelet_id) == ["a-r0", "b-r0", "c-r0"]
    # a-r0 and b-r0 are in use elsewhere: c is idle, so it comes first
    avail = [i for i in ids if i not in ("a-r0", "b-r0")]
    assert preferred(avail, [], 2, adv.by_kubelet_id) == ["c-r0", "a-r1"]
    # must_include is kept and counts as load on its device
    assert preferred(ids, ["a-r1"], 2, adv.by_kubelet_id) == ["a-r1", "b-r0"]
    assert preferred(["a-r0"], [], 5, adv.by_kubelet_id) == ["a-r0"]
