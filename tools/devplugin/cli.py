"""`devplugin`: the kubelet device plugin command. Thin: options in, Plugin out. grpc and the
metrics client are imported only once a command actually runs."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import click

from edgefd.cli import (
    Duration,
    Listen,
    dry_run_option,
    guarded,
    host_root_option,
    listen_option,
    output_option,
    verbose_option,
)
from edgefd.core.errors import UsageError

if TYPE_CHECKING:
    from .plugin import Plugin

TOOL = "devplugin"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
LINKS_SUBDIR = "edgefd-links"
log = logging.getLogger(TOOL)


def _serve(plugin: Plugin) -> int:
    """Run until SIGTERM/SIGINT; SIGHUP reloads the configuration."""
    from edgefd.runtime.signals import Signals

    with Signals(reload=True) as signals:
        plugin.start()
        log.info("serving %d resource(s) in %s", len(plugin.resources), plugin.opts.plugin_dir)
        try:
            while not signals.stop_requested:
                signals.wait()
                if signals.take_reload():
                    log.info("SIGHUP: reloading the configuration")
                    plugin.reload()
            log.info("stopping")
        finally:
            plugin.stop()
    return 0


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
    default="10s",
    show_default=True,
    type=Duration(minimum=0.5, maximum=86400.0),
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
        raise UsageError(
            f"--cdi-prefix {cdi_prefix!r}: expected 'vendor.com' or 'vendor.com/class'"
        )
    from edgefd.core.hostroot import HostRoot

    from .config import load_config
    from .plugin import Options, Plugin

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
        from .dryrun import show

        return show(config, opts, output)
    plugin = Plugin(opts, config, load_config=lambda: load_config(config_path))
    return _serve(plugin)
