"""`serve` without `--events`: the keeper's own device inventory, built the way devplugin
builds its own (both buses, the accelerator catalogue) on the same read-only host view, and
the moves it sees handed to the service.

The keeper needs no resource configuration: a device's name is the catalogue model and the
place, whatever resource a configuration files it under, and it is also the device-plugin
ID and the DRA device name (holders.py matches those). It keeps no state file: a move is
"nodes now" against "nodes when last seen", both in this process; the first scan grants
nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from edgefd.bus import pci, usb
from edgefd.bus.catalogue import load_catalogue
from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.inventory.inventory import DEFAULT_HOLD, Inventory

from .metrics import KeeperMetrics
from .service import Keeper
from .source import InventorySource, MoveTracker

log = logging.getLogger("device-keeper")


class Watching:
    """The inventory, the source it feeds, and the probes of both."""

    def __init__(self, inventory: Inventory, source: InventorySource) -> None:
        self.inventory = inventory
        self.source = source

    def healthz(self) -> tuple[bool, str]:
        fresh = self.inventory.freshness
        return fresh.check() if fresh is not None else (True, "starting")

    def readyz(self) -> tuple[bool, str]:
        if self.inventory.snapshot is None:
            return False, self.inventory.last_error or "no scan yet"
        n = sum(1 for d in self.inventory.snapshot.devices if d.present)
        return True, f"following {n} device(s) ({self.inventory.mode})"

    def run(self, keeper: Keeper, report: Callable[..., None], signals: Any) -> None:
        """Grant moves on a worker thread until SIGTERM; then stop the inventory and let the
        move under way finish (its calls have timeouts)."""
        worker = threading.Thread(
            target=_grants, args=(keeper, self.source, report), name="grants", daemon=True
        )
        worker.start()
        self.inventory.start()
        try:
            while not signals.stop_requested and worker.is_alive():
                signals.wait(1.0)
        finally:
            self.inventory.stop()
            self.source.stop()
            worker.join(timeout=30)


def _grants(keeper: Keeper, source: InventorySource, report: Callable[..., None]) -> None:
    """The worker: the gRPC stubs are loaded before the first move, not during it (about a
    quarter of a second on a small machine, which the first grant would otherwise wait)."""
    from .api import cri_pb2_grpc, podresources_pb2_grpc  # noqa: F401

    keeper.run(source, report)


def watch_inventory(
    host_root: str,
    node_name: str,
    poll_interval: float,
    rescan_interval: float,
    metrics: KeeperMetrics,
    use_uevents: bool | None = None,
) -> Watching:
    inventory = Inventory(
        HostRoot.of(host_root),
        (usb.READER, pci.READER),
        catalogue=load_catalogue(),
        hold=DEFAULT_HOLD,
        settings=WatchSettings(poll_interval=poll_interval, rescan_interval=rescan_interval),
        metrics=metrics.m,
        use_uevents=use_uevents,
    )
    source = InventorySource(MoveTracker(node_name))
    inventory.subscribe(source.on_snapshot, name="device-keeper moves")
    return Watching(inventory, source)
