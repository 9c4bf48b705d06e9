"""The sink's Prometheus metrics, in one place so names stay consistent across modules."""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.common.httpserve import Metric, Registry


@dataclass
class SinkMetrics:
    registry: Registry = field(default_factory=Registry)

    def __post_init__(self) -> None:
        r = self.registry
        self.syncs = r.counter("edgefd_sink_syncs_total", "Sync attempts, by result.")
        self.failures = r.counter(
            "edgefd_sink_sync_failures_total", "Failed syncs, by reason (unreachable, refused...)."
        )
        self.api_requests = r.counter(
            "edgefd_sink_api_requests_total", "Requests sent to the API server, by verb/resource."
        )
        self.api_writes = r.counter(
            "edgefd_sink_api_writes_total", "Writes sent to the API server, by kind."
        )
        self.patch_conflicts = r.counter(
            "edgefd_sink_patch_conflicts_total",
            "Patches refused because the object changed since it was read (then retried).",
        )
        self.owned = r.gauge("edgefd_sink_owned_labels", "Labels the sink owns on its node.")
        self.kept = r.gauge(
            "edgefd_sink_grace_labels", "Owned labels kept only by the removal grace period."
        )
        self.rejected = r.gauge(
            "edgefd_sink_rejected_labels", "Labels from features.d refused (invalid or denied)."
        )
        self.file_problems = r.gauge(
            "edgefd_sink_feature_file_problems",
            "Problems in features.d files: skipped files (too big, not text), bad directives, "
            "keys overridden by a later file.",
        )
        self.conflicts = r.gauge(
            "edgefd_sink_label_conflicts",
            "Desired labels left alone because another writer set them to another value.",
        )
        self.last_success = r.gauge(
            "edgefd_sink_last_success_timestamp_seconds", "Unix time of the last successful sync."
        )
        self.events = r.counter("edgefd_sink_events_total", "Kubernetes Events posted, by reason.")

    def on_request(self, verb: str, resource: str) -> None:
        self.api_requests.inc(verb=verb, resource=resource)
        if verb != "GET":
            self.api_writes.inc(verb=verb, resource=resource)


__all__ = ["Metric", "Registry", "SinkMetrics"]
