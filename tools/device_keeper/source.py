"""The service's own source of moves: the device inventory (edgefd.inventory), as every other
consumer has it, reading the host's /sys and /dev read-only under `--host-root`.

A move is a device that is present again with other device nodes than when it was last seen
present: the same name (model and place: a Coral that loads its firmware comes back at the
same port, 1a6e:089a -> 18d1:9302, and is the same device), a new `major:minor`. The last
present nodes are kept per device, so a re-enumeration that spans scans (present, away for a
moment, present again) is one move from the node granted before to the node there now, and
one that falls between two scans (`Change.new_node`) is the same. The first snapshot is a
catch-up: each present device is looked for in its holders, and a holder whose path names
another node (the device moved while the keeper was not running: a restart, a rolling update)
gets the node there now and loses the one its path named.

Snapshots arrive on the inventory's scanning thread; the grants (kubelet, CRI, bpf(2)) are
made on the thread that iterates, so a slow kubelet never holds up a scan, and moves are
handled one at a time in the order the devices moved.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from edgefd.inventory.device import Device
from edgefd.inventory.snapshot import Snapshot

from .holders import DeviceRef
from .rules import DevNode
from .service import CONTAINER_DIR, Move

log = logging.getLogger("device-keeper")
DRA_DRIVER = "edgefd.io"  # the DRA driver name devplugin publishes its pool under
_STOP = object()


def char_node(number: str | None) -> DevNode | None:
    """A sysfs `dev` number ("189:4") as the char node the cgroup names; None if unknown."""
    if not number:
        return None
    major, _, minor = number.partition(":")
    try:
        return DevNode("c", int(major), int(minor))
    except ValueError:
        return None


def device_ref(dev: Device, node_name: str = "") -> DeviceRef:
    """How the kubelet's pod-resources names `dev`: the device plugin's ID is its name (or
    `<name>-r<n>` when shared) under whichever resource selects it, DRA's the device name in
    the node's pool (any pool of edgefd's driver when the node name is not known)."""
    return DeviceRef(
        dev.name, ids=frozenset({dev.name}), dra=frozenset({(DRA_DRIVER, node_name, dev.name)})
    )


def moves_between(before: Device, after: Device, node_name: str = "") -> list[Move]:
    """The moves of one device from its nodes `before` to those `after`, node by node in
    order (the device's second node is `<name>.1` in the container, as both APIs put it)."""
    out = []
    ref = device_ref(after, node_name)
    for i, (b, a) in enumerate(zip(before.nodes, after.nodes, strict=False)):
        old, new = char_node(b.dev), char_node(a.dev)
        if old is None or new is None or old == new:
            continue
        path = f"{CONTAINER_DIR}/{after.name}" + ("" if i == 0 else f".{i}")
        out.append(Move(ref, old, new, path=path))
    return out


def catch_up(dev: Device, node_name: str = "") -> list[Move]:
    """The keeper's first look at a present device: a move from whatever each holder's path
    still names (a move missed while the keeper was not running) to the node now."""
    out = []
    ref = device_ref(dev, node_name)
    for i, n in enumerate(dev.nodes):
        new = char_node(n.dev)
        if new is not None:
            path = f"{CONTAINER_DIR}/{dev.name}" + ("" if i == 0 else f".{i}")
            out.append(Move(ref, None, new, path=path))
    return out


class MoveTracker:
    """From snapshots to moves: remembers each device's nodes as last seen present."""

    def __init__(self, node_name: str = "") -> None:
        self.node_name = node_name
        self._last: dict[str, Device] = {}
        self._started = False

    def moves(self, snap: Snapshot) -> list[Move]:
        out: list[Move] = []
        names = set()
        for dev in snap.devices:
            names.add(dev.name)
            if not dev.present or not dev.nodes:
                continue
            before = self._last.get(dev.name)
            self._last[dev.name] = dev
            if not self._started:
                out += catch_up(dev, self.node_name)
            elif before is not None and before.nodes != dev.nodes:
                moved = moves_between(before, dev, self.node_name)
                out += [replace(m, seen=snap.time) for m in moved]
        for gone in self._last.keys() - names:  # forgotten: a new device if it ever returns
            del self._last[gone]
        self._started = True
        return out


class InventorySource:
    """An iterable of moves for `Keeper.run`, fed by an inventory subscription; ends when
    `stop()` is called (from a signal handler or another thread)."""

    def __init__(self, tracker: MoveTracker) -> None:
        self.tracker = tracker
        self._queue: queue.Queue[Any] = queue.Queue()

    def on_snapshot(self, snap: Snapshot) -> None:
        for move in self.tracker.moves(snap):
            if move.old is None:  # a catch-up: logged by the service if it finds a holder
                self._queue.put(move)
                continue
            log.info(
                "%s re-enumerated at %s: %s -> %s",
                move.device.name,
                snap.device(move.device.name).key.where,  # type: ignore[union-attr]
                move.old,
                move.new,
            )
            self._queue.put(move)

    def stop(self) -> None:
        self._queue.put(_STOP)

    def __iter__(self) -> Iterator[Move]:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            yield item
