"""The devplugin process put together: one inventory, and beside it, as its subscribers, the
device links, the device plugin's CDI specs and the front-ends (`--api device-plugin`: the
v1beta1 one; `dra`: the DRA one; `both`: both, on the one inventory), as one component of the
runner (edgefd.runtime.runner), which owns the signals, the probes server and reloads.

Subscription order is the order things must happen in after a scan: the links first (an
Allocate answered after the device list changed names a link that is already current), then
the CDI specs, then the front-ends. The inventory starts first (every subscriber gets the
first snapshot before anything is served) and stops last; on a reload the front-ends take the
new configuration first and the inventory then rescans with its selectors, so the front-ends'
next snapshot is the new configuration's.
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
from edgefd.inventory.resources import Config
from edgefd.inventory.snapshot import Snapshot
from edgefd.runtime.metrics import Metrics

from .links import LinkKeeper, LinkLayout

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


# the DRA front-end is built by the CLI (it needs the API client): config, links, registry
DraFactory = Callable[[Config, LinkLayout, Metrics], Any]


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
    out["poll"] = format_duration(o.settings.poll_interval)
    out["rescan"] = format_duration(o.settings.rescan_interval)
    out["listen"] = "off" if o.listen is None else f"{o.listen[0] or '0.0.0.0'}:{o.listen[1]}"
    return out


class App:
    def __init__(
        self,
        opts: Options,
        config: Config,
        dra: DraFactory | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.opts = opts
        self.config = config
        self.metrics = metrics if metrics is not None else Metrics()
        self.inventory = make_inventory(opts, config, self.metrics)
        self.links = LinkKeeper(opts.layout)
        self.inventory.subscribe(self._tell_devices, name="device log")
        self.inventory.subscribe(self._keep_links, name="device links")
        self.cdi_specs: Any = None
        if opts.cdi_spec_dir and opts.device_plugin:
            from .cdi import DEFAULT_VENDOR, ResourceSpecs

            specs = ResourceSpecs(opts.cdi_spec_dir, opts.cdi_prefix or DEFAULT_VENDOR, opts.layout)
            self.cdi_specs = specs
            self.inventory.subscribe(
                lambda snap: specs.sync(self._by_resource(snap)), name="CDI specs"
            )
        self.frontends: list[Any] = []
        self.v1: Any = None
        if opts.device_plugin:
            from .v1beta1.frontend import DevicePluginFrontend

            written = self.cdi_specs.written if self.cdi_specs is not None else None
            self.v1 = DevicePluginFrontend(
                config, opts.plugin_dir, opts.layout, opts.cdi_prefix, self.metrics, written
            )
            self.frontends.append(self.v1)
        self.dra = dra(config, opts.layout, self.metrics) if dra is not None else None
        if self.dra is not None:
            self.frontends.append(self.dra)
        for fe in self.frontends:
            fe.attach(self.inventory)

    def _by_resource(self, snap: Snapshot) -> list[tuple[Any, Any]]:
        return [(res, snap.of_resource(res.name)) for res in self.config.resources]

    def _tell_devices(self, snap: Snapshot) -> None:
        """Each device change at info, with the resources it belongs to: the log answers
        "why did edgefd.io/ncs2 go to 0 at 12:40?" in both APIs."""
        for c in snap.diff.changes:
            dev = c.after or c.before
            assert dev is not None
            mine = [r.name for r in self.config.resources if r.name in dev.resources]
            if not mine:
                continue  # a device no resource selects is served by neither API
            what = ", ".join(mine)
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

    def start(self) -> App:
        """Watch and scan (every subscriber gets the first snapshot), then serve."""
        self.inventory.start()
        for fe in self.frontends:
            fe.start()
        return self

    def alive(self) -> tuple[bool, str]:
        return self.inventory.alive()

    def ready(self) -> tuple[bool, str]:
        empty = self.config.serves_nothing()  # valid, but a plugin serving nothing is not ready
        if empty:
            return False, empty
        details = []
        for fe in self.frontends:
            ok, detail = fe.ready()
            if not ok:
                return False, detail
            details.append(detail)
        return True, "; ".join(details)

    def reconfigure(self, new: Config) -> None:
        """A new configuration: resources started, stopped or restarted as they changed
        (unchanged ones stay registered), then a scan with the new selectors."""
        self.config = new
        for fe in self.frontends:
            fe.reconfigure(new)
        self.inventory.configure(
            selectors=new.selectors, forget_after=new.memory, temperature=new.temperature
        )
        self.inventory.refresh()  # the runner says what changed (inventory.confdiff)

    def stop(self) -> None:
        for fe in reversed(self.frontends):
            fe.stop()
        self.inventory.stop()
