"""What `devplugin --dry-run` shows: every resource, its devices and the Allocate answer each
would get, from one scan, without touching the kubelet or any file."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import click
from google.protobuf import json_format

from edgefd.core.escape import printable
from edgefd.core.output import emit_json

from .allocate import LinkLayout, container_response
from .config import Config
from .devices import Advertised, Inventory, match_devices
from .discovery import host_exists, scan_host
from .plugin import Options
from .resource import socket_name


def _echo(line: str) -> None:
    # locations, IDs and reasons come from the host: one printable line each
    click.echo(printable(line))


def show(config: Config, opts: Options, output: str) -> int:
    """Scan once and show what would be served, without touching the kubelet or any file."""
    globs = tuple(sorted({g for r in config.resources for g in r.dev_globs}))
    snap = scan_host(opts.host, globs)
    exists = host_exists(opts.host)
    now = time.time()
    layout = LinkLayout(opts.links_dir)
    doc: list[dict[str, Any]] = []
    for res in config.resources:
        devs = Inventory(config.forget_after).update(
            match_devices(res, snap.usb, snap.pci, snap.dev_nodes, exists, now), now
        )
        adv = Advertised.build(devs, res.replicas)
        entries = []
        for d in devs:
            resp = container_response(res, [d], layout, opts.cdi_prefix)
            entry = d.to_json()
            entry["kubelet_ids"] = [i for i, dev in adv.by_kubelet_id.items() if dev.id == d.id]
            entry["allocate"] = json_format.MessageToDict(
                resp, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
            entries.append(entry)
        doc.append(
            {
                "resource": res.name,
                "socket": os.path.join(opts.plugin_dir, socket_name(res.name)),
                "replicas": res.replicas,
                "devices": entries,
            }
        )
    if output == "json":
        emit_json({"config": config.source, "resources": doc})
        return 0
    _echo(f"# configuration: {config.source}")
    for r in doc:
        _echo(f"{r['resource']} ({len(r['devices'])} device(s), socket {r['socket']})")
        for d in r["devices"]:
            where = f"{d['bus']} {d['location']}"
            state = f" {d['state']}" if d["state"] else ""
            why = f" ({d['reason']})" if d["reason"] else ""
            _echo(f"  {d['id']}: {d['health']}{why}, {where}, {d['ids']}{state}")
            if d["kubelet_ids"] != [d["id"]]:
                _echo(f"    kubelet IDs: {', '.join(d['kubelet_ids'])}")
            _echo("    allocate: " + json.dumps(d["allocate"], sort_keys=True))
    return 0
