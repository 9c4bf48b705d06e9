"""The running plugin: scanning, one server and registration per resource, kubelet restarts
and configuration reloads.

Threads, and why each exists:
- one registration thread per resource (resource.py);
- one asyncio loop thread that serves every resource's gRPC server (server.py);
- one watcher of the plugin directory (a kubelet restart recreates kubelet.sock and deletes
  our sockets) and one of the buses (hot-plug), both edgefd.runtime.watch.Watcher;
- the main thread, which only waits for signals (cli.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgefd.core.errors import HostUnreadable
from edgefd.core.hostroot import HostRoot
from edgefd.runtime.metrics import HealthServer, replace_series
from edgefd.runtime.watch import Watcher

from .allocate import LinkLayout
from .config import Config, Resource
from .devices import Advertised, Device, Inventory, match_devices
from .discovery import Snapshot, host_exists, scan_host
from .links import LinkKeeper
from .metrics import PluginMetrics
from .registration import KUBELET_SOCKET, file_identity
from .resource import ResourcePlugin
from .server import ResourceState
from .server import shutdown as shutdown_servers

log = logging.getLogger(__name__)

# called after every scan with what each resource advertises (the DRA driver, CDI specs)
Observer = Callable[[Snapshot, dict[str, tuple[Device, ...]], dict[str, Resource]], None]


@dataclass
class Options:
    plugin_dir: str
    host: HostRoot
    links_dir: str | None = None
    cdi_prefix: str | None = None
    cdi_spec_dir: str | None = None  # the device plugin hands devices over as CDI names
    device_plugin: bool = True  # False (`--api dra`): scan and keep links, serve no resource
    listen: tuple[str, int] | None = None  # (host, port); port 0 picks a free one
    rescan_interval: float = 10.0
    poll_interval: float = 0.2
    debounce: float = 0.1
    max_delay: float = 0.3
    use_uevents: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Plugin:
    """All resources of one configuration, kept in step with the host and the kubelet."""

    def __init__(
        self, opts: Options, config: Config, load_config: Callable[[], Config] | None = None
    ) -> None:
        self.opts = opts
        self.config = config
        self._load_config = load_config
        self.metrics = PluginMetrics()
        self.links = LinkKeeper(LinkLayout(opts.links_dir, opts.cdi_spec_dir))
        self.observers: list[Observer] = []
        self.ready_checks: list[Callable[[], tuple[bool, str]]] = []
        self.resources: dict[str, ResourcePlugin] = {}
        self.inventories: dict[str, Inventory] = {}
        self._scan_lock = threading.Lock()
        self._dir_watch: Watcher | None = None
        self._hotplug: Watcher | None = None
        self.last_scan_error = ""
        self._health: HealthServer | None = None
        self.last_scan = 0.0

    # ------------------------------------------------------------ scanning

    def _globs(self) -> tuple[str, ...]:
        return tuple(sorted({g for r in self.config.resources for g in r.dev_globs}))

    def rescan(self, _names: frozenset[str] = frozenset()) -> None:
        """Scan the host and publish each resource's devices (streams wake on change).

        A bus that cannot be read keeps every resource's last known devices: "could not look"
        must not turn into "everything was unplugged" (health goes on as it was)."""
        with self._scan_lock:
            self.metrics.scans.inc()
            try:
                snap = scan_host(self.opts.host, self._globs())
            except HostUnreadable as e:
                self.metrics.scan_failures.inc()
                if str(e) != self.last_scan_error:
                    log.error("%s; keeping the last known devices", e)
                self.last_scan_error = str(e)
                return
            if self.last_scan_error:
                log.warning("the host can be read again")
            self.last_scan_error = ""
            for w in snap.warnings:
                log.debug("scan: %s", w)
            exists = host_exists(self.opts.host)
            now = time.time()
            series = []
            seen: dict[str, tuple[Device, ...]] = {}
            for name, rp in list(self.resources.items()):
                res = rp.resource
                inv = self.inventories[name]
                found = match_devices(res, snap.usb, snap.pci, snap.dev_nodes, exists, now)
                devs = inv.update(found, now)
                seen[name] = devs
                self.links.sync(name, devs)
                adv = Advertised.build(devs, res.replicas)
                if rp.state.publish(adv):
                    healthy, unhealthy = adv.counts()
                    log.info("%s: %d healthy, %d unhealthy", name, healthy, unhealthy)
                healthy, unhealthy = adv.counts()
                series.append(({"resource": name, "health": "Healthy"}, healthy))
                series.append(({"resource": name, "health": "Unhealthy"}, unhealthy))
            replace_series(self.metrics.devices, series)
            resources = {n: rp.resource for n, rp in self.resources.items()}
            for observe in self.observers:
                try:
                    observe(snap, seen, resources)
                except Exception:  # one consumer's bug must not stop the scanning
                    log.exception("after the scan")
            self.last_scan = time.monotonic()

    # ------------------------------------------------------------ resources

    def _add(self, res: Resource) -> ResourcePlugin:
        state = ResourceState(res, self.links.layout, self.opts.cdi_prefix)
        inv = Inventory(self.config.forget_after, self.links.load_known(res.name))
        self.inventories[res.name] = inv
        rp = ResourcePlugin(state, self.opts.plugin_dir, self.metrics)
        self.resources[res.name] = rp
        return rp

    def _on_dir_change(self, names: frozenset[str]) -> None:
        """Plugin-dir entries changed (empty: anything may have); each resource decides."""
        if not names or KUBELET_SOCKET in names:
            ident = file_identity(os.path.join(self.opts.plugin_dir, KUBELET_SOCKET))
            if ident is not None and ident != self._kubelet_ident:
                if self._kubelet_ident is not None:
                    self.metrics.kubelet_restarts.inc()
                self._kubelet_ident = ident
        for name in sorted(names) or [""]:
            for rp in list(self.resources.values()):
                rp.notice(name)

    def start(self) -> Plugin:
        if self.opts.device_plugin:
            os.makedirs(self.opts.plugin_dir, exist_ok=True)
        self._kubelet_ident = file_identity(os.path.join(self.opts.plugin_dir, KUBELET_SOCKET))
        for res in self.config.resources:
            self._add(res)
        self.rescan()
        if self.opts.device_plugin:
            self._serve_resources()
        buses = ("usb", "pci")
        self._hotplug = Watcher(
            self.rescan,
            [self.opts.host.path(f"/sys/bus/{b}/devices") for b in buses],
            uevent_subsystems=buses,
            poll_interval=self.opts.poll_interval,
            debounce=self.opts.debounce,
            max_delay=self.opts.max_delay,
            rescan_interval=self.opts.rescan_interval,
            use_uevents=self.opts.use_uevents,
            name="hotplug",
        ).start()
        self.metrics.hotplug_mode.labels(mode=self._hotplug.mode).set(1)
        log.info("hot-plug: %s", self._hotplug.mode)
        if self.opts.listen:
            host, port = self.opts.listen
            self._health = HealthServer(
                self.metrics, host, port, healthz=self._healthz, readyz=self._readyz
            ).start()
        return self

    def _serve_resources(self) -> None:
        # a kubelet restart is acted on at once (no debounce): re-registration is what matters
        self._dir_watch = Watcher(
            self._on_dir_change,
            [self.opts.plugin_dir],
            poll_interval=0.1,
            debounce=0.0,
            max_delay=0.0,
            name="plugin-dir-watch",
        ).start()
        for rp in self.resources.values():
            rp.start()

    def _healthz(self) -> tuple[bool, str]:
        # alive while the hot-plug watcher keeps scanning (the backstop rescan guarantees it)
        age = time.monotonic() - self.last_scan
        limit = max(3 * self.opts.rescan_interval, 30.0)
        if age > limit:
            return False, f"no host scan for {age:.0f}s"
        return True, "ok"

    def _readyz(self) -> tuple[bool, str]:
        empty = self.config.serves_nothing()  # valid, but a plugin serving nothing is not ready
        if empty:
            return False, empty
        served = self.resources if self.opts.device_plugin else {}
        waiting = [n for n, rp in served.items() if not rp.registered.is_set()]
        if waiting:
            details = "; ".join(
                f"{n}: {self.resources[n].last_error or 'registering'}" for n in waiting
            )
            return False, f"not registered: {details}"
        details = [f"{len(served)} resource(s) registered"] if served else []
        for check in self.ready_checks:
            ok, detail = check()
            if not ok:
                return False, detail
            details.append(detail)
        return True, "; ".join(details)

    def reload(self) -> None:
        """Re-read the configuration; start, stop or restart the resources that changed."""
        if self._load_config is None:
            return
        try:
            new = self._load_config()
        except Exception as e:
            log.error("configuration reload failed, keeping the old one: %s", e)
            return
        old = self.config.by_name()
        wanted = new.by_name()
        started = []
        with self._scan_lock:  # a rescan on the hot-plug thread must not see half a change
            self.config = new
            for name, rp in list(self.resources.items()):
                if name not in wanted or wanted[name] != old.get(name):
                    log.info("%s: %s", name, "removed" if name not in wanted else "changed")
                    rp.stop()
                    del self.resources[name]
                    del self.inventories[name]
            for name, res in wanted.items():
                if name not in self.resources:
                    started.append(self._add(res))
            for inv in self.inventories.values():
                inv.forget_after = new.forget_after
        self.rescan()
        for rp in started if self.opts.device_plugin else ():
            rp.start()
        log.info("configuration reloaded: %d resource(s)", len(self.resources))

    def stop(self) -> None:
        if self._hotplug is not None:
            self._hotplug.stop()
        if self._dir_watch is not None:
            self._dir_watch.stop()
        for rp in self.resources.values():
            rp._stopping = True
        for rp in self.resources.values():
            rp.stop()
        if self._health is not None:
            self._health.stop()
        shutdown_servers()
