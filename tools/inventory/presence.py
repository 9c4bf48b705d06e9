"""Presence: one tracker of who was where and when, keyed by identity, with two views.

**The hold** (the labels' view). A Coral USB (1a6e:089a -> 18d1:9302) or an Intel NCS2
(03e7:2485 -> 03e7:f63b) disconnects when its firmware is loaded and comes back, up to ~2 s
later, at the same port with new IDs. Published as it happens that is "accelerator gone" then
"back": selectors stop matching and pods may be rejected for a moment. So a record that
vanishes still counts, as last seen, for `hold` seconds from when it was first found missing;
one that shows up meanwhile with the same identity (the same place and, for a device, the
same model) is the same thing and replaces it at once.

**The memory** (the device plugin's and DRA's view). A device that goes away stays known,
absent, with why, so that pods holding it keep naming a known device and get it back when it
returns; it is forgotten `forget_after` seconds after it was last seen (None: never). Devices
remembered by an earlier run (the state file) come back absent.

**Since when** (eviction's, health's and device-keeper's view). An absent device says since when
it is missing (`Device.missing_since`, wall clock): the first scan of this process that did not
see it, or, for one already absent when an earlier run saved it, the time that run found it
missing (kept in the state file). And since when *this process* finds it missing
(`Device.missed_since`): the first scan of this process without it, whatever an earlier run
saved. Eviction counts from that one only: a Coral loading its firmware while the plugin
restarts must be given the whole hold again, never have it used up by an earlier run's saved
times (the state file says what was, not what this process saw). It keeps the nodes it had
when last seen, so a device present again with other nodes is told by the snapshots' Diff as
moved (`Change.moved`): nobody downstream keeps a memory of its own.

Identity: a device's name (its model and place, or serial: naming.py); a record nothing
selects (a hub, a NIC) is known by its place alone. Times: both the hold and the memory count
in monotonic time (`mono`), so a wall clock that steps (a Pi without an RTC, a bad NTP step,
either way) never keeps a device for ever nor drops one early; `wall` (last-seen and
missing-since times) only places a device in time for the APIs and for a later run: one
remembered from an earlier run has been away since `now - last_seen`, never less than nothing
(a last-seen time in the future counts as now).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .device import Device, absence

RESTORED = float("-inf")  # missing since before this process started: never held


class _Entry:
    __slots__ = ("device", "gone_at", "missed_since", "missing_since", "record", "seen_at")

    def __init__(
        self,
        record: Any,
        device: Device | None,
        seen_at: float,
        gone_at: float | None = None,
        missing_since: float | None = None,
    ) -> None:
        self.record = record  # the bus record as last seen (None: known from the state file)
        self.device = device  # the device as last seen, present (None: a plain record)
        self.seen_at = seen_at  # monotonic: the last scan that saw it
        self.gone_at = gone_at  # monotonic: the first scan without it; None while present
        self.missing_since = missing_since  # wall clock of the same; None while present
        self.missed_since: float | None = None  # wall clock: this process's first scan without it


def record_identity(record: Any) -> str:
    """A plain record's identity: its place (a space keeps it apart from device names)."""
    return str(record.key)


class Presence:
    """Not thread-safe: the inventory updates and reads it under its own lock."""

    def __init__(self, hold: float, forget_after: float | None) -> None:
        self.hold = hold
        self.forget_after = forget_after
        self._entries: dict[str, _Entry] = {}

    def restore(self, devices: Iterable[Device], wall: float, mono: float) -> None:
        """Devices an earlier run knew; absent until a scan sees them. One that was absent
        then keeps since when (`missing_since`); for one that was present, the absence starts
        when a scan of this process finds it missing. Either way `missed_since`, the eviction
        clock, starts at this process's first scan without it."""
        for d in devices:
            if d.name not in self._entries:
                away = max(0.0, wall - d.last_seen)  # a time in the future: seen now
                dev = d._replace(present=True, reason="", missing_since=None)
                entry = _Entry(None, dev, mono - away, RESTORED, d.missing_since)
                self._entries[d.name] = entry

    def update(self, seen: Iterable[tuple[Any, Device | None]], wall: float, mono: float) -> None:
        """One scan at `wall` / `mono`: (record, the device it is or None) for everything
        present now."""
        now: dict[str, _Entry] = {}
        for record, dev in seen:
            ident = dev.name if dev is not None else record_identity(record)
            now.setdefault(ident, _Entry(record, dev, mono))
        for ident, e in list(self._entries.items()):
            if ident in now:
                continue
            if e.gone_at is None:
                e.gone_at = mono
            if e.missing_since is None:
                e.missing_since = wall
            if e.missed_since is None:
                e.missed_since = wall
            if not (self._held(e, mono) or self._remembered(e, mono)):
                del self._entries[ident]
        self._entries.update(now)

    def _held(self, e: _Entry, mono: float) -> bool:
        return e.record is not None and e.gone_at is not None and mono - e.gone_at < self.hold

    def _remembered(self, e: _Entry, mono: float) -> bool:
        if e.device is None:
            return False
        return self.forget_after is None or mono - e.seen_at <= self.forget_after

    # -- the hold (labels)

    def held(self, mono: float) -> dict[str, tuple[Any, ...]]:
        """Records that vanished less than `hold` ago, per bus, as last seen."""
        out: dict[str, list[Any]] = {}
        for e in self._entries.values():
            if self._held(e, mono):
                out.setdefault(e.record.key.bus, []).append(e.record)
        return {bus: tuple(recs) for bus, recs in out.items()}

    def held_names(self, mono: float) -> frozenset[str]:
        """The devices among the held records, by name: they still count as there."""
        return frozenset(
            e.device.name for e in self._entries.values() if e.device and self._held(e, mono)
        )

    def next_expiry(self, mono: float) -> float | None:
        """When the earliest hold ends (monotonic), or None: the view changes by itself then."""
        ends = [
            e.gone_at + self.hold
            for e in self._entries.values()
            if e.gone_at is not None and self._held(e, mono)
        ]
        return min(ends) if ends else None

    # -- the memory (devices)

    def devices(self, mono: float) -> list[Device]:
        """Every device present or remembered, sorted by name; the absent ones say why and
        since when."""
        out = []
        for name in sorted(self._entries):
            e = self._entries[name]
            if e.device is None:
                continue
            if e.gone_at is None:
                out.append(e.device)
                continue
            if e.gone_at == RESTORED:
                why = f"not seen since the start (last at {e.device.key.where})"
            else:
                why = absence(e.device, self._held(e, mono))
            out.append(
                e.device._replace(
                    present=False,
                    reason=why,
                    condition="",
                    missing_since=e.missing_since,
                    missed_since=e.missed_since,
                )
            )
        return out
