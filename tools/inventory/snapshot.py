"""What the inventory hands its subscribers after every scan: an immutable Snapshot of every
device (present and remembered), every bus record (for labels), and the Diff to the snapshot
before it. Subscribers never see a half-updated picture and never share mutable state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgefd.bus.enumerate import ScanResult
from edgefd.core.record import Record

from .device import Device

# what a change is made of; `last_seen` moves on every scan and is not a change, and
# `missing_since` and `missed_since` change only with `present`
COMPARED = tuple(
    f for f in Device._fields if f not in ("name", "last_seen", "missing_since", "missed_since")
)


class Change(Record):
    """One device that is new, forgotten, or different from the snapshot before."""

    name: str
    before: Device | None  # None: new
    after: Device | None  # None: forgotten (it left the inventory)
    fields: tuple[str, ...] = ()  # what differs, of COMPARED ("present", "nodes", ...)

    @property
    def kind(self) -> str:
        if self.before is None:
            return "added"
        return "removed" if self.after is None else "changed"

    @property
    def event(self) -> str:
        """The change in one word, the same in every tool's log (scanners, devplugin,
        device-keeper): added, re-enumerated (back at its place in another USB state, or with
        another node), gone, back, changed, removed (forgotten)."""
        b, a = self.before, self.after
        if b is None or a is None:
            return self.kind
        # another node: across an absence, or within one scan (gone and back between two
        # scans, as a loaded node sees a quick re-plug): the same event either way
        if a.present and (b.state != a.state or (bool(b.nodes) and b.nodes != a.nodes)):
            return "re-enumerated"
        if b.present != a.present:
            return "back" if a.present else "gone"
        return "changed"

    def log_fields(self) -> dict[str, Any]:
        """The change as a json log line's keys (edgefd.core.log): the device, its model
        and place, present or not and why not; the text line says the same in words."""
        dev = self.after or self.before
        assert dev is not None
        out: dict[str, Any] = {
            "device": self.name,
            "event": self.event,
            "model": dev.model,
            "place": dev.key.where,
        }
        if self.after is not None:
            out["present"] = self.after.present
            if self.after.reason:
                out["reason"] = self.after.reason
            if self.after.condition:
                out["condition"] = self.after.condition
            if self.after.state:
                out["state"] = self.after.state
            if self.after.nodes:
                out["nodes"] = [str(n) for n in self.after.nodes]
        return out

    @property
    def moved(self) -> bool:
        """The same device present again with other device nodes than it last had (a re-plug,
        a re-enumeration, within one scan or across an absence: an absent device keeps the
        nodes it was last seen with): what was granted by number is stale."""
        b, a = self.before, self.after
        return (
            b is not None and a is not None and a.present and bool(b.nodes) and b.nodes != a.nodes
        )

    def describe(self) -> str:
        """One line for a person: what happened to the device."""
        b, a = self.before, self.after
        if b is None:
            assert a is not None
            state = f" ({a.state})" if a.state else ""
            nodes = ", ".join(str(n) for n in a.nodes) or "no node"
            return f"{self.name}: {a.model}{state} at {a.key.where}, {nodes}"
        if a is None:
            return f"{self.name}: forgotten (last seen at {b.key.where})"
        parts = []
        reenumerated = self.event == "re-enumerated"
        if reenumerated:
            states = f" ({b.state or '-'} -> {a.state or '-'})" if b.state != a.state else ""
            parts.append(f"re-enumerated{states} at {a.key.where}")
            if b.present == a.present and a.reason != b.reason:
                parts.append(a.reason or "usable again")
        elif b.present != a.present:
            parts.append(a.reason if not a.present else f"back at {a.key.where}")
        elif a.reason != b.reason:
            parts.append(a.reason or "usable again")
        if b.state != a.state and not reenumerated:
            parts.append(f"state {b.state or '-'} -> {a.state or '-'}")
        if b.nodes != a.nodes and a.present:
            old = ", ".join(str(n) for n in b.nodes) or "none"
            parts.append(f"node {old} -> {', '.join(str(n) for n in a.nodes) or 'none'}")
        said = ("present", "reason", "condition", "state", "nodes")  # the reason says its condition
        rest = [f for f in self.fields if f not in said]
        if rest:
            parts.append(f"{', '.join(rest)} changed")
        return f"{self.name}: {'; '.join(parts)}"


class Diff(Record):
    """Every device change between two snapshots, by name."""

    changes: tuple[Change, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.changes)

    @property
    def added(self) -> tuple[Device, ...]:
        return tuple(c.after for c in self.changes if c.kind == "added")  # type: ignore[misc]

    @property
    def removed(self) -> tuple[Device, ...]:
        return tuple(c.before for c in self.changes if c.kind == "removed")  # type: ignore[misc]

    @property
    def changed(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind == "changed")


def diff(before: Mapping[str, Device], after: Mapping[str, Device]) -> Diff:
    out = []
    for name in sorted(before.keys() | after.keys()):
        b, a = before.get(name), after.get(name)
        if b is None or a is None:
            out.append(Change(name, b, a))
            continue
        differ = tuple(f for f in COMPARED if getattr(b, f) != getattr(a, f))
        if differ:
            out.append(Change(name, b, a, differ))
    return Diff(tuple(out))


class Snapshot(Record):
    """The host as one scan saw it, with what the inventory remembers.

    `devices`: every device present or remembered, sorted by name (the device plugin's,
    DRA's and every later consumer's view). `scans`: every record of every bus, as read, and
    `held`: records that vanished less than the hold ago, per bus, and `held_names` the
    devices among them (the labels' view, see `label_scans` and `label_devices`). `diff`: the
    device changes since the snapshot before (may be empty: a rescan that found nothing new
    still makes a snapshot)."""

    seq: int  # 1, 2, ... per snapshot of one inventory
    time: float  # wall clock of the scan
    devices: tuple[Device, ...]
    scans: Mapping[str, ScanResult[Any]]
    held: Mapping[str, tuple[Any, ...]]
    diff: Diff
    warnings: tuple[str, ...] = ()
    held_names: frozenset[str] = frozenset()

    def device(self, name: str) -> Device | None:
        return next((d for d in self.devices if d.name == name), None)

    def of_resource(self, resource: str) -> tuple[Device, ...]:
        """The devices a selector (a resource) selects, present and remembered."""
        return tuple(d for d in self.devices if resource in d.resources)

    def label_scans(self) -> dict[str, ScanResult[Any]]:
        """Every bus's records with the held ones added back, sorted by place: a device that
        re-enumerates keeps its labels through the gap (the hold, see presence.py)."""
        out: dict[str, ScanResult[Any]] = {}
        for bus, res in self.scans.items():
            held = self.held.get(bus, ())
            if held:
                devs = sorted((*res.devices, *held), key=lambda d: d.key)
                res = ScanResult(tuple(devs), res.warnings, res.bus_present)
            out[bus] = res
        return out

    def label_devices(self) -> tuple[Device, ...]:
        """The devices that count for labels: present, or away less than the hold (a Coral
        loading its firmware still counts, once)."""
        return tuple(d for d in self.devices if d.present or d.name in self.held_names)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self.held.values())
