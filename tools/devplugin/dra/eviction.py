"""When an absent device's taint turns from NoSchedule to NoExecute (`--evict-after`, off by
default): the standard way (KEP-5055 device taints) to have the pods using a pulled device
evicted, so that their controller places them on a node with a healthy one.

A device counts as gone for good once it has been missing longer than the inventory's hold
(a Coral's or an NCS2's re-enumeration fits in it, and must never evict) plus `after`,
measured from the last scan that saw it. The deadline is a pure function of the device, so
the slice says the same thing at every rewrite and a restart recomputes it (a device absent
since before the restart is evicted once its deadline has passed, not later). The taint's
`timeAdded` is the deadline: a workload's `tolerationSeconds` counts from when eviction
began, not from the unplug.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from edgefd.inventory.device import Device


@dataclass(frozen=True)
class Eviction:
    after: float | None = None  # None: never (the default)
    hold: float = 0.0  # the inventory's re-enumeration hold

    def deadline(self, dev: Device) -> float | None:
        """Wall-clock time the device's taint becomes NoExecute; None: it never does."""
        if self.after is None or dev.present or dev.last_seen <= 0:
            return None
        return dev.last_seen + self.hold + self.after

    def due(self, dev: Device, now: float) -> bool:
        at = self.deadline(dev)
        return at is not None and now >= at

    def next_deadline(self, devices: Iterable[Device], now: float) -> float | None:
        """The earliest deadline still to come: when the slice has to change by itself."""
        ahead = [at for d in devices if (at := self.deadline(d)) is not None and at > now]
        return min(ahead, default=None)


NEVER = Eviction()
