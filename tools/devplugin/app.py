"""The devplugin process put together: its components, flat, for the one runner
(edgefd.runtime.runner), which owns their start and stop order, the probes, the signals and
reloads. In order:

1. the inventory (one per process: the host's devices, both buses, the catalogue and the
   resources' selectors), started first so that every subscriber has the first snapshot
   before anything is served, stopped last, reconfigured last (its rescan then hands everyone
   the new configuration's snapshot);
2. the bookkeeping that follows each snapshot (`Bookkeeping`): the device log, the stable
   links, the device plugin's CDI specs and the decisions device-keeper follows, subscribed
   in the order things must happen in after a scan (an Allocate answered after the device list
   changed names a link that is already current);
3. the front-ends `--api` asks for (`device-plugin`: the v1beta1 one; `dra`: the DRA one;
   `both`), each subscribed to the same inventory;
4. the one watch of the kubelet's socket directories both front-ends listen to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgefd.bus import pci, platform, usb
from edgefd.bus.catalogue import load_catalogue
from edgefd.core.duration import format_duration
from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WATCH_DEFAULTS, Listen, WatchSettings
from edgefd.inventory.inventory import DEFAULT_HOLD, Inventory
from edgefd.inventory.snapshot import Snapshot
from edgefd.runtime.metrics import Metrics

from .kubeletsocket import SocketDirs
from .links import LinkKeeper, LinkLayout
from .resources import Config

log = logging.getLogger(__name__)


@dataclass
class Options:
    plugin_dir: str
    host: HostRoot
    links_dir: str | None = None
    cdi_prefix: str | None = None
    cdi_spec_dir: str | None = None  # the device plugin hands devices over as CDI names
    api: str = "device-plugin"  # "device-plugin" | "dra" | "both"
    listen: Listen = None
    settings: WatchSettings = WATCH_DEFAULTS
    use_uevents: bool | None = None
    decisions: str | None = None  # where device-keeper reads what was decided (decide.py)
    node_name: str | None = None  # DRA: the pool

    @property
    def device_plugin(self) -> bool:
        return self.api != "dra"

    @property
    def layout(self) -> LinkLayout:
        return LinkLayout(self.links_dir, self.cdi_spec_dir, self.host)

    def scratch(self) -> Options:
        """The same host, nothing on disk: for a dry run (no links, no state file)."""
        return Options(self.plugin_dir, self.host)


def make_inventory(opts: Options, config: Config, metrics: Metrics | None = None) -> Inventory:
    """The inventory of the device plugin's host: both buses, the catalogue, the resources'
    selectors and temperature settings (its health), the memory of absent devices (kept
    beside the links; an earlier release's files taken over first)."""
    import time

    from .known import take_over

    catalogue = load_catalogue()
    state_file = opts.layout.state_file
    state_path = Path(state_file) if state_file else None
    take_over(opts.links_dir, state_path, catalogue, time.time())
    return Inventory(
        opts.host,
        (usb.READER, pci.READER, platform.READER),
        catalogue=catalogue,
        selectors=config.selectors,
        hold=DEFAULT_HOLD,
        forget_after=config.memory,
        state_file=state_file,
        settings=opts.settings,
        metrics=metrics,
        use_uevents=opts.use_uevents,
        temperature=config.temperature,
    )


# the DRA front-end is built by the CLI (it needs the API client)
DraFactory = Callable[[Config, LinkLayout, Metrics, Inventory, SocketDirs], Any]


def shown(o: Options, config: Config) -> dict[str, object]:
    """The settings as the start-up line shows them (what decides behaviour)."""
    out: dict[str, object] = {
        "resources": ",".join(r.name for r in config.resources) or "none",
        "config": config.source,
        "forget_after": format_duration(config.forget_after),
        "host-root": o.host.root,
    }
    if o.device_plugin:
        out["plugin-dir"] = o.plugin_dir
    out["links-dir"] = o.links_dir or "off (raw device nodes)"
    if o.cdi_spec_dir:
        out["cdi-spec-dir"] = o.cdi_spec_dir
    if o.decisions:
        out["decisions"] = o.decisions
    out["poll"] = format_duration(o.settings.poll_interval)
    out["rescan"] = format_duration(o.settings.rescan_interval)
    out["listen"] = "off" if o.listen is None else f"{o.listen[0] or '0.0.0.0'}:{o.listen[1]}"
    return out


class Bookkeeping:
    """What follows each snapshot besides the front-ends: the device log, the stable links,
    the device plugin's CDI specs and the decisions file, subscribed in that order. A
    component of the runner with nothing to run: it says whether the configuration serves
    anything at all (/readyz) and takes a new one."""

    def __init__(self, opts: Options, config: Config, inventory: Inventory) -> None:
        self.config = config
        self.links = LinkKeeper(opts.layout)
        inventory.subscribe(self._tell_devices, name="device log")
        inventory.subscribe(self._keep_links, name="device links")
        self.cdi_specs: Any = None
        if opts.cdi_spec_dir and opts.device_plugin:
            from .cdi import DEFAULT_VENDOR, ResourceSpecs

            specs = ResourceSpecs(opts.cdi_spec_dir, opts.cdi_prefix or DEFAULT_VENDOR, opts.layout)
            self.cdi_specs = specs
            inventory.subscribe(lambda snap: specs.sync(self._by_resource(snap)), name="CDI specs")
        self.decisions: Any = None
        if opts.decisions:
            from .decide import DecisionsFile

            pool = opts.node_name if opts.api != "device-plugin" else None
            self.decisions = DecisionsFile(opts.decisions, config, opts.device_plugin, pool)
            inventory.subscribe(self.decisions.on_snapshot, name="decisions")

    @property
    def cdi_written(self) -> Callable[[str], bool] | None:
        return self.cdi_specs.written if self.cdi_specs is not None else None

    def _by_resource(self, snap: Snapshot) -> list[tuple[Any, Any]]:
        return [(res, snap.of_resource(res.name)) for res in self.config.resources]

    def _tell_devices(self, snap: Snapshot) -> None:
        """Each device change at info, with the resources it belongs to: the log answers
        "why did edgefd.io/ncs2 go to 0 at 12:40?" in both APIs."""
        for c in snap.diff.changes:
            dev = c.after or c.before
            assert dev is not None
            mine = [r.name for r in self.config.selecting(dev)]
            if not mine:
                continue  # a device no resource selects is served by neither API
            what = ", ".join(mine)
            if len(mine) > 1 and c.kind == "added":
                log.warning(
                    "device %s is selected by %s: the device plugin advertises it under each, so "
                    "pods asking for different resources may be given it at once (DRA hands it "
                    "out as %s only); narrow the selectors so one resource selects it",
                    c.name,
                    " and ".join(mine),
                    mine[0],
                    extra={"device": c.name, "resources": mine},
                )
            verb = {"added": "added: ", "removed": ""}.get(c.kind, "")
            log.info(
                "device %s (%s): %s%s",
                c.name,
                what,
                verb,
                c.describe().split(": ", 1)[1],
                extra={**c.log_fields(), "resources": mine},
            )

    def _keep_links(self, snap: Snapshot) -> None:
        for res, devices in self._by_resource(snap):
            self.links.sync(res.name, devices)

    def start(self) -> None:
        """Nothing to run: it follows the inventory's snapshots."""

    def stop(self) -> None:
        """Nothing to stop."""

    def ready(self) -> tuple[bool, str]:
        empty = self.config.serves_nothing()  # valid, but a plugin serving nothing is not ready
        return (False, empty) if empty else (True, "ok")

    def reconfigure(self, config: Config) -> None:
        """The next snapshot (the inventory's rescan) is kept with the new resources."""
        self.config = config
        if self.decisions is not None:
            self.decisions.reconfigure(config)


@dataclass
class Parts:
    """devplugin's components, by name for those who need one (tests, the dry run)."""

    inventory: Inventory
    books: Bookkeeping
    dirs: SocketDirs
    v1: Any = None
    dra: Any = None

    @property
    def components(self) -> list[Any]:
        """In the runner's order (the module's docstring says why)."""
        frontends = [f for f in (self.v1, self.dra) if f is not None]
        return [self.inventory, self.books, *frontends, self.dirs]


def build(
    opts: Options,
    config: Config,
    dra: DraFactory | None = None,
    metrics: Metrics | None = None,
) -> Parts:
    metrics = metrics if metrics is not None else Metrics()
    inventory = make_inventory(opts, config, metrics)
    books = Bookkeeping(opts, config, inventory)
    dirs = SocketDirs()
    parts = Parts(inventory, books, dirs)
    if opts.device_plugin:
        from .v1beta1.frontend import DevicePluginFrontend

        parts.v1 = DevicePluginFrontend(
            config,
            opts.plugin_dir,
            opts.layout,
            opts.cdi_prefix,
            metrics,
            inventory,
            dirs,
            books.cdi_written,
        )
    if dra is not None:
        parts.dra = dra(config, opts.layout, metrics, inventory, dirs)
    return parts
