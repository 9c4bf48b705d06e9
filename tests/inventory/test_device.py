"""One device as the inventory knows it: why an absent device is not there (a Coral in its
boot state within the hold is re-enumerating, not unplugged), why a present one cannot be used
(a node missing, none at all), the facts a USB or PCI record gives, in the shape the APIs take,
and how its version facts become the semantic versions a ResourceSlice's `version` attributes
take (`semver`, `bcd_version`): what is not a version is left out, never guessed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.inventory import device as facts
from edgefd.inventory.device import Device, Facts, absence, facts_of, health_reason

CORAL = Device(
    "coral-usb-2-1",
    DeviceKey("usb", "2-1"),
    "coral-usb",
    "edgetpu",
    state="boot",
    nodes=(DevNode("/dev/bus/usb/002/002", "189:129"),),
)
APEX = Device(
    "coral-pcie-0000-02-00-0",
    DeviceKey("pci", "0000:02:00.0"),
    "coral-pcie",
    "edgetpu",
    facts=Facts(driver="apex"),
)
DRI = Device("dri-dri-card0", DeviceKey("dev", "/dev/dri/card0"), "dri", "dri")


@pytest.mark.parametrize(
    ("dev", "within_hold", "why"),
    [
        (CORAL, True, "re-enumerating at port 2-1"),
        (CORAL, False, "unplugged from port 2-1"),
        (CORAL._replace(state="runtime"), True, "unplugged from port 2-1"),
        (APEX, True, "gone from PCI address 0000:02:00.0"),
        (DRI, False, "/dev/dri/card0 is gone"),
    ],
)
def test_why_an_absent_device_is_not_there(dev: Device, within_hold: bool, why: str) -> None:
    assert absence(dev, within_hold) == why


def test_why_a_present_device_cannot_be_used() -> None:
    assert health_reason(CORAL, lambda path: True) == ""
    assert health_reason(CORAL, lambda path: False) == (
        "device node /dev/bus/usb/002/002 is missing"
    )
    assert health_reason(CORAL._replace(nodes=()), lambda path: True) == (
        "no device node (no DEVNAME in uevent)"
    )
    assert health_reason(APEX, lambda path: True) == (
        "no device node (driver apex): is the driver loaded?"
    )
    unbound = APEX._replace(facts=Facts())
    assert "(driver none)" in health_reason(unbound, lambda path: True)


def test_the_facts_of_a_usb_and_a_pci_record() -> None:
    usb = SimpleNamespace(
        key=DeviceKey("usb", "1-1.3"),
        serial=" 8F2E2A10 ",
        interfaces=[SimpleNamespace(driver="uvcvideo"), SimpleNamespace(driver=None),
                    SimpleNamespace(driver="snd-usb-audio"), SimpleNamespace(driver="uvcvideo")],
        bcd_device="0421",
    )  # fmt: skip
    assert facts_of(usb) == Facts(
        serial="8F2E2A10", driver="snd-usb-audio,uvcvideo", device_version="4.2.1"
    )
    blank = SimpleNamespace(key=usb.key, serial="  ", interfaces=[], bcd_device=None)
    assert facts_of(blank) == Facts()
    pci = SimpleNamespace(
        key=DeviceKey("pci", "0000:02:00.0"),
        driver="apex",
        driver_version="1.2",
        pcie_root="pci0000:00",
    )
    assert facts_of(pci) == Facts(
        driver="apex", driver_version="1.2.0", pcie_root="pci0000:00", module_version="1.2"
    )
    # a version with no driver bound says nothing
    unbound = facts_of(SimpleNamespace(**{**vars(pci), "driver": None}))
    assert unbound.driver_version is None and unbound.module_version is None
    # what is not semver is still the module's version, as text
    odd = facts_of(SimpleNamespace(**{**vars(pci), "driver_version": "2.3.1.4"}))
    assert (odd.driver_version, odd.module_version) == (None, "2.3.1.4")
    for junk in ("x" * 65, "1.0\x1b[2J", "  "):
        assert (
            facts_of(SimpleNamespace(**{**vars(pci), "driver_version": junk})).module_version
            is None
        )


@pytest.mark.parametrize(
    ("raw", "version"),
    [("1.2", "1.2.0"), ("4.17.0", "4.17.0"), ("v2", "2.0.0"), ("1.0.0-rc1", "1.0.0-rc1")],
)
def test_versions_become_semver(raw: str, version: str) -> None:
    assert facts.semver(raw) == version


@pytest.mark.parametrize("raw", ["", "1.2.3.4", "abc", "01.2.3", None])
def test_what_is_not_semver_is_left_out(raw: str | None) -> None:
    assert facts.semver(raw) is None


def test_usb_bcd_device() -> None:
    assert facts.bcd_version("0421") == "4.2.1"
    assert facts.bcd_version("0100") == "1.0.0"
    assert facts.bcd_version("zz12") is None
