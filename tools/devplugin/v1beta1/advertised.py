"""What the kubelet is told about one resource: every device it selects (the inventory's,
present and remembered) as kubelet device IDs with a health, and how the IDs map back.

Device IDs are the inventory's device names (edgefd.inventory.naming): they name where a
device is, never what the kernel hands out afresh (the USB devnum, `/dev/apex_N`), because
the kubelet checkpoints the IDs a container holds and re-admits pods after a restart or a
reboot only if those IDs are healthy again. A device that disappears stays listed, Unhealthy,
so that pods holding it keep a known device and get it back when it returns; it leaves the
list when the inventory forgets it (`forget_after`). A shared device (`replicas: N`) is
listed N times, under its replica IDs (naming.replica_ids).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from edgefd.devplugin.resources import Resource
from edgefd.inventory.device import Device
from edgefd.inventory.naming import replica_ids
from edgefd.inventory.snapshot import Snapshot

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# what the live plugin and the dry run both say of a resource with no device
NOT_SERVED = "no device: not served until one comes"


def health(dev: Device) -> str:
    return HEALTHY if dev.healthy else UNHEALTHY


@dataclass(frozen=True)
class Advertised:
    """One resource's device list, as sent, and its kubelet IDs' devices."""

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
            for rid in replica_ids(d.name, replicas):
                by_id[rid] = d
                entries.append((rid, health(d), d.numa_node))
        return cls(devs, replicas, by_id, tuple(entries))

    @classmethod
    def of(cls, snap: Snapshot, res: Resource) -> Advertised:
        """What the kubelet is told of `res` after the scan `snap`: the front-end's list, and
        the dry run's."""
        return cls.build(snap.of_resource(res.name), res.replicas)

    def counts(self) -> tuple[int, int]:
        healthy = sum(1 for _, h, _ in self.list_entries if h == HEALTHY)
        return healthy, len(self.list_entries) - healthy

    @property
    def served(self) -> bool:
        """Whether the resource is served (its socket made, registered with the kubelet): only
        with a device to list, so a node without a Hailo has no `edgefd.io/hailo: 0`. The one
        decision the front-end and `--dry-run` both take, so the dry run shows what runs."""
        return bool(self.list_entries)

    def summary(self) -> str:
        """`1 healthy, 0 unhealthy`, or NOT_SERVED."""
        if not self.served:
            return NOT_SERVED
        healthy, unhealthy = self.counts()
        return f"{healthy} healthy, {unhealthy} unhealthy"
