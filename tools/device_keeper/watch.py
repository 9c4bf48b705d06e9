"""`serve`'s own source of moves, `Following`, a component of the runner (edgefd.runtime.runner)
beside the `--events` feed (events.py): the keeper's own device inventory, built as devplugin
builds its own (both buses, the accelerator catalogue, and the same resources configuration,
the same ConfigMap, reloaded when it changes) on the same read-only host view, so the keeper
follows exactly the devices devplugin serves, named as devplugin names them: a device named by
its serial or selected by a resource's own IDs is followed like any other. A move is what the
inventory's Diff says moved, in this process; a device's first sighting is a catch-up
(source.py), decided from the runtime's spec and the keeper's own ledger of grants (ledger.py).
Like the feed, it hands its moves to the service on a worker thread of its own
(service.Worker), so a slow kubelet never holds up a scan; a worker that dies ends the process
through its lifeline, with its error.
"""

from __future__ import annotations

import logging

from edgefd.bus import pci, platform, usb
from edgefd.bus.catalogue import load_catalogue
from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.inventory.inventory import DEFAULT_HOLD, Inventory
from edgefd.inventory.resources import Config
from edgefd.runtime.runner import Lifeline

from .metrics import KeeperMetrics
from .service import Keeper, Report, Worker
from .source import InventorySource, MoveTracker

log = logging.getLogger("device-keeper")


class Following:
    """The keeper's inventory, the moves it sees, the worker granting them, their probes."""

    def __init__(
        self,
        inventory: Inventory,
        keeper: Keeper,
        report: Report,
        lifeline: Lifeline,
        node_name: str = "",
    ) -> None:
        self.inventory = inventory
        self.source = InventorySource(MoveTracker(node_name))
        inventory.subscribe(self.source.on_snapshot, name="device-keeper moves")
        self.worker = Worker(keeper, report, lifeline, "grants")

    def start(self) -> None:
        self.worker.start(self.source)
        self.inventory.start()

    def stop(self) -> None:
        """Stop the inventory, then let the move under way finish (its calls have timeouts)."""
        self.inventory.stop()
        self.source.stop()
        self.worker.join(30)

    def alive(self) -> tuple[bool, str]:
        return self.inventory.alive()

    def ready(self) -> tuple[bool, str]:
        snap = self.inventory.snapshot
        if snap is None:
            return False, self.inventory.last_error or "no scan yet"
        n = sum(1 for d in snap.devices if d.present and d.resources)
        return True, f"following {n} device(s) ({self.inventory.mode})"

    def reconfigure(self, config: Config) -> None:
        """devplugin's configuration changed: the same devices as devplugin from now on."""
        self.inventory.configure(selectors=config.selectors, forget_after=config.memory)
        self.inventory.refresh()


def keeper_inventory(
    host_root: str,
    config: Config,
    settings: WatchSettings,
    metrics: KeeperMetrics,
    use_uevents: bool | None = None,
) -> Inventory:
    """The inventory devplugin would build on this host with `config`."""
    return Inventory(
        HostRoot.of(host_root),
        (usb.READER, pci.READER, platform.READER),
        catalogue=load_catalogue(),
        selectors=config.selectors,
        hold=DEFAULT_HOLD,
        forget_after=config.memory,
        settings=settings,
        metrics=metrics.m,
        use_uevents=use_uevents,
    )
