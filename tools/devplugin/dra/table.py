"""The DRA view of one scan: every device of every resource under its DRA name, with its
attributes. Built from exactly what the device plugin advertises (the same Inventory, so the
same IDs, health and memory of absent devices), never from a scan of its own."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgefd.bus.catalogue import Accelerator, Catalogue
from edgefd.core.hostroot import HostRoot

from ..config import Resource
from ..devices import Device
from ..discovery import Snapshot
from .facts import Facts, pci_facts, usb_facts
from .slices import api_device, attributes, device_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One device as the ResourceSlice and the kubelet plugin know it."""

    name: str  # DNS label, the ResourceSlice device name
    device: Device
    resource: Resource
    attributes: dict[str, dict[str, Any]]

    def api(self) -> dict[str, Any]:
        return api_device(self.name, self.attributes, self.device)


Table = Mapping[str, Entry]


class DeviceTable:
    """Keeps the facts of devices that went away (serial, driver, versions), so an unplugged
    device keeps its attributes in the slice while it is remembered."""

    def __init__(self, host: HostRoot, catalogue: Catalogue) -> None:
        self.host = host
        self.catalogue = catalogue
        self._facts: dict[str, Facts] = {}
        self._warned: set[str] = set()

    def _accelerator(self, res: Resource) -> Accelerator | None:
        return self.catalogue.by_id(res.accelerator) if res.accelerator else None

    def build(
        self,
        snap: Snapshot,
        devices: Mapping[str, tuple[Device, ...]],
        resources: Mapping[str, Resource],
    ) -> dict[str, Entry]:
        """`devices`: what each resource advertises now (present and remembered)."""
        usb = {u.name: u for u in snap.usb}
        pci = {p.address: p for p in snap.pci}
        table: dict[str, Entry] = {}
        facts: dict[str, Facts] = {}
        for res_name, devs in devices.items():
            res = resources[res_name]
            acc = self._accelerator(res)
            for d in devs:
                f = self._facts.get(d.id, Facts())
                if d.present and d.bus == "usb" and d.location in usb:
                    f = usb_facts(self.host, usb[d.location])
                elif d.present and d.bus == "pci" and d.location in pci:
                    f = pci_facts(self.host, pci[d.location])
                facts[d.id] = f
                name = device_name(d.id)
                if name in table:
                    if name not in self._warned:
                        log.warning(
                            "device %s is matched by %s and %s; published once, for %s",
                            d.id,
                            table[name].resource.name,
                            res_name,
                            table[name].resource.name,
                        )
                        self._warned.add(name)
                    continue
                table[name] = Entry(name, d, res, attributes(d, res, acc, f))
        self._facts = facts
        return dict(sorted(table.items()))
