"""Which bus records are devices, and whose: the catalogue's one match, then each consumer's
selectors (the device plugin's resources), from the same records in the same pass.

A selector picks devices by catalogue model (`accelerator`), catalogue `kind`, its own USB/PCI
IDs, or /dev globs. Its IDs are matched against the record; what the device *is* (its model
and life stage) still comes from the catalogue when the catalogue knows it, so a resource
naming the Coral's IDs by hand and the default resource agree on the device and its name.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

from edgefd.bus.catalogue import AccelMatch, Catalogue, PciId, UsbId
from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.record import Record

from .device import Device, facts_of
from .naming import device_name

ID_FROM = ("port", "serial")


class Selector(Record):
    """What one resource selects. Explicit IDs, when given, replace the model or kind."""

    name: str  # the resource, "edgefd.io/coral-usb"
    accelerator: str | None = None  # a catalogue model: "coral-usb"
    kind: str | None = None  # a catalogue kind: "edgetpu" (every model of it)
    usb: tuple[UsbId, ...] = ()
    pci: tuple[PciId, ...] = ()
    dev_globs: tuple[str, ...] = ()  # a PCI device's nodes to give; alone: bare /dev nodes
    id_from: str = "port"  # "serial": a USB device with a serial is named by it

    @property
    def short_name(self) -> str:
        """`coral-usb` for `edgefd.io/coral-usb`: the model of what the catalogue lacks."""
        return self.name.rpartition("/")[2]

    @property
    def globs_only(self) -> bool:
        return not (self.usb or self.pci or self.accelerator or self.kind)

    def state_of(self, record: Any, match: AccelMatch | None) -> str | None:
        """The life stage `record` is in if this selects it, else None."""
        if self.usb or self.pci:
            if record.key.bus == "usb":
                for uid in self.usb:
                    if uid.vendor == record.vendor and uid.product == record.product:
                        return uid.state or (match.state if match else "")
            elif record.key.bus == "pci" and any(
                p.matches(record.vendor, record.device, record.class_code) for p in self.pci
            ):
                return ""
            return None
        if match is None:
            return None
        if self.accelerator is not None and match.accelerator.id == self.accelerator:
            return match.state
        if self.kind is not None and match.accelerator.kind == self.kind:
            return match.state
        return None


def _glob_match(path: str, globs: Sequence[str]) -> bool:
    return not globs or any(fnmatch.fnmatchcase(path, g) for g in globs)


def identify(
    record: Any,
    catalogue: Catalogue | None,
    selectors: Sequence[Selector],
    now: float,
) -> Device | None:
    """The device `record` is, seen now; None for a record nothing selects (a hub, a NIC).
    Whether it can be used is for the health sources (health_sources.py)."""
    match = catalogue.match(record) if catalogue is not None else None
    chosen: list[tuple[Selector, str]] = []
    for sel in selectors:
        state = sel.state_of(record, match)
        if state is not None:
            chosen.append((sel, state))
    if match is None and not chosen:
        return None
    first = chosen[0][0] if chosen else None
    model = match.accelerator.id if match else first.short_name  # type: ignore[union-attr]
    kind = match.accelerator.kind if match else model
    state = chosen[0][1] if chosen else match.state  # type: ignore[union-attr]
    nodes: tuple[DevNode, ...] = record.nodes
    if record.key.bus in ("pci", "platform"):
        globs = (first.dev_globs if first else ()) or (match.accelerator.dev_globs if match else ())
        nodes = tuple(n for n in nodes if _glob_match(n.path, globs))
    facts = facts_of(record)
    serial = facts.serial if first is not None and first.id_from == "serial" else None
    serial = serial if record.key.bus == "usb" else None
    dev = Device(
        name=device_name(model, record.key, serial),
        key=record.key,
        model=model,
        kind=kind,
        state=state,
        ids=record.id,
        nodes=nodes,
        numa_node=record.numa_node,
        facts=facts,
        resources=tuple(sel.name for sel, _ in chosen),
        last_seen=now,
        by_serial=serial is not None,
    )
    return dev


def glob_devices(
    selectors: Sequence[Selector], nodes: Iterable[DevNode], now: float
) -> list[Device]:
    """Bare /dev nodes, one device each, for the selectors made of globs alone."""
    out = []
    nodes = tuple(nodes)
    for sel in selectors:
        if not (sel.globs_only and sel.dev_globs):
            continue
        for node in nodes:
            if _glob_match(node.path, sel.dev_globs):
                key = DeviceKey("dev", node.path)
                out.append(
                    Device(
                        name=device_name(sel.short_name, key),
                        key=key,
                        model=sel.short_name,
                        kind=sel.short_name,
                        nodes=(node,),
                        resources=(sel.name,),
                        last_seen=now,
                    )
                )
    return out


def globs_of(selectors: Iterable[Selector]) -> tuple[str, ...]:
    """The /dev globs to list: those of the glob-only selectors."""
    return tuple(sorted({g for s in selectors if s.globs_only for g in s.dev_globs}))
