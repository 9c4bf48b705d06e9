"""When an absent device's taint turns from NoSchedule to NoExecute (`--evict-after`, off by
default): the standard way (KEP-5055 device taints) to have the pods using a pulled device
evicted, so that their controller places them on a node with a healthy one.

A device counts as gone for good once it has been missing longer than the inventory's hold
(a Coral's or an NCS2's re-enumeration fits in it, and must never evict) plus `after`,
measured from when it was found missing: the time of the first snapshot without it (the
front-end keeps that), not its `last_seen`, which is the last scan that saw it and may be a
whole rescan period older than the unplug. A device already absent when the process starts
counts from its `last_seen` (all that is known). The deadline is fixed once the device is
missing, so the slice says the same thing at every rewrite. The taint's `timeAdded` is the
deadline: a workload's `tolerationSeconds` counts from when eviction began, not from the
unplug.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from edgefd.inventory.device import Device


@dataclass(frozen=True)
class Eviction:
    after: float | None = None  # None: never (the default)
    hold: float = 0.0  # the inventory's re-enumeration hold

    def deadline(self, dev: Device, missing_since: float | None = None) -> float | None:
        """Wall-clock time the device's taint becomes NoExecute; None: it never does.
        `missing_since`: when it was found missing (None: its last_seen)."""
        since = missing_since if missing_since is not None else dev.last_seen
        if self.after is None or dev.present or since <= 0:
            return None
        return since + self.hold + self.after

    def due(self, dev: Device, now: float, missing_since: float | None = None) -> bool:
        at = self.deadline(dev, missing_since)
        return at is not None and now >= at

    def next_deadline(
        self, devices: Iterable[tuple[Device, float | None]], now: float
    ) -> float | None:
        """The earliest deadline still to come, of (device, missing since) pairs: when the
        slice has to change by itself."""
        ahead = [at for d, s in devices if (at := self.deadline(d, s)) is not None and at > now]
        return min(ahead, default=None)


NEVER = Eviction()


def missing_since(
    before: Mapping[str, Device],
    after: Mapping[str, Device],
    known: Mapping[str, float],
    now: float,
) -> dict[str, float]:
    """When each absent device of `after` was found missing: kept from `known`; `now` for
    one present in `before`; its last_seen for one absent from the start."""
    out = {}
    for name, dev in after.items():
        if dev.present:
            continue
        if name in known:
            out[name] = known[name]
        elif name in before and before[name].present:
            out[name] = now
        else:
            out[name] = dev.last_seen
    return out
