"""The v1beta1 front-end: every resource of the configuration served to the kubelet, each with
its own socket, server and registration (resource.py), fed by the inventory's snapshots.

A resource is served only while it has a device (present, or absent and still remembered): a
node without a Hailo does not advertise `edgefd.io/hailo: 0`, and a resource whose last device
is forgotten stops serving, so the kubelet drops it from the Node's capacity (after its own
grace period) instead of keeping a zero there for ever. It is served again when a device comes.

Threads: the inventory calls `on_snapshot` on its own (the hot-plug watcher's) thread; one
registration thread per resource; each resource's gRPC server (server.py, ..kubeletsocket);
and the process's one watch of the kubelet's socket directories (..kubeletsocket.SocketDirs),
because a kubelet restart recreates kubelet.sock and deletes our sockets, acted on at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from edgefd.devplugin.confdiff import resource_changes
from edgefd.devplugin.resources import Config, Resource
from edgefd.inventory.inventory import Inventory
from edgefd.inventory.snapshot import Snapshot
from edgefd.runtime.files import FileIdentity, file_identity
from edgefd.runtime.metrics import Metrics, replace_series

from ..kubeletsocket import SocketDirs
from ..links import LinkLayout
from .advertised import NOT_SERVED, Advertised
from .metrics import DevicePluginMetrics
from .registration import KUBELET_SOCKET
from .resource import ResourcePlugin
from .server import ResourceState, stop_all

log = logging.getLogger(__name__)

JOIN_TIMEOUT = 2.0  # for every registration thread together, at stop


class DevicePluginFrontend:
    """A component of the runner: started after the inventory it subscribes to (every
    resource's list is filled by then), stopped before it."""

    def __init__(
        self,
        config: Config,
        plugin_dir: str,
        links: LinkLayout,
        cdi_prefix: str | None,
        metrics: Metrics,
        inventory: Inventory,
        dirs: SocketDirs,
        cdi_written: Callable[[str], bool] | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.links = links
        self.cdi_prefix = cdi_prefix
        self.cdi_written = cdi_written
        self.metrics = DevicePluginMetrics(metrics)
        self.resources: dict[str, ResourcePlugin] = {}
        self._lock = threading.Lock()  # resources vs. snapshots arriving meanwhile
        self._snapshot: Snapshot | None = None
        self._pending: list[ResourcePlugin] = []
        self._kubelet: FileIdentity | None = None
        self._serving = False  # start() was called: resources with devices are served
        for res in config.resources:
            self._pending.append(self._add(res))
        dirs.watch(plugin_dir, self._on_dir_change)
        self._unsubscribe = inventory.subscribe(self.on_snapshot, name="v1beta1 device plugin")

    def _add(self, res: Resource) -> ResourcePlugin:
        metrics = self.metrics

        def on_allocate(n: int) -> None:
            if n < 0:
                metrics.allocate_errors.labels(resource=res.name).inc()
            else:
                metrics.allocations.labels(resource=res.name).inc()

        state = ResourceState(res, self.links, self.cdi_prefix, self.cdi_written, on_allocate)
        rp = ResourcePlugin(state, self.plugin_dir, metrics)
        self.resources[res.name] = rp
        if self._snapshot is not None:
            self._publish(rp, self._snapshot)
        return rp

    @staticmethod
    def _has_devices(rp: ResourcePlugin) -> bool:
        return rp.state.advertised.served

    # -- the inventory's side

    def on_snapshot(self, snap: Snapshot) -> None:
        """Each resource's devices to its streams (they wake only if the list changed); a
        resource that got its first device starts serving, one that lost its last stops, and
        one added by a reload is served from the first snapshot under the new configuration
        (the inventory rescans right after the front-ends are reconfigured)."""
        to_start, to_stop = [], []
        with self._lock:
            self._snapshot = snap
            series = []
            for name, rp in list(self.resources.items()):
                healthy, unhealthy = self._publish(rp, snap)
                series.append(({"resource": name, "health": "Healthy"}, healthy))
                series.append(({"resource": name, "health": "Unhealthy"}, unhealthy))
            pending = self._take_pending() if self._serving else []
            to_start += [rp for rp in pending if self._has_devices(rp)]
            for rp in list(self.resources.values()):
                if not self._serving or rp in pending:
                    continue
                if rp.started and not self._has_devices(rp):
                    to_stop.append(rp)
                    self._add(rp.resource)  # a fresh, dormant plugin for when one comes
                elif not rp.started and self._has_devices(rp):
                    to_start.append(rp)
            replace_series(self.metrics.devices, series)
        self._say_idle(pending)
        for rp in to_stop:
            log.info(
                "%s: no device left: no longer served (the kubelet drops it)", rp.resource.name
            )
            rp.stop()
        for rp in to_start:
            log.info("%s: a device: serving and registering", rp.resource.name)
            rp.start()

    def _publish(self, rp: ResourcePlugin, snap: Snapshot) -> tuple[int, int]:
        res = rp.resource
        adv = Advertised.of(snap, res)
        healthy, unhealthy = adv.counts()
        if rp.state.publish(adv):
            log.info(
                "%s: %d healthy, %d unhealthy",
                res.name,
                healthy,
                unhealthy,
                extra={"resource": res.name, "healthy": healthy, "unhealthy": unhealthy},
            )
        return healthy, unhealthy

    # -- the kubelet's side

    def start(self) -> None:
        """Serve and register every resource (their lists are filled: the inventory started)."""
        os.makedirs(self.plugin_dir, exist_ok=True)
        self._kubelet = file_identity(os.path.join(self.plugin_dir, KUBELET_SOCKET))
        with self._lock:
            self._serving = True
            pending = self._take_pending()
        self._say_idle(pending)
        for rp in pending:
            if self._has_devices(rp):
                rp.start()
        log.info("serving %d resource(s) in %s", len(self.resources), self.plugin_dir)

    def _take_pending(self) -> list[ResourcePlugin]:
        """Under the lock: the resources not served yet (start, a reload), now to be."""
        pending, self._pending = self._pending, []
        return pending

    @classmethod
    def _say_idle(cls, pending: list[ResourcePlugin]) -> None:
        for rp in pending:
            if not cls._has_devices(rp):
                log.info("%s: %s", rp.resource.name, NOT_SERVED)

    def _on_dir_change(self, names: frozenset[str]) -> None:
        """Plugin-dir entries changed (empty: anything may have); each resource decides."""
        if not names or KUBELET_SOCKET in names:
            ident = file_identity(os.path.join(self.plugin_dir, KUBELET_SOCKET))
            if ident is not None and ident != self._kubelet:
                if self._kubelet is not None:
                    self.metrics.kubelet_restarts.inc()
                self._kubelet = ident
        with self._lock:
            plugins = list(self.resources.values())
        for name in sorted(names) or [""]:
            for rp in plugins:
                rp.notice(name)

    def reconfigure(self, config: Config) -> None:
        """Stop the resources removed or changed; add the new ones, served from the next
        snapshot (the inventory's, with the new selectors)."""
        wanted = config.by_name()
        with self._lock:
            for name, rp in list(self.resources.items()):
                new = wanted.get(name)
                if new is None or new.served != rp.resource.served:
                    what = (
                        "removed: no longer served"
                        if new is None
                        else ", ".join(resource_changes(rp.resource, new)) + ": restarting"
                    )
                    log.info("%s: %s", name, what)
                    rp.stop()
                    del self.resources[name]
            for name, res in wanted.items():
                if name not in self.resources:
                    self._pending.append(self._add(res))

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            plugins = dict(self.resources)
        served = {n: rp for n, rp in plugins.items() if rp.started}
        waiting = [n for n, rp in served.items() if not rp.registered.is_set()]
        if waiting:
            details = "; ".join(f"{n}: {plugins[n].last_error or 'registering'}" for n in waiting)
            return False, f"not registered: {details}"
        idle = len(plugins) - len(served)
        return True, f"{len(served)} resource(s) registered, {idle} without a device"

    def stop(self) -> None:
        self._unsubscribe()
        with self._lock:
            plugins = list(self.resources.values())
        for rp in plugins:
            rp.request_stop()
        # one deadline for all, then every server stopped at once: one resource after the
        # other, a SIGTERM among hundreds of starting resources outlasted the kubelet's grace
        deadline = time.monotonic() + JOIN_TIMEOUT
        for rp in plugins:
            rp.join(max(0.0, deadline - time.monotonic()))
        stop_all([s for rp in plugins if (s := rp.take_server()) is not None])
