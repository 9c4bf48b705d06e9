"""The DRA mode's metrics, on the device plugin's registry (one /metrics per process), and the
callbacks that count what the kubelet plugin and the claim-status writer report."""

from __future__ import annotations

from edgefd.runtime.metrics import Metrics


class DraMetrics:
    def __init__(self, m: Metrics) -> None:
        self.slice_writes = m.counter(
            "edgefd_devplugin_dra_slice_writes_total",
            "ResourceSlice writes, by operation (create, update, delete)",
            ["op"],
        )
        self.slice_write_errors = m.counter(
            "edgefd_devplugin_dra_slice_write_errors_total",
            "ResourceSlice writes that failed, by kind of failure",
            ["kind"],
        )
        self.api_retries = m.counter(
            "edgefd_devplugin_dra_api_retries_total",
            "Retries of the ResourceSlice loops after a failure, by loop (write, watch) and"
            " reason (name-taken, conflict, refused, unreachable, ...)",
            ["loop", "reason"],
        )
        self.slice_generation = m.gauge(
            "edgefd_devplugin_dra_pool_generation", "The generation of this node's pool"
        )
        self.calls = m.counter(
            "edgefd_devplugin_dra_calls_total",
            "NodePrepareResources / NodeUnprepareResources per claim, by result",
            ["op", "result"],
        )
        self.prepared = m.gauge(
            "edgefd_devplugin_dra_prepared_claims", "Claims prepared on this node (checkpoint)"
        )
        self.registrations = m.counter(
            "edgefd_devplugin_dra_registrations_total",
            "Registration statuses the kubelet reported, by result",
            ["result"],
        )
        self.claim_status_writes = m.counter(
            "edgefd_devplugin_dra_claim_status_writes_total",
            "ResourceClaim status.devices writes, by result",
            ["result"],
        )

    def status_written(self, ok: bool) -> None:
        self.claim_status_writes.labels(result=_result(ok)).inc()

    def registration(self, ok: bool, _error: str) -> None:
        self.registrations.labels(result=_result(ok)).inc()

    def call(self, op: str, ok: bool, prepared: int) -> None:
        self.calls.labels(op=op, result=_result(ok)).inc()
        self.prepared.set(prepared)


def _result(ok: bool) -> str:
    return "ok" if ok else "error"
