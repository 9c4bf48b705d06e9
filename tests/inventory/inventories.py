"""Inventories on fixture hosts for the tests, as the tools build them (both buses, the packaged
catalogue), and `Clock`: a wall clock and a monotonic one the test moves together (also for
tests/devplugin's state-file migration)."""

from __future__ import annotations

from pathlib import Path

from edgefd.bus import pci, usb
from edgefd.bus.catalogue import load_catalogue
from edgefd.core.hostroot import HostRoot
from edgefd.inventory.inventory import Inventory

READERS = (usb.READER, pci.READER)
CORAL_RUNTIME = {"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9}


class Clock:
    """A wall clock (call it) and a monotonic one (`mono`) that move together."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0
        self.base = 1_000.0

    def __call__(self) -> float:
        return self.t

    def mono(self) -> float:
        return self.t - 1_800_000_000.0 + self.base


def inventory(root: Path, **kw: object) -> Inventory:
    kw.setdefault("catalogue", load_catalogue())
    return Inventory(HostRoot.of(root), READERS, **kw)  # type: ignore[arg-type]
