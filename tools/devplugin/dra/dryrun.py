"""What `devplugin --api dra --dry-run` prints: the ResourceSlice(s) a first publish would write
for this host, from one scan, touching neither the API server, the kubelet nor any file. The
devices are the front-end's: the same table (table.build) under the same taints
(eviction.Tainting.devices, with `--evict-after`), cut into the same slices (pool_slices)."""

from __future__ import annotations

import time
from typing import Any

from edgefd.core.output import emit_json
from edgefd.devplugin.resources import Config
from edgefd.inventory.inventory import Inventory

from . import table
from .eviction import Eviction, Tainting
from .slices import pool_slices, slice_object


def slices(
    config: Config, inventory: Inventory, node: str, evict_after: float | None = None
) -> list[dict[str, Any]]:
    snap = inventory.scan()
    entries = table.build(snap, config)
    tainting = Tainting(Eviction(evict_after, inventory.hold), lambda at: None)
    devices = tainting.devices(entries.values(), time.time())
    return [slice_object(name, spec, 1) for name, spec in pool_slices(node, devices)]


def show(config: Config, inventory: Inventory, node: str, evict_after: float | None = None) -> int:
    objs = slices(config, inventory, node, evict_after)
    if len(objs) == 1:
        emit_json(objs[0])
    else:
        emit_json({"apiVersion": "v1", "kind": "List", "items": objs})
    return 0
