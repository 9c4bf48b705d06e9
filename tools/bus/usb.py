"""USB discovery: what `/sys/bus/usb/devices` says is plugged in, as small frozen records.

Reads only the host (through an explicit HostRoot) and never decides anything about labels.
Entries of the bus directory are symlinks into `/sys/devices/...`; the link text is resolved
lexically (one `readlink`, no per-component `lstat`) because a scan may visit thousands of
devices, and the kernel resolves the rest when files are opened. Every entry that is neither a
device nor an interface is reported in `warnings`, never dropped silently.
"""

from __future__ import annotations

import re

from edgefd.core.hostroot import HostRoot
from edgefd.core.record import Record

from .enumerate import BusReader, ScanResult, bus_entries, host_path_of, rehost
from .key import DeviceKey, DevNode
from .sysfs import AttrDir

__all__ = ["BUS_DIR", "READER", "UsbDevice", "UsbInterface", "scan", "scan_device"]

BUS_DIR = "/sys/bus/usb/devices"
_PCI_ADDR = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class UsbInterface(Record):
    """One interface of the active configuration (`1-1.3:1.0`)."""

    name: str
    cls: str
    subclass: str | None
    protocol: str | None
    driver: str | None


class UsbDevice(Record):
    """One USB device (root hubs included), as the kernel describes it."""

    name: str  # sysfs name == port path, e.g. "1-1.3"; root hub "usb1"
    sysfs_path: str  # host path of the real device dir, /sys/devices/...
    busnum: int | None
    devnum: int | None
    vendor: str | None  # bare lower-case hex
    product: str | None
    device_class: str | None
    serial: str | None
    manufacturer: str | None
    product_name: str | None
    speed: str | None
    interfaces: tuple[UsbInterface, ...]
    devnode: str | None  # host path, /dev/bus/usb/001/004
    driver: str | None
    numa_node: int | None
    dev: str | None = None  # the node's char major:minor ("189:3"), from the `dev` attribute
    bcd_device: str | None = None  # bcdDevice, the device's release (binary-coded decimal)

    @property
    def id(self) -> str:
        """`vendor:product`, with `?` for what could not be read."""
        return f"{self.vendor or '?'}:{self.product or '?'}"

    @property
    def key(self) -> DeviceKey:
        """Where it is: its port path (a root hub: `usbN`)."""
        return DeviceKey("usb", self.name)

    @property
    def nodes(self) -> tuple[DevNode, ...]:
        return (DevNode(self.devnode, self.dev),) if self.devnode else ()


def _numa_of_controller(real: str, warnings: list[str], cache: dict[str, int | None]) -> int | None:
    """USB devices have no `numa_node`; their host controller (a PCI ancestor) does."""
    parts = real.split("/")
    for i in range(len(parts) - 1, 0, -1):
        if _PCI_ADDR.match(parts[i]):
            ctrl = "/".join(parts[: i + 1])
            if ctrl not in cache:
                n = None
                d = AttrDir.open(ctrl, warnings)
                if d is not None:
                    with d:
                        n = d.int("numa_node", warnings)
                cache[ctrl] = n if n is not None and n >= 0 else None
            return cache[ctrl]
    return None


def scan_device(
    host: HostRoot,
    name: str,
    real: str,
    warnings: list[str],
    numa_cache: dict[str, int | None] | None = None,
) -> UsbDevice | None:
    """Read one device directory (`real`, a path under the host root); None if not a device."""
    d = AttrDir.open(real, warnings)
    if d is None:
        return None
    with d:
        entries = d.names(warnings)
        if entries is None:
            return None
        if "idProduct" not in entries:
            warnings.append(f"usb {name}: skipped, {host_path_of(host, real)} has no idProduct")
            return None
        dev_warn: list[str] = []
        vendor = d.hex("idVendor", dev_warn, True)
        product = d.hex("idProduct", dev_warn, True)
        dclass = d.hex("bDeviceClass", dev_warn, True)
        busnum = d.int("busnum", dev_warn) if "busnum" in entries else None
        devnum = d.int("devnum", dev_warn) if "devnum" in entries else None
        serial = d.text("serial", dev_warn) if "serial" in entries else None
        manufacturer = d.text("manufacturer", dev_warn) if "manufacturer" in entries else None
        pname = d.text("product", dev_warn) if "product" in entries else None
        speed = d.text("speed", dev_warn) if "speed" in entries else None
        driver = d.link_name("driver", dev_warn) if "driver" in entries else None
        bcd = d.hex("bcdDevice", dev_warn, width=4) if "bcdDevice" in entries else None
        dev = d.dev_number("dev", dev_warn) if "dev" in entries else None
        devnode = None
        if "uevent" in entries:
            devnode = d.devname("uevent", dev_warn)
        if devnode is None and busnum is not None and devnum is not None:
            devnode = f"/dev/bus/usb/{busnum:03d}/{devnum:03d}"
        interfaces = []
        for entry in sorted(e for e in entries if ":" in e):
            cls = d.hex(entry + "/bInterfaceClass", dev_warn, True)
            if cls is None:
                continue  # reported by hex(); the other interfaces still count
            interfaces.append(
                UsbInterface(
                    name=entry,
                    cls=cls,
                    subclass=d.hex(entry + "/bInterfaceSubClass", dev_warn),
                    protocol=d.hex(entry + "/bInterfaceProtocol", dev_warn),
                    driver=d.link_name(entry + "/driver", dev_warn),
                )
            )
    numa = _numa_of_controller(real, dev_warn, numa_cache if numa_cache is not None else {})
    warnings.extend(f"usb {name}: {rehost(host, w)}" for w in dev_warn)
    return UsbDevice(
        name=name,
        sysfs_path=host_path_of(host, real),
        busnum=busnum,
        devnum=devnum,
        vendor=vendor,
        product=product,
        device_class=dclass,
        serial=serial or None,
        manufacturer=manufacturer,
        product_name=pname,
        speed=speed,
        interfaces=tuple(interfaces),
        devnode=devnode,
        driver=driver,
        numa_node=numa,
        dev=dev,
        bcd_device=bcd,
    )


def scan(host: HostRoot) -> ScanResult[UsbDevice]:
    """Every USB device under `host`, sorted by name, with what went wrong on the way.

    Raises HostUnreadable when the bus directory exists but cannot be listed."""
    warnings: list[str] = []
    devices: list[UsbDevice] = []
    numa_cache: dict[str, int | None] = {}
    entries, present = bus_entries(host, BUS_DIR, warnings, "usb")
    for name, real in entries:
        if ":" in name:
            continue  # an interface (`1-1:1.0`); read with its device
        dev = scan_device(host, name, real, warnings, numa_cache)
        if dev is not None:
            devices.append(dev)
    return ScanResult(tuple(devices), tuple(warnings), present)


READER: BusReader[UsbDevice] = BusReader("usb", scan)
