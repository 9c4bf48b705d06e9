"""PCI discovery: the functions under `/sys/bus/pci/devices`, as small frozen records.

Reads only the host (through an explicit HostRoot). One `scandir` of each device directory
tells which attributes exist, so optional ones (`sriov_totalvfs`, `driver`, class children
holding device nodes) cost nothing when absent. Required attributes that are missing or garbage
leave the field None; the label rules skip such a device and say so.
"""

from __future__ import annotations

from edgefd.core.hostroot import HostRoot
from edgefd.core.record import Record

from .enumerate import BusReader, ScanResult, bus_entries, class_nodes, host_path_of, rehost
from .key import DeviceKey, DevNode
from .sysfs import AttrDir

__all__ = ["BUS_DIR", "CLASS_DIRS", "READER", "REQUIRED", "PciDevice", "scan"]

BUS_DIR = "/sys/bus/pci/devices"
# the attributes NFD requires; a device missing one gets no NFD label
REQUIRED = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")
# class subdirectories whose children are character devices a container may need:
# <dev>/apex/apex_0 (Coral gasket driver), drm/card0 + renderD128, accel/accel0 (DRM accel),
# hailo_chardev/hailo0 (Hailo, hailort-drivers up to 5.2), hailo1x/h1x-0 (Hailo-10H from
# hailort-drivers 5.3.0: class_create("hailo1x") in linux/pcie/src/pcie.c), misc/...,
# vfio-dev/vfio0 (VFIO cdev)
CLASS_DIRS = ("accel", "apex", "drm", "hailo1x", "hailo_chardev", "misc", "vfio-dev")


class PciDevice(Record):
    """One PCI function, as the kernel describes it."""

    address: str  # "0000:01:00.0"
    sysfs_path: str
    class_code: str | None  # 6 hex digits as read ("030200"); labels use the first 4
    vendor: str | None
    device: str | None
    subsystem_vendor: str | None
    subsystem_device: str | None
    sriov_totalvfs: int | None
    numa_node: int | None
    driver: str | None
    iommu_group: str | None
    nodes: tuple[DevNode, ...]  # class children's device nodes: (/dev/apex_0, 120:0)
    has_sriov: bool = False  # `sriov_totalvfs` can be read, even if not a number (NFD's test)
    driver_version: str | None = None  # the bound driver module's `version`, as it reads
    pcie_root: str | None = None  # `pci0000:00`: the host bridge it is below

    @property
    def id(self) -> str:
        return f"{self.vendor or '?'}:{self.device or '?'}"

    @property
    def key(self) -> DeviceKey:
        """Where it is: its address."""
        return DeviceKey("pci", self.address)

    @property
    def devnodes(self) -> tuple[str, ...]:
        """Host /dev paths of its device nodes, e.g. ("/dev/apex_0",)."""
        return tuple(n.path for n in self.nodes)

    @property
    def missing(self) -> tuple[str, ...]:
        """Required attributes that could not be read."""
        return tuple(a for a in REQUIRED if getattr(self, _FIELD[a]) is None)


_FIELD = {
    "class": "class_code",
    "vendor": "vendor",
    "device": "device",
    "subsystem_vendor": "subsystem_vendor",
    "subsystem_device": "subsystem_device",
}


def scan_device(host: HostRoot, address: str, real: str, warnings: list[str]) -> PciDevice | None:
    """Read one PCI function directory (`real`, a path under the host root)."""
    d = AttrDir.open(real, warnings)
    entries = None if d is None else d.names(warnings)
    if d is None or entries is None:
        if d is not None:
            d.close()
        warnings.append(f"pci {address}: skipped, its sysfs directory cannot be read")
        return None
    w: list[str] = []
    with d:

        def hexattr(name: str) -> str | None:
            if name not in entries:
                w.append(f"{name}: missing")
                return None
            return d.hex(name, w)

        class_code = hexattr("class")
        vendor = hexattr("vendor")
        device = hexattr("device")
        subsystem_vendor = hexattr("subsystem_vendor")
        subsystem_device = hexattr("subsystem_device")
        # NFD's test is that the file reads (a loop, dangling link or directory does not)
        has_sriov = "sriov_totalvfs" in entries and d.readable("sriov_totalvfs")
        totalvfs = d.int("sriov_totalvfs", w) if has_sriov else None
        numa = d.int("numa_node", w) if "numa_node" in entries else None
        driver = d.link_name("driver", w) if "driver" in entries else None
        group = d.link_name("iommu_group", w) if "iommu_group" in entries else None
        # a built-in driver has no module, and many modules no version: neither is a problem
        version = d.text("driver/module/version", w) if driver else None
        nodes = class_nodes(d, entries, CLASS_DIRS, w)
    warnings.extend(f"pci {address}: {rehost(host, x)}" for x in w)
    path = host_path_of(host, real)
    return PciDevice(
        address=address,
        sysfs_path=path,
        class_code=class_code,
        vendor=vendor,
        device=device,
        subsystem_vendor=subsystem_vendor,
        subsystem_device=subsystem_device,
        sriov_totalvfs=totalvfs,
        numa_node=numa if numa is not None and numa >= 0 else None,
        driver=driver,
        iommu_group=group,
        nodes=nodes,
        has_sriov=has_sriov,
        driver_version=version or None,
        pcie_root=next((p for p in path.split("/") if _is_pcie_root(p)), None),
    )


def _is_pcie_root(part: str) -> bool:
    """`pci<domain>:<bus>` (pci0000:00): the host bridge a function's sysfs path is below."""
    domain, sep, bus = part.removeprefix("pci").partition(":")
    hexdigits = "0123456789abcdef"
    return (
        part.startswith("pci")
        and bool(sep)
        and len(domain) == 4
        and len(bus) == 2
        and all(c in hexdigits for c in domain + bus)
    )


def scan(host: HostRoot) -> ScanResult[PciDevice]:
    """Every PCI function under `host`, sorted by address, with what went wrong on the way.

    Raises HostUnreadable when the bus directory exists but cannot be listed."""
    warnings: list[str] = []
    devices = []
    entries, present = bus_entries(host, BUS_DIR, warnings, "pci")
    for address, real in entries:
        dev = scan_device(host, address, real, warnings)
        if dev is not None:
            devices.append(dev)
    return ScanResult(tuple(devices), tuple(warnings), present)


READER: BusReader[PciDevice] = BusReader("pci", scan)
