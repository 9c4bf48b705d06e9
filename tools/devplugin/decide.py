"""What devplugin decides for each device it serves, written down for device-keeper
(edgefd.inventory.decisions): under which resources and kubelet IDs the device plugin
advertises it, as which DRA device, and at which container path and number each node is given.

Every part of it is the rule the front-ends themselves use, called here, not restated: the
resources that select a device and the one DRA gives it as (resources.Config), a resource's
container path for a node (Resource.container_path, what Allocate, CDI and the claim status
say), the kubelet IDs of a shared device (naming.replica_ids), the pool (the node's name).
A device with several nodes gives each its own entry, in the order of its nodes; a node whose
number is not known (a fixture's plain file) is left out: nothing can be granted by it.

A subscriber of the inventory, like the links and the front-ends: after each snapshot it writes
the file if the decisions changed (a rescan that changed nothing writes nothing), atomically.
What each node was given before is kept (`was`), carried over from the file a restarted
devplugin finds, so that device-keeper, after a restart of its own, can tell which of a
container's nodes came from this device when the path moves with the number (a USB device
given at its bus path, `usb_bus_mount: false`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from edgefd.inventory.decisions import (
    BadDecisions,
    Decisions,
    GivenNode,
    Handout,
    History,
    number_of,
    read,
    remembered,
    write,
)
from edgefd.inventory.device import Device
from edgefd.inventory.naming import DOMAIN, replica_ids
from edgefd.inventory.snapshot import Snapshot

from .resources import Config, Resource

log = logging.getLogger(__name__)


def paths_of(dev: Device, res: Resource) -> tuple[str, ...]:
    """Where `res` puts each of `dev`'s nodes in a container."""
    return tuple(res.container_path(dev, i, n.path) for i, n in enumerate(dev.nodes))


def handouts(
    snap: Snapshot, config: Config, device_plugin: bool, pool: str | None, history: History
) -> tuple[Handout, ...]:
    """The handouts of every device a configured resource selects (see the module)."""
    out: list[Handout] = []
    for dev in snap.devices:
        # one handout per distinct set of container paths: the usual device is one
        by_paths: dict[tuple[str, ...], tuple[list, list]] = {}
        if device_plugin:
            for res in config.selecting(dev):
                plugin, _ = by_paths.setdefault(paths_of(dev, res), ([], []))
                plugin.append((res.name, tuple(replica_ids(dev.name, res.replicas))))
        dra_res = config.dra_resource(dev) if pool else None
        if dra_res is not None:
            _, dra = by_paths.setdefault(paths_of(dev, dra_res), ([], []))
            dra.append((DOMAIN, pool, dev.name))
        given: dict[int, list[tuple[str, str]]] = {}
        for paths in by_paths:
            for i, (path, node) in enumerate(zip(paths, dev.nodes, strict=True)):
                number = number_of(node.dev)
                if number is not None:
                    given.setdefault(i, []).append((path, number))
        was = {i: history.given(dev.name, i, pairs) for i, pairs in given.items()}
        for paths, (plugin, dra) in by_paths.items():
            nodes = tuple(
                GivenNode(path, number, was[i])
                for i, (path, node) in enumerate(zip(paths, dev.nodes, strict=True))
                if (number := number_of(node.dev)) is not None
            )
            if nodes:
                out.append(Handout(dev.name, nodes, tuple(plugin), tuple(dra), dev.present))
    history.forget(h.device for h in out)
    return tuple(out)


class DecisionsFile:
    """Keeps `path` saying what devplugin decides, snapshot after snapshot."""

    def __init__(
        self, path: str, config: Config, device_plugin: bool, pool: str | None = None
    ) -> None:
        self.path = Path(path)
        self.config = config
        self.device_plugin = device_plugin
        self.pool = pool
        self.last: Decisions | None = None
        self._error = ""
        try:
            before = read(self.path)
        except BadDecisions as e:
            log.warning("%s: %s; starting without the earlier nodes it listed", path, e)
            before = None
        self.history = History(remembered(before))

    def on_snapshot(self, snap: Snapshot) -> None:
        made = handouts(snap, self.config, self.device_plugin, self.pool, self.history)
        decisions = Decisions(snap.time, made)
        if decisions.same_as(self.last):
            return
        try:
            write(self.path, decisions)
        except OSError as e:
            why = e.strerror or type(e).__name__  # the temp file's name differs every time
            if why != self._error:
                log.error("cannot write %s (%s): device-keeper cannot follow moves", self.path, why)
            self._error = why
            return
        if self._error:
            log.info("%s written again", self.path)
        self.last, self._error = decisions, ""

    def reconfigure(self, config: Config) -> None:
        """The next snapshot (the inventory's rescan with the new selectors) is decided with
        the new resources."""
        self.config = config
