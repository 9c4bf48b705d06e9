"""What `devplugin --api dra --dry-run` prints: the ResourceSlice(s) a first publish would write
for this host, from one scan, touching neither the API server, the kubelet nor any file."""

from __future__ import annotations

import time
from typing import Any

from edgefd.bus.catalogue import load_catalogue
from edgefd.core.output import emit_json

from ..config import Config
from ..devices import Inventory, match_devices
from ..discovery import host_exists, scan_host
from ..plugin import Options
from .slices import pool_slices, slice_object
from .table import DeviceTable


def slices(config: Config, opts: Options, node: str) -> list[dict[str, Any]]:
    globs = tuple(sorted({g for r in config.resources for g in r.dev_globs}))
    snap = scan_host(opts.host, globs)
    exists = host_exists(opts.host)
    now = time.time()
    devices = {
        r.name: Inventory(config.forget_after).update(
            match_devices(r, snap.usb, snap.pci, snap.dev_nodes, exists, now), now
        )
        for r in config.resources
    }
    table = DeviceTable(opts.host, load_catalogue()).build(snap, devices, config.by_name())
    return [
        slice_object(name, spec, 1)
        for name, spec in pool_slices(node, [e.api() for e in table.values()])
    ]


def show(config: Config, opts: Options, node: str) -> int:
    objs = slices(config, opts, node)
    if len(objs) == 1:
        emit_json(objs[0])
    else:
        emit_json({"apiVersion": "v1", "kind": "List", "items": objs})
    return 0
