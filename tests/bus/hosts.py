"""Small hosts for the bus tests: two Corals in their boot state behind two root hubs, each
device listed once, so a test can add what it is about (an alias, a loop, garbage)."""

from __future__ import annotations

from pathlib import Path

from tests.fixturegen import HostBuilder

CORAL_BOOT = {"vendor": "1a6e", "product": "089a", "class": "00", "interfaces": [{"class": "fe"}]}


def two_corals(root: Path) -> Path:
    b = HostBuilder(root)
    b.add_usb({"port": "usb1", "vendor": "1d6b", "product": "0002", "class": "09"})
    b.add_usb({"port": "usb2", "vendor": "1d6b", "product": "0003", "class": "09"})
    b.add_usb({"port": "1-1", **CORAL_BOOT})
    b.add_usb({"port": "2-1", **CORAL_BOOT})
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    return root / "sys/bus/usb/devices"
