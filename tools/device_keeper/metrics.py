"""The keeper's Prometheus metrics, in one place so names stay consistent; declared on the
registry it is handed (one /metrics per process)."""

from __future__ import annotations

from edgefd.inventory.naming import CONTAINER_DIR
from edgefd.runtime.metrics import Metrics


class KeeperMetrics:
    def __init__(self, m: Metrics | None = None) -> None:
        self.m = m = m if m is not None else Metrics()
        self.value = m.value
        self.moves = m.counter(
            "edgefd_device_keeper_moves_total", "Device re-enumerations handled (node A -> B)"
        )
        self.grants = m.counter(
            "edgefd_device_keeper_grants_total",
            "New device nodes allowed in a running container's cgroup, by cgroup version",
            ["cgroup"],
        )
        self.revokes = m.counter(
            "edgefd_device_keeper_revokes_total",
            "Old device nodes revoked in a running container's cgroup, by cgroup version",
            ["cgroup"],
        )
        self.nodes = m.counter(
            "edgefd_device_keeper_node_replacements_total",
            f"Container paths ({CONTAINER_DIR}/<name>) made to name the new node, by result",
            ["result"],
        )
        self.refused = m.counter(
            "edgefd_device_keeper_refused_total",
            "Containers left without the grant, by reason (systemd: the systemd cgroup driver)",
            ["reason"],
        )
        self.errors = m.counter(
            "edgefd_device_keeper_errors_total",
            "Moves that could not be handled completely, by stage",
            ["stage"],
        )
        self.latency = m.gauge(
            "edgefd_device_keeper_last_grant_seconds",
            "From the scan that saw a device's new node to its holders' grants, the last move",
        )
