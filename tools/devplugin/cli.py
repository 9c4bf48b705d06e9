"""`devplugin`: the kubelet device plugin command. Thin: options in, Plugin out."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from typing import Any

import click
from google.protobuf import json_format

from tools.common.cli import (
    BadInput,
    Listen,
    dry_run_option,
    emit_json,
    guarded,
    host_root_option,
    listen_option,
    output_option,
    verbose_option,
)
from tools.common.hostroot import HostRoot

from .allocate import LinkLayout, container_response
from .config import Config, load_config
from .devices import Advertised, Inventory, match_devices
from .plugin import Options, Plugin, host_exists, scan_host, socket_name
from .registration import DEFAULT_PLUGIN_DIR

TOOL = "devplugin"
LINKS_SUBDIR = "edgefd-links"
log = logging.getLogger(TOOL)


def _dry_run(config: Config, opts: Options, output: str) -> int:
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
    click.echo(f"# configuration: {config.source}")
    for r in doc:
        click.echo(f"{r['resource']} ({len(r['devices'])} device(s), socket {r['socket']})")
        for d in r["devices"]:
            where = f"{d['bus']} {d['location']}"
            state = f" {d['state']}" if d["state"] else ""
            why = f" ({d['reason']})" if d["reason"] else ""
            click.echo(f"  {d['id']}: {d['health']}{why}, {where}, {d['ids']}{state}")
            if d["kubelet_ids"] != [d["id"]]:
                click.echo(f"    kubelet IDs: {', '.join(d['kubelet_ids'])}")
            click.echo("    allocate: " + json.dumps(d["allocate"], sort_keys=True))
    return 0


def _serve(plugin: Plugin) -> int:
    """Run until SIGTERM/SIGINT; SIGHUP reloads the configuration."""
    wake = threading.Event()
    pending: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        pending.append(signum)
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    plugin.start()
    log.info("serving %d resource(s) in %s", len(plugin.resources), plugin.opts.plugin_dir)
    try:
        while True:
            wake.wait()
            wake.clear()
            while pending:
                sig = pending.pop(0)
                if sig == signal.SIGHUP:
                    log.info("SIGHUP: reloading the configuration")
                    plugin.reload()
                else:
                    log.info("%s: stopping", signal.Signals(sig).name)
                    return 0
    finally:
        plugin.stop()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="EDGEFD_DEVPLUGIN_CONFIG",
    help="Resources YAML (default: one resource per catalogue accelerator).",
)
@click.option(
    "--plugin-dir",
    default=DEFAULT_PLUGIN_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="The kubelet's device-plugin directory (kubelet.sock and our sockets).",
)
@click.option(
    "--links-dir",
    default=None,
    help="Where stable device links are kept, as a host path "
    f"[default: <plugin-dir>/{LINKS_SUBDIR}]; '' gives DeviceSpecs the raw nodes.",
)
@click.option("--cdi-prefix", default=None, help="Add CDI names '<prefix>/<class>=<id>'.")
@listen_option(":8082")
@click.option(
    "--rescan-interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0.5),
    help="Full rescan backstop, seconds (hot-plug is noticed within a second anyway).",
)
@host_root_option
@dry_run_option
@output_option
@verbose_option
@guarded(TOOL)
def main(
    config_path: str | None,
    plugin_dir: str,
    links_dir: str | None,
    cdi_prefix: str | None,
    listen: Listen,
    rescan_interval: float,
    host_root: str,
    dry_run: bool,
    output: str,
    verbose: int,
) -> int:
    """Kubelet device plugin for edge accelerators (Coral USB/PCIe, Intel NCS2, ...)."""
    plugin_dir = os.path.abspath(plugin_dir)
    if links_dir is None:
        links_dir = os.path.join(plugin_dir, LINKS_SUBDIR)
    if cdi_prefix is not None and (not cdi_prefix or "=" in cdi_prefix):
        raise BadInput(f"--cdi-prefix {cdi_prefix!r}: expected 'vendor.com' or 'vendor.com/class'")
    config = load_config(config_path)
    opts = Options(
        plugin_dir=plugin_dir,
        host=HostRoot.of(host_root),
        links_dir=links_dir or None,
        cdi_prefix=cdi_prefix,
        listen=listen,
        rescan_interval=rescan_interval,
    )
    if dry_run:
        return _dry_run(config, opts, output)
    plugin = Plugin(opts, config, load_config=lambda: load_config(config_path))
    return _serve(plugin)
