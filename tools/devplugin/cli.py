"""`devplugin`: the kubelet device plugin command. Thin: options in, Plugin (and, with
`--api dra|both`, the DRA driver) out. grpc, the metrics client and the Kubernetes client are
imported only once a command actually runs."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import click

from edgefd.cli import (
    Duration,
    Listen,
    api_options,
    command,
    dry_run_option,
    guarded,
    host_root_option,
    listen_option,
    output_option,
    verbose_option,
)
from edgefd.core.errors import UsageError

if TYPE_CHECKING:
    from .dra.driver import DraDriver
    from .plugin import Plugin

TOOL = "devplugin"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_KUBELET_DIR = "/var/lib/kubelet"
DEFAULT_CDI_DIR = "/var/run/cdi"
LINKS_SUBDIR = "edgefd-links"
API_MODES = ("device-plugin", "dra", "both")
log = logging.getLogger(TOOL)


def _serve(plugin: Plugin, dra: DraDriver | None = None) -> int:
    """Run until SIGTERM/SIGINT; SIGHUP reloads the configuration."""
    from edgefd.runtime.signals import Signals

    with Signals(reload=True) as signals:
        plugin.start()
        if dra is not None:
            dra.start()
        if plugin.opts.device_plugin:
            log.info("serving %d resource(s) in %s", len(plugin.resources), plugin.opts.plugin_dir)
        try:
            while not signals.stop_requested:
                signals.wait()
                if signals.take_reload():
                    log.info("SIGHUP: reloading the configuration")
                    plugin.reload()
            log.info("stopping")
        finally:
            if dra is not None:
                dra.stop()
            plugin.stop()
    return 0


@command(TOOL)
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
@click.option(
    "--cdi-spec-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Device plugin: write CDI specs for the devices here (e.g. /var/run/cdi) and answer "
    "Allocate with their CDI names (prefix: --cdi-prefix, default edgefd.io).",
)
@click.option(
    "--api",
    "api_mode",
    type=click.Choice(API_MODES),
    default="device-plugin",
    show_default=True,
    help="device-plugin: extended resources (v1beta1). dra: ResourceSlices and a DRA kubelet "
    "plugin (resource.k8s.io/v1). both: the same devices through both APIs.",
)
@click.option(
    "--kubelet-dir",
    default=DEFAULT_KUBELET_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="DRA: the kubelet's directory (plugins_registry/, plugins/edgefd.io/).",
)
@click.option(
    "--cdi-dir",
    default=DEFAULT_CDI_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="DRA: where each prepared claim's CDI spec is written.",
)
@api_options("DRA: ")
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
    cdi_spec_dir: str | None,
    api_mode: str,
    kubelet_dir: str,
    cdi_dir: str,
    node_name: str | None,
    kubeconfig: str | None,
    api_timeout: float,
    listen: Listen,
    rescan_interval: float,
    host_root: str,
    dry_run: bool,
    output: str,
    verbose: int,
) -> int:
    """Kubelet device plugin for edge accelerators (Coral USB/PCIe, Intel NCS2, ...)."""
    plugin_dir = os.path.abspath(plugin_dir)
    kubelet_dir = os.path.abspath(kubelet_dir)
    dra = api_mode in ("dra", "both")
    if links_dir is None:
        base = plugin_dir if api_mode != "dra" else _dra_dir(kubelet_dir)
        links_dir = os.path.join(base, LINKS_SUBDIR)
    if cdi_prefix is not None and (not cdi_prefix or "=" in cdi_prefix):
        raise UsageError(
            f"--cdi-prefix {cdi_prefix!r}: expected 'vendor.com' or 'vendor.com/class'"
        )
    if dra and not node_name:
        raise UsageError(f"--api {api_mode} needs --node-name (or $NODE_NAME): the pool's node")
    if dra and dry_run and api_mode == "both" and output == "json":
        raise UsageError("--dry-run -o json shows one API: pass --api device-plugin or dra")
    from edgefd.core.hostroot import HostRoot

    from .config import load_config
    from .plugin import Options, Plugin

    config = load_config(config_path)
    opts = Options(
        plugin_dir=plugin_dir,
        host=HostRoot.of(host_root),
        links_dir=links_dir or None,
        cdi_prefix=cdi_prefix,
        cdi_spec_dir=os.path.abspath(cdi_spec_dir) if cdi_spec_dir else None,
        device_plugin=api_mode != "dra",
        listen=listen,
        rescan_interval=rescan_interval,
    )
    if dry_run:
        from .dryrun import show

        code = show(config, opts, output) if api_mode != "dra" else 0
        if dra:
            from .dra.dryrun import show as show_slices

            assert node_name
            code = code or show_slices(config, opts, node_name)
        return code
    plugin = Plugin(opts, config, load_config=lambda: load_config(config_path))
    if opts.cdi_spec_dir and opts.device_plugin:
        _write_cdi_specs(plugin)
    driver = None
    if dra:
        assert node_name
        driver = _dra_driver(plugin, node_name, kubelet_dir, cdi_dir, kubeconfig, api_timeout)
    return _serve(plugin, driver)


def _dra_dir(kubelet_dir: str) -> str:
    from .dra.kubeletplugin import KubeletPlugin

    return KubeletPlugin.plugin_dir_of(kubelet_dir)


def _write_cdi_specs(plugin: Plugin) -> None:
    """--cdi-spec-dir: the device plugin's specs, rewritten after every scan that changes them."""
    from .allocate import DEFAULT_CDI_VENDOR
    from .dra.cdi import ResourceSpecs

    assert plugin.opts.cdi_spec_dir
    specs = ResourceSpecs(
        plugin.opts.cdi_spec_dir,
        plugin.opts.cdi_prefix or DEFAULT_CDI_VENDOR,
        plugin.links.layout,
    )
    plugin.observers.append(
        lambda _snap, devices, resources: specs.sync(
            (resources[name], devs) for name, devs in devices.items()
        )
    )


def _dra_driver(
    plugin: Plugin,
    node: str,
    kubelet_dir: str,
    cdi_dir: str,
    kubeconfig: str | None,
    timeout: float,
) -> DraDriver:
    from edgefd.kube.client import connect

    from .dra.driver import DraDriver, DraOptions
    from .dra.kubeapi import USER_AGENT, DraApi

    api = connect(kubeconfig, timeout, user_agent=USER_AGENT, client_class=DraApi)
    opts = DraOptions(node=node, kubelet_dir=kubelet_dir, cdi_dir=os.path.abspath(cdi_dir))
    return DraDriver(opts, plugin, api)
