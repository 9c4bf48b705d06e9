"""`devplugin`: the kubelet device plugin command. Thin: options in, its components out to the
runner (app.py: one inventory, the bookkeeping, the front-ends `--api` asks for, the socket
watch). grpc, the metrics client and the Kubernetes client are imported only once a command
actually runs."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from edgefd.cli import (
    Duration,
    Listen,
    api_options,
    command,
    dry_run_option,
    guarded,
    host_node_name,
    host_root_option,
    listen_option,
    notice_dir_option,
    output_option,
    verbose_option,
    watch_options,
)
from edgefd.core.errors import UsageError
from edgefd.inventory.naming import DOMAIN

if TYPE_CHECKING:
    from edgefd.devplugin.resources import Config

    from .app import DraFactory, Options

TOOL = "devplugin"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_KUBELET_DIR = "/var/lib/kubelet"
DEFAULT_CDI_DIR = "/var/run/cdi"
LINKS_SUBDIR = "edgefd-links"
API_MODES = ("device-plugin", "dra", "both")
log = logging.getLogger(TOOL)


@command(TOOL)
@click.option(
    "--config",
    "config_path",
    type=click.Path(),  # a directory is bad input (3), as a missing file: the reader says so
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
    f"Allocate with their CDI names (prefix: --cdi-prefix, default {DOMAIN}).",
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
    help=f"DRA: the kubelet's directory (plugins_registry/, plugins/{DOMAIN}/).",
)
@click.option(
    "--cdi-dir",
    default=DEFAULT_CDI_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="DRA: where each prepared claim's CDI spec is written.",
)
@click.option(
    "--evict-after",
    type=Duration(minimum=0.0, maximum=7 * 24 * 3600.0),
    default=None,
    help="DRA: a device absent this long beyond the re-enumeration hold gets a NoExecute "
    "taint in the ResourceSlice, which evicts the pods using it (default: never).",
)
@click.option(
    "--decisions",
    "decisions",
    default=None,
    type=click.Path(dir_okay=False),
    help="Write what is decided for each device served (its kubelet IDs, its DRA device, the "
    "container path and number of each node) to this file, atomically, after every change: "
    "what device-keeper follows (default: not written).",
)
@api_options("DRA: ")
@listen_option(":8082")
@notice_dir_option()
@watch_options
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
    evict_after: float | None,
    decisions: str | None,
    node_name: str | None,
    kubeconfig: str | None,
    api_timeout: float,
    listen: Listen,
    notice_dir: str | None,
    rescan_interval: float,
    poll_interval: float,
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
        if not dry_run:
            raise UsageError(f"--api {api_mode} needs --node-name (or $NODE_NAME): the pool's node")
        node_name = host_node_name()
        log.warning("no --node-name; the dry-run uses this host's name %r", node_name)
    if evict_after is not None and not dra:
        raise UsageError(
            "--evict-after needs --api dra or both: the device-plugin API cannot evict "
            "(see docs/devices.md, 'When a device goes away')"
        )
    if dra and dry_run and api_mode == "both" and output == "json":
        raise UsageError("--dry-run -o json shows one API: pass --api device-plugin or dra")
    from edgefd.core.hostroot import HostRoot
    from edgefd.core.service import WatchSettings
    from edgefd.devplugin.resources import load_config

    from .app import Options

    config = load_config(config_path)
    opts = Options(
        plugin_dir=plugin_dir,
        host=HostRoot.of(host_root),
        links_dir=links_dir or None,
        cdi_prefix=cdi_prefix,
        cdi_spec_dir=os.path.abspath(cdi_spec_dir) if cdi_spec_dir else None,
        api=api_mode,
        listen=listen,
        settings=WatchSettings(poll_interval=poll_interval, rescan_interval=rescan_interval),
        decisions=os.path.abspath(decisions) if decisions else None,
        node_name=node_name,
    )
    if dry_run:
        return _dry_run(config, opts, output, node_name, evict_after)

    from edgefd.core.notices import board_for
    from edgefd.core.version import startup_line
    from edgefd.devplugin.confdiff import config_changes
    from edgefd.runtime.metrics import Metrics
    from edgefd.runtime.runner import Reload, run

    from .app import build as build_parts
    from .app import shown

    sockets_under = kubelet_dir if dra else None
    check_sockets(opts, config, sockets_under)
    metrics = Metrics()

    def build(_lifeline: object) -> list[object]:
        dra_factory = None
        if dra:
            assert node_name
            dra_factory = _dra_frontend(
                DraSettings(node_name, kubelet_dir, cdi_dir, evict_after), kubeconfig, api_timeout
            )
        return build_parts(opts, config, dra_factory, metrics).components

    return run(
        build,
        startup_line=startup_line(opts.api, shown(opts, config)),
        listen=listen,
        metrics=metrics,
        reload=Reload(
            lambda: check_sockets(opts, load_config(config_path), sockets_under),
            config_path,
            current=config,
            changes=config_changes,
            notices=board_for(notice_dir, TOOL),
        ),
    )


def _dry_run(
    config: Config, opts: Options, output: str, node: str | None, evict_after: float | None
) -> int:
    """What the live tool would serve, from the decisions it takes (v1beta1: a resource is
    served only with a device; DRA: the slices of its first publish)."""
    code = 0
    if opts.device_plugin:
        from .v1beta1.dryrun import show

        code = show(config, opts, output)
    if opts.api != "device-plugin":
        from .app import make_inventory
        from .dra.dryrun import show as show_slices

        assert node
        inventory = make_inventory(opts.scratch(), config)
        code = code or show_slices(config, inventory, node, evict_after)
    return code


def _dra_dir(kubelet_dir: str) -> str:
    from .dra.kubeletplugin import KubeletPlugin

    return KubeletPlugin.plugin_dir_of(kubelet_dir)


class DraSettings(NamedTuple):
    node: str
    kubelet_dir: str
    cdi_dir: str
    evict_after: float | None


def _dra_frontend(s: DraSettings, kubeconfig: str | None, timeout: float) -> DraFactory:
    from edgefd.kube.client import connect

    from .dra.frontend import DraFrontend, DraOptions
    from .dra.kubeapi import USER_AGENT, DraApi

    api = connect(kubeconfig, timeout, user_agent=USER_AGENT, client_class=DraApi)
    opts = DraOptions(
        node=s.node,
        kubelet_dir=s.kubelet_dir,
        cdi_dir=os.path.abspath(s.cdi_dir),
        evict_after=s.evict_after,
    )
    claims = api.claim_reader()  # never queued behind the publisher's requests (kubeapi.py)

    def make(config: Any, links: Any, metrics: Any, inventory: Any, dirs: Any) -> DraFrontend:
        return DraFrontend(opts, config, links, api, metrics, inventory, dirs, claims)

    return make


def socket_paths(opts: Options, config: Config, kubelet_dir: str | None) -> list[str]:
    """Every unix socket this process binds: each device-plugin resource's, and with
    `kubelet_dir` (DRA) the registration and service sockets."""
    out = []
    if opts.device_plugin:
        from .v1beta1.resource import socket_name

        out += [os.path.join(opts.plugin_dir, socket_name(r.name)) for r in config.resources]
    if kubelet_dir is not None:
        from .dra.kubeletplugin import (
            REGISTRY_SUBDIR,
            SERVICE_SOCKET,
            KubeletPlugin,
            registration_socket_name,
        )

        out.append(os.path.join(kubelet_dir, REGISTRY_SUBDIR, registration_socket_name()))
        out.append(os.path.join(KubeletPlugin.plugin_dir_of(kubelet_dir), SERVICE_SOCKET))
    return out


def check_sockets(opts: Options, config: Config, kubelet_dir: str | None) -> Config:
    """`config`, once every socket it makes this process bind fits the kernel's limit
    (kubeletsocket.check_socket_path): at start and at each reload, before anything is
    published or served."""
    from .kubeletsocket import check_socket_path

    for path in socket_paths(opts, config, kubelet_dir):
        check_socket_path(path)
    return config
