"""Where a device is and the character devices it has, the two facts every consumer keys on
(edgefd.bus.key): what the bus readers put in every record (its key, its nodes with the
kernel's char numbers), the key in words for people, and a sysfs `dev` attribute read as a
number only when it is one."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.bus import pci, usb
from edgefd.bus.key import DeviceKey, DevNode, dev_number
from edgefd.core.hostroot import HostRoot


def test_records_carry_their_key_node_numbers_and_facts(tmp_path: Path) -> None:
    """What every consumer keys on (where it is) and what follows a device (its node and the
    node's char number), read by the bus layer alone."""
    from tests.fixturegen import build_host

    rpi = HostRoot.of(build_host("rpi4-coral", tmp_path / "rpi", devicetree=False))
    coral = next(d for d in usb.scan(rpi).devices if d.name == "2-1")
    assert coral.key == DeviceKey("usb", "2-1") and str(coral.key) == "usb 2-1"
    [node] = coral.nodes
    assert node.path == coral.devnode and node.path.startswith("/dev/bus/usb/002/")
    devnum = int(node.path.rsplit("/", 1)[1])
    assert node.dev == f"189:{128 + devnum - 1}"
    assert coral.bcd_device == "0100"
    x86 = HostRoot.of(build_host("x86-server", tmp_path / "x86", devicetree=False))
    apex = next(d for d in pci.scan(x86).devices if d.address == "0000:02:00.0")
    assert apex.key == DeviceKey("pci", "0000:02:00.0")
    assert apex.nodes == (DevNode("/dev/apex_0", "120:0"),) and apex.devnodes == ("/dev/apex_0",)
    assert apex.pcie_root == "pci0000:00"


def test_a_key_in_words_and_a_node_as_people_read_them() -> None:
    assert DeviceKey("usb", "1-1.3").where == "port 1-1.3"
    assert DeviceKey("pci", "0000:02:00.0").where == "PCI address 0000:02:00.0"
    assert DeviceKey("dev", "/dev/hailo0").where == "/dev/hailo0"
    assert DeviceKey("platform", "rknn").where == "platform device rknn"
    assert str(DevNode("/dev/apex_0", "120:0")) == "/dev/apex_0 (120:0)"
    assert str(DevNode("/dev/apex_0")) == "/dev/apex_0"


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("189:3\n", "189:3"),
        (" 120:0 ", "120:0"),
        (None, None),
        ("", None),
        ("189", None),
        ("189:", None),
        (":3", None),
        ("-1:3", None),
        ("189:3:1", None),
        ("lots", None),
        ("\u0661:3", None),  # a digit, but not an ASCII one
        ("1" * 11 + ":3", None),
    ],
)
def test_a_dev_attribute_is_a_number_only_when_it_is_one(text: str | None, number: str | None):
    assert dev_number(text) == number
