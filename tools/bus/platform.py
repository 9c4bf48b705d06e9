"""Platform (SoC) discovery: the devices under `/sys/bus/platform/devices` that the catalogue
can be about, as small frozen records. The third bus beside USB and PCI.

A SoC has hundreds of platform devices (clocks, pin controllers, IOMMUs, every UART) and
almost none of them is an accelerator, while the catalogue names a handful of devicetree
`compatible` strings. So a device costs one read (`of_node/compatible`) unless it lists one of
them; only those get their driver link and class directories read. A device without a
devicetree node (an ACPI or a software-made one) costs nothing more than its listing.

A driver may put its device node on a platform device of its own rather than on the matched
one (Linux's `rocket` registers `rknn` and one DRM accel device there for all NPU cores): the
catalogue names that device, and the accelerator is one record keyed there, with the matched
devices it stands for in `parts`.
"""

from __future__ import annotations

from edgefd.core.hostroot import HostRoot
from edgefd.core.record import Record

from .catalogue import Catalogue, PlatformId, load_catalogue
from .enumerate import BusReader, ScanResult, bus_entries, class_nodes, host_path_of, rehost
from .key import DeviceKey, DevNode
from .sysfs import AttrDir, _link_name, _read_raw

__all__ = ["BUS_DIR", "CLASS_DIRS", "READER", "PlatformDevice", "compatibles", "scan"]

BUS_DIR = "/sys/bus/platform/devices"
# class subdirectories whose children are device nodes: accel/accel0 (DRM accel: rocket,
# ethosu), drm/card0 + renderD128 (GPUs), misc/...
CLASS_DIRS = ("accel", "drm", "misc")
_MAX_COMPATIBLE = 4096  # a devicetree property, read as one attribute page


class PlatformDevice(Record):
    """One platform device the catalogue can be about, as the kernel describes it."""

    name: str  # sysfs name, "fdab0000.npu", "rknn"
    sysfs_path: str
    compatible: tuple[str, ...]  # its devicetree node's, most specific first
    driver: str | None
    nodes: tuple[DevNode, ...]
    parts: tuple[str, ...] = ()  # the matched devices it stands for, when keyed elsewhere

    @property
    def id(self) -> str:
        """Platform devices have no vendor:product; the compatible says what it is."""
        return ""

    @property
    def key(self) -> DeviceKey:
        return DeviceKey("platform", self.name)

    @property
    def numa_node(self) -> int | None:
        return None

    @property
    def devnodes(self) -> tuple[str, ...]:
        return tuple(n.path for n in self.nodes)


def compatibles(raw: bytes) -> tuple[str, ...]:
    """A devicetree `compatible` property (NUL-separated strings) as a tuple."""
    return tuple(s.decode("ascii", "replace") for s in raw.split(b"\x00") if s)


def _rule(rules: tuple[PlatformId, ...], compat: tuple[str, ...], driver: str | None) -> PlatformId:
    """The rule a device with a wanted compatible falls under (its driver's, if any)."""
    fitting = [r for r in rules if r.compatible in compat]
    return next((r for r in fitting if r.matches(compat, driver)), fitting[0])


def _nodes(real: str, warnings: list[str]) -> tuple[DevNode, ...]:
    d = AttrDir.open(real, warnings)
    if d is None:
        return ()
    with d:
        entries = d.names(warnings)
        return class_nodes(d, entries, CLASS_DIRS, warnings) if entries else ()


def scan(host: HostRoot, catalogue: Catalogue | None = None) -> ScanResult[PlatformDevice]:
    """The platform devices of `host` the catalogue (default: the packaged one) names.

    Raises HostUnreadable when the bus directory exists but cannot be listed."""
    warnings: list[str] = []
    rules = (catalogue or load_catalogue()).platform_ids
    wanted = {r.compatible for r in rules}
    entries, present = bus_entries(host, BUS_DIR, warnings, "platform")
    if not wanted:
        return ScanResult((), tuple(warnings), present)
    where = dict(entries)
    found: dict[str, PlatformDevice] = {}
    for name, real in entries:
        raw = _read_raw(real + "/of_node/compatible", None, False, _MAX_COMPATIBLE)
        if raw is None:
            continue  # no devicetree node (or none readable): nothing the catalogue names
        compat = compatibles(raw)
        if wanted.isdisjoint(compat):
            continue
        w: list[str] = []
        driver = _link_name(real + "/driver", w)
        rule = _rule(rules, compat, driver)
        if rule.device is None:
            found[name] = PlatformDevice(
                name, host_path_of(host, real), compat, driver, _nodes(real, w)
            )
        else:
            found[rule.device] = _facade(host, rule.device, where, found, name, compat, driver, w)
        warnings.extend(f"platform {name}: {rehost(host, x)}" for x in w)
    return ScanResult(tuple(found[k] for k in sorted(found)), tuple(warnings), present)


def _facade(
    host: HostRoot,
    device: str,
    where: dict[str, str],
    found: dict[str, PlatformDevice],
    part: str,
    compat: tuple[str, ...],
    driver: str | None,
    warnings: list[str],
) -> PlatformDevice:
    """The record of the device a driver puts its node on, `part` added to what it stands
    for. Gone (the driver not loaded): it is still where the accelerator is, without nodes."""
    seen = found.get(device)
    if seen is not None:
        return seen._replace(parts=(*seen.parts, part), driver=seen.driver or driver)
    real = where.get(device)
    nodes = _nodes(real, warnings) if real is not None else ()
    path = host_path_of(host, real) if real is not None else f"{BUS_DIR}/{device}"
    return PlatformDevice(device, path, compat, driver, nodes, (part,))


def _scan(host: HostRoot) -> ScanResult[PlatformDevice]:
    return scan(host)


READER: BusReader[PlatformDevice] = BusReader("platform", _scan, scan)
