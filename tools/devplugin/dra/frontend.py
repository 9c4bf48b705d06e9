"""The DRA front-end: the inventory's devices through Dynamic Resource Allocation. A peer of the
v1beta1 front-end, subscribing to the same inventory (`--api both` runs both on one); each
snapshot becomes a device table (table.py) that feeds the ResourceSlice publisher and the
kubelet plugin's preparer and health board, and the prepared claims' status.

Threads: the inventory calls `on_snapshot` on its own thread; the publisher's writer and
watcher (publisher.py); the kubelet plugin's gRPC workers (kubeletplugin.py); one Watcher of
the two socket directories, so a socket that vanishes (a wiped directory) is served afresh at
once.

Clean shutdown deletes this node's slices only when no claim is prepared here: with prepared
claims (a rolling update of the DaemonSet, a restart), the slices stay so that the scheduler
keeps seeing the allocated devices and the pods using them, and the next plugin takes over
without a gap. (If no plugin comes back, the kubelet deletes them itself once the plugin has
been unregistered for a while.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgefd.inventory.inventory import Inventory
from edgefd.inventory.snapshot import Snapshot
from edgefd.runtime.metrics import Metrics
from edgefd.runtime.watch import Watcher

from ..config import Config
from ..links import LinkLayout
from . import table
from .checkpoint import Checkpoint
from .claims import Preparer
from .claimstatus import ClaimStatusWriter
from .eviction import Eviction, missing_since
from .health import HealthBoard
from .kubeletplugin import KubeletPlugin
from .metrics import DraMetrics
from .publisher import WATCH_SECONDS, Publisher

log = logging.getLogger(__name__)


@dataclass
class DraOptions:
    node: str
    kubelet_dir: str = "/var/lib/kubelet"
    cdi_dir: str = "/var/run/cdi"
    watch_seconds: int = WATCH_SECONDS
    evict_after: float | None = None  # --evict-after: None, never


class DraFrontend:
    def __init__(
        self,
        opts: DraOptions,
        config: Config,
        links: LinkLayout,
        api: Any,  # kubeapi.DraApi: a SliceApi and a ClaimSource
        metrics: Metrics,
    ) -> None:
        self.opts = opts
        self.config = config
        self.metrics = DraMetrics(metrics)
        self.checkpoint = Checkpoint(KubeletPlugin.plugin_dir_of(opts.kubelet_dir), opts.node)
        self.checkpoint.load()
        self.preparer = Preparer(opts.node, opts.cdi_dir, links, self.checkpoint, api)
        self.publisher = Publisher(api, opts.node, self.metrics, opts.watch_seconds)
        self.health = HealthBoard(opts.node)
        self.claim_status = ClaimStatusWriter(api, on_write=self._on_status_write)
        self.kubelet = KubeletPlugin(
            opts.kubelet_dir, self.preparer, self._on_call, self._on_registration, self.health
        )
        self._socket_watch: Watcher | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.eviction = Eviction(opts.evict_after)
        self._entries: dict[str, table.Entry] = {}
        self._missing: dict[str, float] = {}  # absent device -> when found missing (wall)
        self._evicting: set[str] = set()
        self._publish_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._stopped = False

    def attach(self, inventory: Inventory) -> None:
        self.eviction = Eviction(self.opts.evict_after, inventory.hold)
        self._unsubscribe = inventory.subscribe(self.on_snapshot, name="DRA")

    def on_snapshot(self, snap: Snapshot) -> None:
        entries = table.build(snap, self.config.by_name())
        self.preparer.update(entries)
        self.health.update({name: e.device for name, e in entries.items()})
        with self._publish_lock:
            self._missing = missing_since(
                {n: e.device for n, e in self._entries.items()},
                {n: e.device for n, e in entries.items()},
                self._missing,
                snap.time,
            )
            self._entries = entries
        self.claim_status.set(self.preparer.prepared_claims(), entries)
        self._publish()

    def _publish(self) -> None:
        """The devices as they stand now, to the publisher; and a timer for the next
        eviction deadline, when the slice changes although no scan does."""
        with self._publish_lock:
            now = time.time()
            entries = list(self._entries.values())
            since = self._missing
            evicting = {
                e.name for e in entries if self.eviction.due(e.device, now, since.get(e.name))
            }
            for name in sorted(evicting - self._evicting):
                dev = self._entries[name].device
                log.warning(
                    "%s: absent for %.0fs (%s): NoExecute taint, the pods using it are evicted",
                    name,
                    now - since.get(name, dev.last_seen),
                    dev.reason,
                )
            self._evicting = evicting
            self.publisher.set_devices(
                [e.api(self.eviction, now, since.get(e.name)) for e in entries]
            )
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            at = self.eviction.next_deadline(((e.device, since.get(e.name)) for e in entries), now)
            if at is not None and not self._stopped:
                self._timer = threading.Timer(max(0.0, at - time.time()) + 0.01, self._publish)
                self._timer.daemon = True
                self._timer.start()

    def reconfigure(self, config: Config) -> None:
        """Which resources exist (the next snapshot is built with them)."""
        self.config = config

    def _on_call(self, op: str, ok: bool) -> None:
        self.metrics.calls.labels(op=op, result="ok" if ok else "error").inc()
        self.metrics.prepared.set(self.preparer.prepared)
        with self._publish_lock:
            entries = dict(self._entries)
        self.claim_status.set(self.preparer.prepared_claims(), entries)

    def _on_status_write(self, ok: bool) -> None:
        self.metrics.claim_status_writes.labels(result="ok" if ok else "error").inc()

    def _on_registration(self, ok: bool, _error: str) -> None:
        self.metrics.registrations.labels(result="ok" if ok else "error").inc()

    def start(self) -> None:
        self.preparer.sweep()
        self.metrics.prepared.set(self.preparer.prepared)
        self.publisher.start()
        self.claim_status.start()
        self.kubelet.start()
        self._socket_watch = Watcher(
            lambda _names: self.kubelet.check(),
            [self.kubelet.registry_dir, self.kubelet.plugin_dir],
            poll_interval=0.1,
            debounce=0.0,
            max_delay=0.0,
            name="dra-socket-watch",
        ).start()

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
        if self._unsubscribe is not None:
            self._unsubscribe()
        with self._publish_lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
        if self._socket_watch is not None:
            self._socket_watch.stop()
        self.health.close()
        self.kubelet.stop()
        self.claim_status.stop()
        prepared = self.preparer.prepared
        if prepared:
            log.info("%d claim(s) still prepared: leaving the ResourceSlices in place", prepared)
        self.publisher.stop(delete=prepared == 0)
