"""What `devplugin --api dra --dry-run` prints: the ResourceSlice(s) a first publish would write
for this host, from one scan, touching neither the API server, the kubelet nor any file."""

from __future__ import annotations

from typing import Any

from edgefd.core.output import emit_json
from edgefd.inventory.inventory import Inventory
from edgefd.inventory.resources import Config

from . import table
from .slices import pool_slices, slice_object


def slices(config: Config, inventory: Inventory, node: str) -> list[dict[str, Any]]:
    snap = inventory.scan()
    entries = table.build(snap, config.by_name())
    return [
        slice_object(name, spec, 1)
        for name, spec in pool_slices(node, [e.api() for e in entries.values()])
    ]


def show(config: Config, inventory: Inventory, node: str) -> int:
    objs = slices(config, inventory, node)
    if len(objs) == 1:
        emit_json(objs[0])
    else:
        emit_json({"apiVersion": "v1", "kind": "List", "items": objs})
    return 0
