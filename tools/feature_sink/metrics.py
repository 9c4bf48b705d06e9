"""The sink's Prometheus metrics, in one place so names stay consistent across modules;
declared on the registry the sink is handed (one /metrics per process)."""

from __future__ import annotations

from edgefd.runtime.metrics import Metrics


class SinkMetrics:
    def __init__(self, m: Metrics | None = None) -> None:
        self.m = m = m if m is not None else Metrics()
        self.value = m.value
        self.syncs = m.counter("edgefd_sink_syncs_total", "Sync attempts, by result.", ["result"])
        self.failures = m.counter(
            "edgefd_sink_sync_failures_total",
            "Failed syncs, by reason (unreachable, refused...).",
            ["reason"],
        )
        self.api_requests = m.counter(
            "edgefd_sink_api_requests_total",
            "Requests sent to the API server, by verb/resource.",
            ["verb", "resource"],
        )
        self.api_writes = m.counter(
            "edgefd_sink_api_writes_total",
            "Writes sent to the API server, by verb/resource.",
            ["verb", "resource"],
        )
        self.patch_conflicts = m.counter(
            "edgefd_sink_patch_conflicts_total",
            "Patches refused because the object changed since it was read (then retried).",
        )
        self.owned = m.gauge("edgefd_sink_owned_labels", "Labels the sink owns on its node.")
        self.kept = m.gauge(
            "edgefd_sink_grace_labels", "Owned labels kept only by the removal grace period."
        )
        self.rejected = m.gauge(
            "edgefd_sink_rejected_labels", "Labels from features.d refused (invalid or denied)."
        )
        self.file_problems = m.gauge(
            "edgefd_sink_feature_file_problems",
            "Problems in features.d files: skipped files (too big, not text, not regular), bad "
            "directives, keys overridden by a later file.",
        )
        self.conflicts = m.gauge(
            "edgefd_sink_label_conflicts",
            "Desired labels left alone because another writer set them to another value.",
        )
        self.ownership_problems = m.gauge(
            "edgefd_sink_ownership_problems",
            "Ownership annotation problems: claims dropped (a key the namespace policy refuses, "
            "not a label key, a bad producer name) plus 1 while the annotation is untrusted.",
        )
        self.over_budget = m.gauge(
            "edgefd_sink_over_budget_producers",
            "Producers whose labels were refused because they do not fit --label-budget.",
        )
        self.last_success = m.gauge(
            "edgefd_sink_last_success_timestamp_seconds", "Unix time of the last successful sync."
        )
        self.events = m.counter(
            "edgefd_sink_events_total", "Kubernetes Events posted, by reason.", ["reason"]
        )
        self.watch_mode = m.gauge(
            "edgefd_sink_watch_mode",
            "How features.d changes are seen (1 for the mode in use).",
            ["mode"],
        )

    def on_request(self, verb: str, resource: str) -> None:
        self.api_requests.labels(verb=verb, resource=resource).inc()
        if verb != "GET":
            self.api_writes.labels(verb=verb, resource=resource).inc()
