"""What `devplugin --dry-run` shows: every resource, whether the live plugin would serve it
(Advertised.served, the front-end's own decision: a resource with no device is not served, so
no `(0 device(s), socket ...)` for a socket that would never be made), its devices and the
Allocate answer each would get, from one scan, without touching the kubelet or any file."""

from __future__ import annotations

import json
import os
from typing import Any

import click
from google.protobuf import json_format

from edgefd.core.escape import printable
from edgefd.core.output import emit_json
from edgefd.devplugin.resources import Config
from edgefd.inventory.device import Device

from ..app import Options, make_inventory
from ..links import LinkLayout
from .advertised import Advertised, health
from .allocate import container_response
from .resource import socket_name


def _echo(line: str) -> None:
    # locations, IDs and reasons come from the host: one printable line each
    click.echo(printable(line))


def _json(d: Device) -> dict[str, Any]:
    return {
        "id": d.name,
        "bus": d.bus,
        "location": d.key.place,
        "devnodes": list(d.devnodes),
        "dev": [n.dev for n in d.nodes],
        "model": d.model,
        "state": d.state,
        "ids": d.ids,
        "numa_node": d.numa_node,
        "health": health(d),
        "reason": d.reason,
    }


def show(config: Config, opts: Options, output: str) -> int:
    """Scan once and show what would be served, without touching the kubelet or any file."""
    snap = make_inventory(opts.scratch(), config).scan()
    layout = LinkLayout(opts.links_dir)
    doc: list[dict[str, Any]] = []
    for res in config.resources:
        adv = Advertised.of(snap, res)
        entries = []
        for d in adv.devices:
            resp = container_response(res, [d], layout, opts.cdi_prefix)
            entry = _json(d)
            entry["kubelet_ids"] = [i for i, dev in adv.by_kubelet_id.items() if dev is d]
            entry["allocate"] = json_format.MessageToDict(
                resp, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
            entries.append(entry)
        socket = os.path.join(opts.plugin_dir, socket_name(res.name)) if adv.served else None
        doc.append(
            {
                "resource": res.name,
                "served": adv.served,
                "summary": adv.summary(),
                "socket": socket,
                "replicas": res.replicas,
                "devices": entries,
            }
        )
    if output == "json":
        emit_json({"config": config.source, "resources": doc})
        return 0
    _echo(f"# configuration: {config.source}")
    for r in doc:
        where = f"; socket {r['socket']}" if r["served"] else ""
        _echo(f"{r['resource']}: {r['summary']}{where}")
        for d in r["devices"]:
            where = f"{d['bus']} {d['location']}"
            state = f" {d['state']}" if d["state"] else ""
            why = f" ({d['reason']})" if d["reason"] else ""
            ids = f", {d['ids']}" if d["ids"] else ""  # a platform device has no IDs
            _echo(f"  {d['id']}: {d['health']}{why}, {where}{ids}{state}")
            if d["kubelet_ids"] != [d["id"]]:
                _echo(f"    kubelet IDs: {', '.join(d['kubelet_ids'])}")
            _echo("    allocate: " + json.dumps(d["allocate"], sort_keys=True))
    return 0
