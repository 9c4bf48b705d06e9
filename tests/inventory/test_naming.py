"""The one device name: `<model>-<place as DNS label>`, the same in every API."""

from __future__ import annotations

import re

import pytest

from edgefd.bus.key import DeviceKey
from edgefd.inventory.naming import MAX_NAME, device_name, fit_label

LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize(
    ("model", "key", "serial", "name"),
    [
        ("coral-usb", DeviceKey("usb", "1-1.3"), None, "coral-usb-1-1-3"),
        ("ncs2", DeviceKey("usb", "1-1.1"), None, "ncs2-1-1-1"),
        ("coral-pcie", DeviceKey("pci", "0000:02:00.0"), None, "coral-pcie-0000-02-00-0"),
        ("hailo8", DeviceKey("pci", "0000:03:00.0"), None, "hailo8-0000-03-00-0"),
        ("hailo", DeviceKey("dev", "/dev/hailo0"), None, "hailo-hailo0"),
        ("dri", DeviceKey("dev", "/dev/dri/card0"), None, "dri-dri-card0"),
        ("ncs2", DeviceKey("usb", "1-1.1"), "03e72485", "ncs2-sn-03e72485"),
    ],
)
def test_names(model: str, key: DeviceKey, serial: str | None, name: str) -> None:
    assert device_name(model, key, serial) == name


def test_lossy_or_long_names_get_a_hash_and_stay_distinct() -> None:
    a = device_name("ncs2", DeviceKey("usb", "1-1"), "ABC")
    b = device_name("ncs2", DeviceKey("usb", "1-1"), "abc")
    assert b == "ncs2-sn-abc" and a != b and a.startswith("ncs2-sn-abc-")
    upper = device_name("dri", DeviceKey("dev", "/dev/dri/renderD128"))
    assert upper.startswith("dri-dri-renderd128-") and len(upper) == len("dri-dri-renderd128-") + 8
    long = device_name("x" * 80, DeviceKey("usb", "1-1"))
    assert len(long) == MAX_NAME and long == device_name("x" * 80, DeviceKey("usb", "1-1"))
    for n in (a, upper, long, fit_label("--"), fit_label("é")):
        assert LABEL.fullmatch(n), n
    assert fit_label("coral-usb-2-1-r0", 10) != fit_label("coral-usb-2-1-r1", 10)


def test_names_that_need_no_regex_and_those_that_do_agree_with_the_rule() -> None:
    # nothing left: "device" and a hash of what it was
    assert fit_label("").startswith("device-") and fit_label("-").startswith("device-")
    assert fit_label("a-b") == "a-b" and fit_label("-a") != "-a" and fit_label("a" * 64) != "a" * 64
    assert fit_label("usb-1-\udcff").startswith("usb-1-")  # undecodable bytes from sysfs
