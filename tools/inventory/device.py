"""One device as the inventory knows it: who it is, where, whether it is there and why not,
its device nodes with their char numbers, and the facts DRA publishes. Immutable; every
consumer reads the same objects.

The facts are what a device's records say beyond its IDs, in the form the APIs take them:
the USB bcdDevice and the driver module's version as semantic versions (the ResourceSlice
refuses any other version), the bound driver, the serial, the PCIe root. The module's version
is also kept as the kernel prints it (`modinfo`, `/sys/module/<m>/version`): that is the text a
person compares with their library's version, and `1.2` must not turn into `1.2.0` there. The
bus layer read them; here they are only put in shape."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.record import Record


class Facts(Record):
    """What a device says about itself beyond its IDs, kept while it is away."""

    serial: str | None = None
    driver: str | None = None  # bound kernel driver (a USB device's: its interfaces')
    device_version: str | None = None  # USB bcdDevice (the device's release), as semver
    driver_version: str | None = None  # the driver module's `version`, as semver
    pcie_root: str | None = None  # `pci<domain>:<bus>` of a PCI device
    module_version: str | None = None  # the driver module's `version`, as the kernel says it
    compatible: str | None = None  # a platform device's devicetree compatible (most specific)


NO_FACTS = Facts()


class Device(Record):
    """An accelerator (a catalogue match) or whatever a consumer's selector matched.

    Identity is (where, model): `key` and `model`, or the serial and the model for a device
    named by its serial (`by_serial`); `name` is made from it (naming.py) and keys every
    consumer. A device that goes away stays known, `present` False, with `reason` saying why
    in words a person reads ("unplugged from port 1-1.3", "re-enumerating at port 2-1"),
    until it is forgotten; its nodes, IDs and facts are then the last ones seen,
    `missing_since` says since when it is away (as far as any run knows: kept across
    restarts), and `missed_since` since when this process finds it away (the eviction clock).
    """

    name: str
    key: DeviceKey
    model: str  # catalogue id (`coral-usb`), else the selecting resource's short name
    kind: str  # catalogue kind (`edgetpu`), else the resource's short name
    state: str = ""  # USB life stage its IDs mean: "boot" | "runtime" | ""
    ids: str = ""  # "vendor:product" as last seen
    nodes: tuple[DevNode, ...] = ()
    numa_node: int | None = None
    facts: Facts = NO_FACTS
    resources: tuple[str, ...] = ()  # the selectors that select it, in their order
    present: bool = True
    reason: str = ""  # why it cannot be used now; "" when it can
    last_seen: float = 0.0  # wall clock, the last scan that saw it
    by_serial: bool = False  # identified by its serial (`id_from: serial`), not its place
    missing_since: float | None = None  # wall clock, while absent: see presence.py
    missed_since: float | None = None  # wall clock, while absent: this process's first miss
    condition: str = ""  # while unusable but present: which health source says so (a word)

    @property
    def healthy(self) -> bool:
        return self.present and not self.reason

    @property
    def bus(self) -> str:
        return self.key.bus

    @property
    def devnodes(self) -> tuple[str, ...]:
        """Host paths of its device nodes."""
        return tuple(n.path for n in self.nodes)


def absence(dev: Device, within_hold: bool) -> str:
    """Why a device that is not there is not there, as far as can be told.

    A device in its boot state disconnects when its firmware loads and comes back with its
    runtime IDs (a Coral, an NCS2): within the hold that is what is happening, most likely."""
    if within_hold and dev.state == "boot":
        return f"re-enumerating at {dev.key.where}"
    if dev.key.bus == "usb":
        return f"unplugged from {dev.key.where}"
    if dev.key.bus in ("pci", "platform"):
        return f"gone from {dev.key.where}"
    return f"{dev.key.place} is gone"


def health_reason(dev: Device, exists: Callable[[str], bool]) -> str:
    """Why a present device cannot be used ("" when it can): a node that is not there."""
    if not dev.nodes:
        if dev.key.bus in ("pci", "platform"):
            return f"no device node (driver {dev.facts.driver or 'none'}): is the driver loaded?"
        return "no device node (no DEVNAME in uevent)"
    missing = next((n.path for n in dev.nodes if not exists(n.path)), None)
    return f"device node {missing} is missing" if missing else ""


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
    """The facts of a USB, PCI or platform record."""
    if record.key.bus == "usb":
        drivers = sorted({i.driver for i in record.interfaces if i.driver})
        return Facts(
            serial=(record.serial or "").strip() or None,
            driver=",".join(drivers) or None,
            device_version=bcd_version(record.bcd_device),
        )
    if record.key.bus == "platform":
        return Facts(driver=record.driver, compatible=next(iter(record.compatible), None))
    return Facts(
        driver=record.driver,
        driver_version=semver(record.driver_version) if record.driver else None,
        pcie_root=record.pcie_root,
        module_version=_short_text(record.driver_version) if record.driver else None,
    )


def _short_text(text: str | None) -> str | None:
    """Text an API value and the saved state can hold (64 printable characters), or None:
    no label or attribute can carry more, and a kept device must load again."""
    t = (text or "").strip()
    return t if 0 < len(t) <= 64 and t.isprintable() else None
