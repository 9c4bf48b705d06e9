"""The hold: one rule that keeps labels steady while a device re-enumerates.

A Coral USB Accelerator (1a6e:089a -> 18d1:9302) or an Intel NCS2 (03e7:2485 -> 03e7:f63b)
disconnects when its firmware is loaded and comes back, up to ~2 s later, at the same port with
new IDs. Published as it happens, that is "accelerator gone" then "accelerator back": selectors
stop matching and pods may be rejected for a moment. The rule:

    A device that vanishes from its place on the bus (USB port path, PCI address) is held
    for `seconds` (default 3): it still counts, with the identity it last had, as if present.
    A device that shows up at the same place within that time is the same logical device and
    replaces the held one at once. Once the hold expires, the device's labels go.

"The same place is the same device" is also the device plugin's rule (its device IDs are the
port path or PCI address, see edgefd.devplugin.devices), so a re-enumerating Coral is one
device to both the scheduler's labels and the kubelet's resources. So capability labels
(`edgefd.io/edgetpu.present`, `.count`) never change during the gap, and the NFD-style label
changes once, from the boot to the runtime ID, with no window in which the device is absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from edgefd.bus.enumerate import BusReader, ScanResult

DEFAULT_HOLD = 3.0


class Hold:
    """Remembers where each device was last seen; adds the recently vanished ones to a scan."""

    def __init__(self, seconds: float = DEFAULT_HOLD) -> None:
        self.seconds = seconds
        # (bus, place) -> the device as last seen there
        self._seen: dict[tuple[str, str], Any] = {}
        # (bus, place) -> when it was first found missing (the hold counts from then: scans
        # happen on changes, so "last seen" may be long before it went)
        self._missing: dict[tuple[str, str], float] = {}
        self._held_until: list[float] = []  # when each device held by the last apply() expires

    def apply(
        self,
        scans: Mapping[str, ScanResult[Any]],
        readers: Sequence[BusReader[Any]],
        now: float,
    ) -> dict[str, ScanResult[Any]]:
        """The scans with held devices added back (sorted by place, as a scan returns them)."""
        out: dict[str, ScanResult[Any]] = dict(scans)
        self._held_until = []
        for reader in readers:
            res = scans.get(reader.bus)
            if res is None:
                continue
            present = {d.key.place: d for d in res.devices}
            held = []
            for (bus, place), dev in list(self._seen.items()):
                if bus != reader.bus or place in present:
                    continue
                since = self._missing.setdefault((bus, place), now)
                if now - since < self.seconds:
                    held.append(dev)
                    self._held_until.append(since + self.seconds)
                else:
                    del self._seen[(bus, place)]
                    del self._missing[(bus, place)]
            for place, dev in present.items():
                self._seen[(reader.bus, place)] = dev
                self._missing.pop((reader.bus, place), None)
            if held:
                devices = sorted((*res.devices, *held), key=lambda d: d.key)
                out[reader.bus] = replace(res, devices=tuple(devices))
        return out

    @property
    def held(self) -> int:
        """How many devices the last apply() held."""
        return len(self._held_until)

    def next_expiry(self) -> float | None:
        """When the earliest hold of the last apply() ends (its clock), or None."""
        return min(self._held_until) if self._held_until else None
