"""The keeper's Prometheus metrics, in one place so names stay consistent."""

from __future__ import annotations

from edgefd.runtime.metrics import Metrics


class KeeperMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self.moves = self.counter(
            "edgefd_device_keeper_moves_total", "Device re-enumerations handled (node A -> B)"
        )
        self.grants = self.counter(
            "edgefd_device_keeper_grants_total",
            "New device nodes allowed in a running container's cgroup, by cgroup version",
            ["cgroup"],
        )
        self.revokes = self.counter(
            "edgefd_device_keeper_revokes_total",
            "Old device nodes revoked in a running container's cgroup, by cgroup version",
            ["cgroup"],
        )
        self.nodes = self.counter(
            "edgefd_device_keeper_node_replacements_total",
            "Container paths (/dev/edgefd/<name>) made to name the new node, by result",
            ["result"],
        )
        self.refused = self.counter(
            "edgefd_device_keeper_refused_total",
            "Containers left without the grant, by reason (systemd: the systemd cgroup driver)",
            ["reason"],
        )
        self.errors = self.counter(
            "edgefd_device_keeper_errors_total",
            "Moves that could not be handled completely, by stage",
            ["stage"],
        )
