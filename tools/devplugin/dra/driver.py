"""The DRA mode put together: the device plugin's scanning (plugin.py, with or without its own
resources) feeds a device table after every scan; the table feeds the ResourceSlice publisher
and the kubelet plugin's preparer. One code path decides which devices exist and what they
are; this module only wires its consumers.

Threads: the publisher's writer and watcher (publisher.py), the kubelet plugin's gRPC workers
(kubeletplugin.py), and one Watcher of the two socket directories, so a socket that vanishes
(a wiped directory) is served afresh at once.

Clean shutdown deletes this node's slices only when no claim is prepared here: with prepared
claims (a rolling update of the DaemonSet, a restart), the slices stay so that the scheduler
keeps seeing the allocated devices and the pods using them, and the next plugin takes over
without a gap. (If no plugin comes back, the kubelet deletes them itself once the plugin has
been unregistered for a while.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from edgefd.bus.catalogue import load_catalogue
from edgefd.runtime.watch import Watcher

from ..config import Resource
from ..devices import Device
from ..discovery import Snapshot
from ..plugin import Plugin
from .checkpoint import Checkpoint
from .claims import Preparer
from .kubeletplugin import KubeletPlugin
from .metrics import DraMetrics
from .publisher import WATCH_SECONDS, Publisher
from .table import DeviceTable

log = logging.getLogger(__name__)


@dataclass
class DraOptions:
    node: str
    kubelet_dir: str = "/var/lib/kubelet"
    cdi_dir: str = "/var/run/cdi"
    watch_seconds: int = WATCH_SECONDS


class DraDriver:
    def __init__(
        self,
        opts: DraOptions,
        plugin: Plugin,
        api: Any,  # kubeapi.DraApi: a SliceApi and a ClaimSource
    ) -> None:
        self.opts = opts
        self.plugin = plugin
        self.metrics = DraMetrics(plugin.metrics)
        self.table = DeviceTable(plugin.opts.host, load_catalogue())
        self.kubelet: KubeletPlugin | None = None
        self.checkpoint = Checkpoint(KubeletPlugin.plugin_dir_of(opts.kubelet_dir), opts.node)
        self.checkpoint.load()
        self.preparer = Preparer(opts.node, opts.cdi_dir, plugin.links.layout, self.checkpoint, api)
        self.publisher = Publisher(api, opts.node, self.metrics, opts.watch_seconds)
        self.kubelet = KubeletPlugin(
            opts.kubelet_dir, self.preparer, self._on_call, self._on_registration
        )
        self._socket_watch: Watcher | None = None
        plugin.observers.append(self.observe)
        plugin.ready_checks.append(self.ready)

    def observe(
        self,
        snap: Snapshot,
        devices: dict[str, tuple[Device, ...]],
        resources: dict[str, Resource],
    ) -> None:
        table = self.table.build(snap, devices, resources)
        self.preparer.update(table)
        self.publisher.set_devices([e.api() for e in table.values()])

    def _on_call(self, op: str, ok: bool) -> None:
        self.metrics.calls.labels(op=op, result="ok" if ok else "error").inc()
        self.metrics.prepared.set(self.preparer.prepared)

    def _on_registration(self, ok: bool, _error: str) -> None:
        self.metrics.registrations.labels(result="ok" if ok else "error").inc()

    def start(self) -> DraDriver:
        assert self.kubelet is not None
        self.preparer.sweep()
        self.metrics.prepared.set(self.preparer.prepared)
        self.publisher.start()
        self.kubelet.start()
        self._socket_watch = Watcher(
            lambda _names: self.kubelet.check() if self.kubelet else None,
            [self.kubelet.registry_dir, self.kubelet.plugin_dir],
            poll_interval=0.1,
            debounce=0.0,
            max_delay=0.0,
            name="dra-socket-watch",
        ).start()
        return self

    def ready(self) -> tuple[bool, str]:
        assert self.kubelet is not None
        if not self.kubelet.registered.is_set():
            why = self.kubelet.last_error or "waiting for the kubelet (plugins_registry)"
            return False, f"DRA plugin not registered: {why}"
        if not self.publisher.in_sync.is_set():
            why = self.publisher.last_error or "publishing"
            return False, f"ResourceSlice not published: {why}"
        return True, f"DRA plugin registered, pool generation {self.publisher.generation}"

    def stop(self) -> None:
        if self._socket_watch is not None:
            self._socket_watch.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
        prepared = self.preparer.prepared
        if prepared:
            log.info("%d claim(s) still prepared: leaving the ResourceSlices in place", prepared)
        self.publisher.stop(delete=prepared == 0)
