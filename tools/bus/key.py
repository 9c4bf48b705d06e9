"""Where a device is, and the character devices it has: the two facts every consumer keys on.

`DeviceKey(bus, place)` is the one notion of "where a device is": a USB port path, a PCI
address, or a /dev path for a bare node a resource's glob matched. It is stable across
re-plugs, reboots and re-enumeration (a Coral that reloads its firmware comes back at the same
port), unlike the USB devnum or `/dev/apex_N`. The scanners' hold, the device plugin's device
names, DRA, CDI and the device links all key on it (with the model: see edgefd.inventory).

`DevNode` is one device node with the char `major:minor` the kernel gave it (the sysfs `dev`
attribute): a re-enumerated USB device keeps its place but gets a new minor, and what follows
a device into a running container's device cgroup needs both the old and the new number.

Named tuples rather than dataclasses: they are built for every record of every scan and
cost nothing to define at start-up.
"""

from __future__ import annotations

from edgefd.core.record import Record


class DeviceKey(Record):
    """A place on a bus: ("usb", "1-1.3"), ("pci", "0000:02:00.0"), ("platform", "rknn"),
    ("dev", "/dev/hailo0")."""

    bus: str
    place: str

    def __str__(self) -> str:
        return f"{self.bus} {self.place}"

    @property
    def where(self) -> str:
        """For people: "port 1-1.3", "PCI address 0000:02:00.0", "/dev/hailo0"."""
        if self.bus == "usb":
            return f"port {self.place}"
        if self.bus == "pci":
            return f"PCI address {self.place}"
        if self.bus == "platform":
            return f"platform device {self.place}"
        return self.place


class DevNode(Record):
    """One device node: its host path and char `major:minor` ("189:3"; None if unknown)."""

    path: str
    dev: str | None = None

    def __str__(self) -> str:
        return f"{self.path} ({self.dev})" if self.dev else self.path


def dev_number(text: str | None) -> str | None:
    """A sysfs `dev` attribute ("189:3\\n") as "189:3", or None when it is not one."""
    if text is None:
        return None
    major, sep, minor = text.strip().partition(":")
    ok = sep and all(0 < len(n) <= 10 and n.isascii() and n.isdigit() for n in (major, minor))
    return f"{major}:{minor}" if ok else None
