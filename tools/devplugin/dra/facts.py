"""What the ResourceSlice says about a device beyond what the device plugin needs: serial,
bound driver, versions, PCIe root. Read from the same scan records (edgefd.bus) the device
plugin matched, plus two sysfs files of the device itself; nothing here decides which devices
exist (devices.py does)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgefd.bus.pci import PciDevice
from edgefd.bus.usb import UsbDevice
from edgefd.core.hostroot import HostRoot

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
)
_PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


@dataclass(frozen=True)
class Facts:
    serial: str | None = None
    driver: str | None = None  # bound kernel driver (a USB device's: its interfaces')
    device_version: str | None = None  # USB bcdDevice (the device's release), as semver
    driver_version: str | None = None  # the driver module's `version`, as semver
    pcie_root: str | None = None  # `pci<domain>:<bus>` of a PCI device


def semver(text: str | None) -> str | None:
    """`1.2` -> `1.2.0`, `4.17.0` as is; None for what is not a semantic version (the API
    refuses a version attribute that is not semver 2.0.0)."""
    if not text:
        return None
    text = text.strip().lstrip("v")
    parts = text.split(".")
    if 1 <= len(parts) < 3 and all(p.isdigit() for p in parts):
        text = ".".join([str(int(p)) for p in parts] + ["0"] * (3 - len(parts)))
    return text if len(text) <= 64 and _SEMVER.match(text) else None


def bcd_version(bcd: str | None) -> str | None:
    """USB bcdDevice `0x JJ M N` (binary-coded decimal): `0421` -> `4.2.1`."""
    if not bcd or not re.fullmatch(r"[0-9]{4}", bcd.strip()):
        return None
    b = bcd.strip()
    return f"{int(b[:2])}.{int(b[2])}.{int(b[3])}"


def _read(host: HostRoot, path: str) -> str | None:
    try:
        with open(host.resolve(path), encoding="utf-8", errors="replace") as fh:
            return fh.read(256).strip() or None
    except OSError:
        return None


def usb_facts(host: HostRoot, dev: UsbDevice) -> Facts:
    drivers = sorted({i.driver for i in dev.interfaces if i.driver})
    return Facts(
        serial=(dev.serial or "").strip() or None,
        driver=",".join(drivers) or None,
        device_version=bcd_version(_read(host, f"{dev.sysfs_path}/bcdDevice")),
    )


def pci_facts(host: HostRoot, dev: PciDevice) -> Facts:
    root = next((p for p in dev.sysfs_path.split("/") if _PCIE_ROOT.match(p)), None)
    version = None
    if dev.driver:
        version = semver(_read(host, f"{dev.sysfs_path}/driver/module/version"))
    return Facts(driver=dev.driver, driver_version=version, pcie_root=root)
