"""`kubectl edgefd nodes`: one row per node, from one snapshot of the cluster.

ACCELERATORS are the capability labels the scanners write (`edgefd.io/<kind>.count`: what
the node *has*, whatever serves it). DEVICES, HEALTHY and IN USE are what the scheduler can
give out, from the API the node's devplugin serves: with the device plugin, the node's
capacity and allocatable of each `edgefd.io/*` resource (the kubelet counts a device the
plugin says is unhealthy in capacity only) and what its active pods request; with DRA, the
devices of its ResourceSlices (healthy: no NoSchedule or NoExecute taint) and those a claim
is allocated. VERSION, API and KEEPER come from edgefd's pods on the node (edgefdpods).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .devices import Device, Holder, devices, holders
from .edgefdpods import Agent, agent
from .podspec import RESOURCE_PREFIX, active, count, labels, name_of, node_of, ref, requests
from .snapshot import Snapshot

COUNT_SUFFIX = ".count"
COLUMNS = ("NODE", "ACCELERATORS", "API", "DEVICES", "HEALTHY", "IN USE", "VERSION", "KEEPER")


@dataclass(frozen=True)
class Resource:
    """One extended resource of a node: the kubelet's counts, and who requests it."""

    name: str
    capacity: int
    allocatable: int
    used: int = 0
    pods: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "resource": self.name,
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "in_use": self.used,
            "pods": list(self.pods),
        }


@dataclass(frozen=True)
class Row:
    node: str
    accelerators: dict[str, int]
    agent: Agent
    resources: tuple[Resource, ...] = ()
    devices: tuple[tuple[Device, Holder | None], ...] = field(default=())

    def _dra(self) -> bool:
        if self.agent.api in ("dra", "device-plugin"):
            return self.agent.api == "dra"
        return not self.resources and bool(self.devices)

    def counts(self) -> tuple[int, int, int]:
        """(devices, healthy, in use) of the API the node serves."""
        if self._dra():
            return (
                len(self.devices),
                sum(not d.taints for d, _ in self.devices),
                sum(h is not None for _, h in self.devices),
            )
        used = sum(r.used for r in self.resources)
        if self.agent.api == "both":  # the same devices through DRA too
            used += sum(h is not None for _, h in self.devices)
        return (
            sum(r.capacity for r in self.resources),
            sum(r.allocatable for r in self.resources),
            used,
        )

    def as_json(self) -> dict[str, Any]:
        total, healthy, in_use = self.counts()
        return {
            "node": self.node,
            "accelerators": dict(self.accelerators),
            **self.agent.as_json(),
            "devices": total,
            "healthy": healthy,
            "in_use": in_use,
            "resources": [r.as_json() for r in self.resources],
            "dra_devices": [d.as_json(h) for d, h in self.devices],
        }

    def cells(self) -> tuple[str, ...]:
        total, healthy, in_use = self.counts()
        accel = ",".join(f"{k}={v}" for k, v in sorted(self.accelerators.items())) or "-"
        keeper = {True: "on", False: "off", None: "-"}[self.agent.keeper]
        api = self.agent.api or "-"
        if self.agent.devplugin_ready is False:
            api += " (not ready)"
        return (
            self.node,
            accel,
            api,
            str(total),
            str(healthy),
            str(in_use),
            self.agent.version or "-",
            keeper,
        )


def accelerators(node: dict[str, Any]) -> dict[str, int]:
    """kind -> count, from the node's `edgefd.io/<kind>.count` labels."""
    out = {}
    for k, v in labels(node).items():
        if k.startswith(RESOURCE_PREFIX) and k.endswith(COUNT_SUFFIX):
            kind = k[len(RESOURCE_PREFIX) : -len(COUNT_SUFFIX)]
            n = count(v)
            if kind and n > 0:
                out[kind] = n
    return out


def node_resources(node: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[Resource, ...]:
    """The node's edgefd.io/* extended resources, each with the active pods bound to the node
    that request it (a bound pod holds its devices from the moment it is bound)."""
    status = node.get("status") or {}
    capacity = {k: count(v) for k, v in (status.get("capacity") or {}).items()}
    allocatable = {k: count(v) for k, v in (status.get("allocatable") or {}).items()}
    here = [p for p in pods if node_of(p) == name_of(node) and active(p)]
    out = []
    for name in sorted(set(capacity) | set(allocatable)):
        if not name.startswith(RESOURCE_PREFIX):
            continue
        asking = [(ref(p), requests(p).get(name, 0)) for p in here]
        asking = [(who, n) for who, n in asking if n > 0]
        out.append(
            Resource(
                name,
                capacity.get(name, 0),
                allocatable.get(name, 0),
                sum(n for _, n in asking),
                tuple(who for who, _ in asking),
            )
        )
    return tuple(out)


def rows(snap: Snapshot) -> list[Row]:
    held = holders(snap.claims)
    by_node: dict[str, list[tuple[Device, Holder | None]]] = {}
    for d in devices(snap.slices):
        by_node.setdefault(d.node, []).append((d, held.get((d.pool, d.name))))
    out = []
    for node in sorted(snap.nodes, key=name_of):
        name = name_of(node)
        out.append(
            Row(
                name,
                accelerators(node),
                agent(snap.pods, name),
                node_resources(node, snap.pods),
                tuple(by_node.get(name, ())),
            )
        )
    return out


def table(found: list[Row]) -> str:
    """The rows as kubectl prints a table: columns padded to the widest cell, 3 spaces apart."""
    lines = [COLUMNS, *(r.cells() for r in found)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )
