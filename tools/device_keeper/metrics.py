"""The keeper's Prometheus metrics, in one place so names stay consistent; declared on the
registry it is handed (one /metrics per process)."""

from __future__ import annotations

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
            "Container paths of a device made to name its new node, by result",
            ["result"],
        )
        self.refused = m.counter(
            "edgefd_device_keeper_refused_total",
            "Grants not made, by reason (systemd: a systemd scope whose systemd is not reached; "
            "program: a device program that cannot be extended; decisions: devplugin's file "
            "not acted on; ledger: the record of grants cannot be saved)",
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
