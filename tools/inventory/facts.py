"""The facts a device's records say beyond its IDs, in the form the APIs take them: the USB
bcdDevice and the driver module's version as semantic versions (the ResourceSlice refuses any
other version), the bound driver, the serial, the PCIe root. Pure: the bus layer read them."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from .device import Facts


@cache  # only a device whose driver says its version needs it
def _semver() -> re.Pattern[str]:
    return re.compile(
        r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
    )


def semver(text: str | None) -> str | None:
    """`1.2` -> `1.2.0`, `4.17.0` as is; None for what is not a semantic version."""
    if not text:
        return None
    text = text.strip().lstrip("v")
    parts = text.split(".")
    if 1 <= len(parts) < 3 and all(p.isdigit() for p in parts):
        text = ".".join([str(int(p)) for p in parts] + ["0"] * (3 - len(parts)))
    return text if len(text) <= 64 and _semver().match(text) else None


def bcd_version(bcd: str | None) -> str | None:
    """USB bcdDevice `0x JJ M N` (binary-coded decimal): `0421` -> `4.2.1`."""
    b = (bcd or "").strip()
    if len(b) != 4 or not (b.isascii() and b.isdigit()):
        return None
    return f"{int(b[:2])}.{int(b[2])}.{int(b[3])}"


def facts_of(record: Any) -> Facts:
    """The facts of a USB or PCI record."""
    if record.key.bus == "usb":
        drivers = sorted({i.driver for i in record.interfaces if i.driver})
        return Facts(
            serial=(record.serial or "").strip() or None,
            driver=",".join(drivers) or None,
            device_version=bcd_version(record.bcd_device),
        )
    return Facts(
        driver=record.driver,
        driver_version=semver(record.driver_version) if record.driver else None,
        pcie_root=record.pcie_root,
    )
