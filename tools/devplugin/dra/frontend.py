"""The DRA front-end: the inventory's devices through Dynamic Resource Allocation. A peer of the
v1beta1 front-end, subscribing to the same inventory (`--api both` runs both on one); each
snapshot becomes a device table (table.py) that feeds the ResourceSlice publisher and the
kubelet plugin's preparer and health board, and the prepared claims' status.

What each part does, and where: the device table of a snapshot (table.py); the slices and
their writer (publisher.py, over the one list-watch of heldslices.py); the taints and the
eviction deadlines (eviction.py); preparing claims (claims.py), with their device metadata
files in the driver's directory (metadata.py), for the kubelet plugin, which keeps its
sockets served (kubeletplugin.py); the devices' health (health.py); the prepared claims'
status (claimstatus.py); the metrics (metrics.py). This module only wires them.

Threads: the inventory calls `on_snapshot` on its own thread; the publisher's writer and
the list-watch (publisher.py); the kubelet plugin's gRPC workers and its socket watch
(kubeletplugin.py); the claim-status writer (claimstatus.py).

Clean shutdown deletes this node's slices only when no claim is prepared here: with prepared
claims (a rolling update of the DaemonSet, a restart), the slices stay so that the scheduler
keeps seeing the allocated devices and the pods using them, and the next plugin takes over
without a gap. (If no plugin comes back, the kubelet deletes them itself once the plugin has
been unregistered for a while.)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from edgefd.devplugin.resources import Config
from edgefd.inventory.inventory import Inventory
from edgefd.inventory.snapshot import Snapshot
from edgefd.runtime.metrics import Metrics

from ..kubeletsocket import SocketDirs
from ..links import LinkLayout
from . import metadata, table
from .checkpoint import Checkpoint
from .claims import ClaimSource, Preparer
from .claimstatus import ClaimStatusWriter
from .eviction import Eviction, Tainting
from .health import HealthBoard
from .kubeletplugin import KubeletPlugin
from .metadata import MetadataFiles
from .metrics import DraMetrics
from .publisher import WATCH_SECONDS, SlicePublisher

log = logging.getLogger(__name__)


@dataclass
class DraOptions:
    node: str
    kubelet_dir: str = "/var/lib/kubelet"
    cdi_dir: str = "/var/run/cdi"
    watch_seconds: int = WATCH_SECONDS
    evict_after: float | None = None  # --evict-after: None, never


class DraFrontend:
    """A component of the runner: started after the inventory it subscribes to, stopped
    before it. The eviction deadlines count the inventory's hold, and their scans are the
    inventory's (wake_at)."""

    def __init__(
        self,
        opts: DraOptions,
        config: Config,
        links: LinkLayout,
        api: Any,  # kubeapi.DraApi: a SliceApi and a ClaimSource
        metrics: Metrics,
        inventory: Inventory,
        dirs: SocketDirs,
        claims: ClaimSource | None = None,  # what reads claims (else `api`): claim_reader
    ) -> None:
        self.opts = opts
        self.config = config
        self.metrics = DraMetrics(metrics)
        plugin_dir = KubeletPlugin.plugin_dir_of(opts.kubelet_dir)
        self.checkpoint = Checkpoint(plugin_dir, opts.node)
        self.checkpoint.load()
        reader = claims if claims is not None else api
        files = MetadataFiles(os.path.join(plugin_dir, metadata.HOST_SUBDIR))
        self.preparer = Preparer(opts.node, opts.cdi_dir, links, self.checkpoint, reader, files)
        self.publisher = SlicePublisher(api, opts.node, self.metrics, opts.watch_seconds)
        self.health = HealthBoard(opts.node)
        self.claim_status = ClaimStatusWriter(api, on_write=self.metrics.status_written)
        self.kubelet = KubeletPlugin(
            opts.kubelet_dir,
            self.preparer,
            dirs,
            self._on_call,
            self.metrics.registration,
            self.health,
        )
        policy = Eviction(opts.evict_after, inventory.hold)
        self.tainting = Tainting(policy, lambda at: inventory.wake_at("DRA eviction", at))
        self._entries: dict[str, table.Entry] = {}
        self._lock = threading.Lock()
        self._unsubscribe = inventory.subscribe(self.on_snapshot, name="DRA")

    def on_snapshot(self, snap: Snapshot) -> None:
        entries = table.build(snap, self.config)
        self.preparer.update(entries)
        self.health.update({name: e.device for name, e in entries.items()})
        with self._lock:
            self._entries = entries
        self.claim_status.set(self.preparer.prepared_claims(), entries)
        self.publisher.set_devices(self.tainting.devices(entries.values(), time.time()))

    def reconfigure(self, config: Config) -> None:
        """Which resources exist (the next snapshot is built with them)."""
        self.config = config

    def _on_call(self, op: str, ok: bool) -> None:
        """A claim prepared or unprepared: counted, and its status written."""
        self.metrics.call(op, ok, self.preparer.prepared)
        with self._lock:
            entries = dict(self._entries)
        self.claim_status.set(self.preparer.prepared_claims(), entries)

    def start(self) -> None:
        self.preparer.sweep()
        self.metrics.prepared.set(self.preparer.prepared)
        self.publisher.start()
        self.claim_status.start()
        self.kubelet.start()

    def ready(self) -> tuple[bool, str]:
        refused = self.publisher.watch_refused
        if refused:
            return False, f"ResourceSlices cannot be read: {refused}"
        if not self.kubelet.registered.is_set():
            why = self.kubelet.last_error or "waiting for the kubelet (plugins_registry)"
            return False, f"DRA plugin not registered: {why}"
        if not self.publisher.in_sync.is_set():
            why = self.publisher.last_error or "publishing"
            return False, f"ResourceSlice not published: {why}"
        return True, f"DRA plugin registered, pool generation {self.publisher.generation}"

    def stop(self) -> None:
        self._unsubscribe()
        self.tainting.wake_at(None)
        self.health.close()
        self.kubelet.stop()
        self.claim_status.stop()
        prepared = self.preparer.prepared
        if prepared:
            log.info("%d claim(s) still prepared: leaving the ResourceSlices in place", prepared)
        self.publisher.stop(delete=prepared == 0)
