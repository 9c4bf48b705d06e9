"""The keeper's own inventory on a fixture host, as `serve` builds it (watch.keeper_inventory,
scanning fast), the Coral's runtime IDs it re-enumerates with, and what the tests read of the
moves; `Recorder` stands in for the kubelet when nobody is to hold anything."""

from __future__ import annotations

from pathlib import Path

from edgefd.core.service import WatchSettings
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.rules import DeviceNumber
from edgefd.device_keeper.service import Move
from edgefd.device_keeper.source import char_node
from edgefd.device_keeper.watch import keeper_inventory
from edgefd.inventory.inventory import Inventory
from edgefd.inventory.resources import Config, default_config

CORAL_RUNTIME = {"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 9}
FAST = WatchSettings(poll_interval=0.05, rescan_interval=0.5)


def fast_inventory(root: Path, config: Config | None = None) -> Inventory:
    return keeper_inventory(str(root), config or default_config(), FAST, KeeperMetrics())


def without_catch_ups(moves: list[Move]) -> list[Move]:
    """Moves proper, without the first look's catch-ups (old None)."""
    return [m for m in moves if m.old is not None]


def node_of(inv: Inventory, name: str) -> DeviceNumber:
    dev = inv.snapshot.device(name)  # type: ignore[union-attr]
    number = char_node(dev.nodes[0].dev)  # type: ignore[union-attr]
    assert number is not None
    return number


class Recorder:
    """Stands in for the kubelet and the runtime: who was asked about what."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def list(self) -> list[object]:
        return []
