"""When an absent device's taint turns from NoSchedule to NoExecute (`--evict-after`, off by
default): the standard way (KEP-5055 device taints) to have the pods using a pulled device
evicted, so that their controller places them on a node with a healthy one.

A device counts as gone for good once it has been missing longer than the inventory's hold
(a Coral's or an NCS2's re-enumeration fits in it, and must never evict) plus `after`,
measured from when *this process* found it missing: the inventory's `Device.missed_since`
(its first scan without it). Never its `last_seen`, which is the last scan that saw it and may
be a whole rescan period older than the unplug, and never an earlier run's saved times
(`missing_since` of a device absent when that run stopped): a Coral loading its firmware while
the plugin restarts was away at the first scan, and counted from the state file its NoExecute
taint came 0.9 s after the start, dated in the past, and the eviction controller evicted a
pod whose Coral was back 2.7 s later. A restart therefore gives an absent device the whole
hold and `after` again; it delays an eviction by at most the time the plugin was down. The
deadline is fixed once the device is missing, so the slice says the same thing at every
rewrite. The taint's `timeAdded` is the deadline: a workload's `tolerationSeconds` counts
from when eviction began, not from the unplug.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from edgefd.inventory.device import Device

log = logging.getLogger(__name__)


class Entry(Protocol):
    """A device as the slice lists it (table.Entry)."""

    @property
    def name(self) -> str: ...
    @property
    def device(self) -> Device: ...
    def api(self, eviction: Eviction, now: float) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Eviction:
    after: float | None = None  # None: never (the default)
    hold: float = 0.0  # the inventory's re-enumeration hold

    def deadline(self, dev: Device) -> float | None:
        """Wall-clock time the device's taint becomes NoExecute; None: it never does."""
        since = dev.missed_since
        if self.after is None or dev.present or since is None or since <= 0:
            return None
        return since + self.hold + self.after

    def due(self, dev: Device, now: float) -> bool:
        at = self.deadline(dev)
        return at is not None and now >= at

    def next_deadline(self, devices: Iterable[Device], now: float) -> float | None:
        """The earliest deadline still to come: when the slice has to change by itself."""
        ahead = [at for d in devices if (at := self.deadline(d)) is not None and at > now]
        return min(ahead, default=None)


NEVER = Eviction()


class Tainting:
    """The slice's devices at a moment, under an eviction policy: each with its taints; which
    ones have just begun to evict (said once, at warning level); and, since a deadline passing
    changes the slice with no scan to say so, a scan asked of the inventory (`wake_at`, its one
    timer) for the next deadline, when the slice is built again."""

    def __init__(self, policy: Eviction, wake_at: Callable[[float | None], None]) -> None:
        self.policy = policy
        self.wake_at = wake_at
        self.evicting: set[str] = set()

    def devices(self, entries: Iterable[Entry], now: float) -> list[dict[str, Any]]:
        entries = list(entries)
        evicting = {e.name for e in entries if self.policy.due(e.device, now)}
        for e in entries:
            if e.name in evicting - self.evicting:
                dev = e.device
                log.warning(
                    "%s: absent for %.0fs (%s): NoExecute taint, the pods using it are evicted",
                    e.name,
                    now - (dev.missed_since or now),
                    dev.reason,
                )
        self.evicting = evicting
        at = self.policy.next_deadline((e.device for e in entries), now)
        self.wake_at(None if at is None else at + 0.01)
        return [e.api(self.policy, now) for e in entries]
