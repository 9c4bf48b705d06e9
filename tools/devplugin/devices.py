"""From scan results to the devices a resource advertises: stable IDs, health, replicas.

Everything here is pure (the caller passes what the scanners found and a predicate saying
which host paths exist), so the rules that decide what the kubelet sees are testable without
a host.

Device IDs. The kubelet checkpoints which device IDs a container holds and, after a kubelet
restart or a node reboot, re-admits pods only if those IDs are healthy again. So an ID must
name the *place* a device is in, never something the kernel hands out afresh (the USB
devnum, `/dev/apex_N` numbering):

- USB: `usb-<port path>` (`usb-1-1.3`: bus 1, root port 1, hub port 3), or with
  `id_from: serial` `usb-sn-<serial>` (follows the stick to another port; falls back to the
  port when the device reports no serial).
- PCI: `pci-<address>` with `:` as `-` (`pci-0000-01-00.0`).
- A bare `/dev` node matched by a glob: `dev-<node path below /dev>` (`dev-hailo0`).

IDs are restricted to `[A-Za-z0-9._-]`; one over 63 characters (the API's limit) keeps a
readable head and ends in a hash of the whole, so it stays unique and stable.

Re-enumeration. A Coral USB (1a6e:089a -> 18d1:9302) or an NCS2 (03e7:2485 -> 03e7:f63b)
disconnects and reconnects with new IDs and a new devnum when its firmware is loaded. Both
IDs are matchers of the same resource and the port path does not change, so it stays one
device with one ID; only its `state` and device node change.

Health. A device is Healthy when it is present and its device node(s) exist. A device that
disappears stays listed, Unhealthy, so that pods holding its ID keep a known (if unusable)
device and get it back when it returns; it is dropped only after `forget_after` seconds of
absence (config; 0 keeps it for ever). Absent devices also survive plugin restarts through
the Inventory's persisted state (see plugin.py).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from edgefd.bus.pci import PciDevice
from edgefd.bus.usb import UsbDevice

from .config import Resource

MAX_ID = 63
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_BAD_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def make_id(raw: str, limit: int = MAX_ID) -> str:
    """A valid device ID for `raw`: safe characters only, at most `limit` characters."""
    text = _BAD_ID_CHARS.sub("-", raw).strip("-._") or "device"
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
    return text[: limit - len(digest) - 1].rstrip("-._") + "-" + digest


def replica_ids(device_id: str, replicas: int) -> list[str]:
    """The IDs the kubelet sees for one device: itself, or `<id>-r0` ... `<id>-r<n-1>`."""
    if replicas <= 1:
        return [device_id]
    out = []
    for k in range(replicas):
        suffix = f"-r{k}"
        out.append(make_id(device_id, MAX_ID - len(suffix)) + suffix)
    return out


@dataclass(frozen=True)
class Device:
    """One physical accelerator of a resource, as the plugin last knew it."""

    id: str
    bus: str  # "usb" | "pci" | "dev"
    location: str  # USB port path, PCI address or /dev path: where it is plugged in
    devnodes: tuple[str, ...]  # host paths of its device nodes (last known when absent)
    state: str = ""  # USB life stage: "boot" | "runtime" | ""
    ids: str = ""  # "vendor:product" as last seen
    numa_node: int | None = None
    present: bool = True
    reason: str = ""  # why it is unhealthy; "" when healthy
    last_seen: float = 0.0  # wall-clock seconds

    @property
    def healthy(self) -> bool:
        return self.present and not self.reason

    @property
    def health(self) -> str:
        return HEALTHY if self.healthy else UNHEALTHY

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "bus": self.bus,
            "location": self.location,
            "devnodes": list(self.devnodes),
            "state": self.state,
            "ids": self.ids,
            "numa_node": self.numa_node,
            "health": self.health,
            "reason": self.reason,
        }


Exists = Callable[[str], bool]


def _usb_device(res: Resource, dev: UsbDevice, exists: Exists, now: float) -> Device | None:
    state = res.usb_state(dev.vendor, dev.product)
    if state is None:
        return None
    serial = (dev.serial or "").strip()
    if res.id_from == "serial" and serial:
        dev_id = make_id(f"usb-sn-{serial}")
    else:
        dev_id = make_id(f"usb-{dev.name}")
    nodes = tuple(n for n in (dev.devnode,) if n)
    reason = ""
    if not nodes:
        reason = "no device node (no DEVNAME in uevent)"
    elif not all(exists(n) for n in nodes):
        reason = f"device node {nodes[0]} is missing"
    return Device(
        id=dev_id,
        bus="usb",
        location=dev.name,
        devnodes=nodes,
        state=state,
        ids=f"{dev.vendor}:{dev.product}",
        numa_node=dev.numa_node,
        reason=reason,
        last_seen=now,
    )


def _glob_match(path: str, globs: Sequence[str]) -> bool:
    return not globs or any(fnmatch.fnmatchcase(path, g) for g in globs)


def _pci_device(res: Resource, dev: PciDevice, exists: Exists, now: float) -> Device | None:
    if not any(m.matches(dev.vendor, dev.device, dev.class_code) for m in res.pci):
        return None
    nodes = tuple(n for n in dev.devnodes if _glob_match(n, res.dev_globs))
    present_nodes = tuple(n for n in nodes if exists(n))
    reason = ""
    if not nodes:
        driver = dev.driver or "none"
        reason = f"no device node (driver {driver}): is the driver loaded?"
    elif len(present_nodes) != len(nodes):
        reason = f"device node {next(n for n in nodes if not exists(n))} is missing"
    return Device(
        id=make_id(f"pci-{dev.address}"),
        bus="pci",
        location=dev.address,
        devnodes=nodes,
        ids=f"{dev.vendor}:{dev.device}",
        numa_node=dev.numa_node,
        reason=reason,
        last_seen=now,
    )


def match_devices(
    res: Resource,
    usb_devices: Iterable[UsbDevice],
    pci_devices: Iterable[PciDevice],
    dev_nodes: Iterable[str],
    exists: Exists,
    now: float = 0.0,
) -> list[Device]:
    """The devices of `res` present now, sorted by ID.

    `dev_nodes` are host paths of /dev nodes that exist (the caller globbed them). A
    resource with USB or PCI matchers takes device nodes from the matched devices (its
    `dev_globs` then only filter a PCI device's nodes); a resource with only `dev_globs`
    advertises each matching node as a device of its own.
    """
    found: dict[str, Device] = {}
    if res.usb:
        for u in usb_devices:
            d = _usb_device(res, u, exists, now)
            if d is not None:
                found.setdefault(d.id, d)
    if res.pci:
        for p in pci_devices:
            d = _pci_device(res, p, exists, now)
            if d is not None:
                found.setdefault(d.id, d)
    if res.dev_globs and not (res.usb or res.pci):
        for node in sorted(set(dev_nodes)):
            if _glob_match(node, res.dev_globs):
                d = Device(
                    id=make_id("dev-" + node.removeprefix("/dev/")),
                    bus="dev",
                    location=node,
                    devnodes=(node,),
                    last_seen=now,
                )
                found.setdefault(d.id, d)
    return [found[k] for k in sorted(found)]


class Inventory:
    """What one resource advertises: devices present now plus remembered absent ones.

    Not thread-safe by itself; the plugin updates it from one thread and publishes the
    resulting immutable tuple.
    """

    def __init__(self, forget_after: float = 0.0, known: Iterable[Device] = ()) -> None:
        self.forget_after = forget_after
        self._devices: dict[str, Device] = {}
        for d in known:
            self._devices[d.id] = replace(d, present=False, reason=d.reason or "not seen yet")

    def update(self, present: Iterable[Device], now: float) -> tuple[Device, ...]:
        """Merge a scan into the inventory; return the full, sorted device list."""
        seen = {d.id: d for d in present}
        merged: dict[str, Device] = {}
        for dev_id, old in self._devices.items():
            if dev_id in seen:
                continue
            if self.forget_after > 0 and now - old.last_seen > self.forget_after:
                continue
            merged[dev_id] = (
                old if not old.present else replace(old, present=False, reason="unplugged")
            )
        merged.update(seen)
        self._devices = merged
        return self.devices()

    def devices(self) -> tuple[Device, ...]:
        return tuple(self._devices[k] for k in sorted(self._devices))


@dataclass(frozen=True)
class Advertised:
    """What the kubelet is told about one resource, and how its IDs map to devices."""

    devices: tuple[Device, ...]
    replicas: int
    by_kubelet_id: dict[str, Device]
    list_entries: tuple[tuple[str, str, int | None], ...]  # (ID, health, NUMA node)

    @classmethod
    def build(cls, devices: Iterable[Device], replicas: int) -> Advertised:
        devs = tuple(devices)
        by_id: dict[str, Device] = {}
        entries: list[tuple[str, str, int | None]] = []
        for d in devs:
            for rid in replica_ids(d.id, replicas):
                by_id[rid] = d
                entries.append((rid, d.health, d.numa_node))
        return cls(devs, replicas, by_id, tuple(entries))

    def counts(self) -> tuple[int, int]:
        healthy = sum(1 for _, h, _ in self.list_entries if h == HEALTHY)
        return healthy, len(self.list_entries) - healthy
