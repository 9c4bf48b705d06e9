"""The service's own source of moves: the device inventory (edgefd.inventory), as every other
consumer has it, reading the host's /sys and /dev read-only under `--host-root`, with the
device plugin's own resources configuration (watch.py), so it follows exactly the devices
devplugin serves under exactly their names.

A move is what the inventory's Diff calls one (`Change.moved`): a device present again with
other device nodes than it last had, whether it re-enumerated within one scan or across an
absence (presence keeps an absent device's last nodes: a Coral that loads its firmware comes
back at the same port, 1a6e:089a -> 18d1:9302, as the same device with a new `major:minor`).
The first time this process sees a served device present (at the first scan, or later: a
Coral loading its firmware when the keeper started, a device a new configuration serves) is
a catch-up: each holder that the runtime, or the keeper before a restart (its ledger), gave
another node at the device's path missed a move and gets the node there now, losing those
(service.py; never decided from what the holder's path names).

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
from edgefd.inventory.naming import DOMAIN, container_path
from edgefd.inventory.snapshot import Snapshot

from .holders import DeviceRef
from .rules import DeviceNumber
from .service import Move

log = logging.getLogger("device-keeper")
_STOP = object()


def char_node(number: str | None) -> DeviceNumber | None:
    """A sysfs `dev` number ("189:4") as the char node the cgroup names; None if unknown."""
    if not number:
        return None
    major, _, minor = number.partition(":")
    try:
        return DeviceNumber("c", int(major), int(minor))
    except ValueError:
        return None


def device_ref(dev: Device, node_name: str = "") -> DeviceRef:
    """How the kubelet's pod-resources names `dev`: the device plugin's ID is its name (or a
    replica of it, naming.names_device) under whichever resource selects it, DRA's the device
    name in the node's pool (any pool of edgefd's driver when the node name is not known)."""
    return DeviceRef(
        dev.name, ids=frozenset({dev.name}), dra=frozenset({(DOMAIN, node_name, dev.name)})
    )


def moves_between(before: Device, after: Device, node_name: str = "") -> list[Move]:
    """The moves of one device from its nodes `before` to those `after`, node by node in
    order (each at its container path, as both APIs put it)."""
    out = []
    ref = device_ref(after, node_name)
    for i, (b, a) in enumerate(zip(before.nodes, after.nodes, strict=False)):
        old, new = char_node(b.dev), char_node(a.dev)
        if old is None or new is None or old == new:
            continue
        out.append(Move(ref, old, new, path=container_path(after.name, i)))
    return out


def catch_up(dev: Device, node_name: str = "") -> list[Move]:
    """The keeper's first look at a present device: a move from whatever each holder's path
    still names (a move missed while the keeper was not running) to the node now."""
    out = []
    ref = device_ref(dev, node_name)
    for i, n in enumerate(dev.nodes):
        new = char_node(n.dev)
        if new is not None:
            out.append(Move(ref, None, new, path=container_path(dev.name, i)))
    return out


def served(dev: Device) -> bool:
    """Whether devplugin hands `dev` out: a resource of the configuration selects it."""
    return bool(dev.resources) and bool(dev.nodes)


class MoveTracker:
    """From snapshots to moves: a catch-up of each served device the first time it is seen
    present, then what each Diff says moved."""

    def __init__(self, node_name: str = "") -> None:
        self.node_name = node_name
        self._seen: set[str] = set()

    def moves(self, snap: Snapshot) -> list[Move]:
        out: list[Move] = []
        first = [d for d in snap.devices if d.present and served(d) and d.name not in self._seen]
        for d in first:
            self._seen.add(d.name)
            out += catch_up(d, self.node_name)
        new = {d.name for d in first}
        for c in snap.diff.changes:
            if c.name in new:
                continue  # its catch-up already grants the node there now
            if c.moved and c.before is not None and c.after is not None and served(c.after):
                moved = moves_between(c.before, c.after, self.node_name)
                out += [replace(m, seen=snap.time) for m in moved]
        return out


class InventorySource:
    """An iterable of moves for `Keeper.run`, fed by an inventory subscription; ends when
    `stop()` is called (from a signal handler or another thread)."""

    def __init__(self, tracker: MoveTracker) -> None:
        self.tracker = tracker
        self._queue: queue.Queue[Any] = queue.Queue()

    def on_snapshot(self, snap: Snapshot) -> None:
        for move in self.tracker.moves(snap):
            if move.old is not None:  # a catch-up is logged by the service if it finds a holder
                where = snap.device(move.device.name).key.where  # type: ignore[union-attr]
                log.info(
                    "%s re-enumerated at %s: %s -> %s",
                    move.device.name,
                    where,
                    move.old,
                    move.new,
                    extra={
                        "device": move.device.name,
                        "event": "re-enumerated",
                        "place": where,
                        "old": str(move.old),
                        "new": str(move.new),
                    },
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
