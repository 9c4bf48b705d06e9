"""The DRA view of one snapshot: every device a resource selects, under its name, with the
resource it is handed out as and its attributes. Built from the inventory's snapshot (the same
devices, names, health and memory the device plugin serves), never from a scan of its own."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from edgefd.devplugin.resources import Config, Resource
from edgefd.inventory.device import Device
from edgefd.inventory.snapshot import Snapshot

from .eviction import NEVER, Eviction
from .slices import api_device, attributes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One device as the ResourceSlice and the kubelet plugin know it."""

    device: Device
    resource: Resource  # the one DRA hands it out as (Config.dra_resource)
    attributes: dict[str, dict[str, Any]]

    @property
    def name(self) -> str:
        """The ResourceSlice device name: the device's one name."""
        return self.device.name

    def api(self, eviction: Eviction = NEVER, now: float = 0.0) -> dict[str, Any]:
        return api_device(self.name, self.attributes, self.device, eviction, now)


def build(snap: Snapshot, config: Config) -> dict[str, Entry]:
    """Every device a configured resource selects, by name, each once."""
    table: dict[str, Entry] = {}
    for d in snap.devices:
        res = config.dra_resource(d)
        if res is not None:
            table[d.name] = Entry(d, res, attributes(d))
    return table
