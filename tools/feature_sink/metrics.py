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

        self.triggers = m.counter(
            "edgefd_sink_sync_triggers_total",
            "Why syncs ran: start, features (features.d changed), drift (the object changed "
            "under the sink), resync (the safety resync), expiry (a grace period or settle "
            "time ended), retry (after a failure).",
            ["trigger"],
        )
        self.retries = m.counter(
            "edgefd_sink_retries_total",
            "Retries after a failure, by loop (sync, watch) and reason; each waited its backoff.",
            ["loop", "reason"],
        )
        self.throttled = m.counter(
            "edgefd_sink_api_throttled_total",
            "Requests that waited before being sent, by who asked: client (the sink's own rate "
            "limit, --api-qps/--api-burst) or server (a 429/503 with Retry-After).",
            ["by"],
        )
        self.throttled_seconds = m.counter(
            "edgefd_sink_api_throttled_seconds_total",
            "Seconds of those waits, by who asked.",
            ["by"],
        )
        self.object_watch_up = m.gauge(
            "edgefd_sink_object_watch_up",
            "1 while the watch on the sink's own object (Node or NodeFeature) is open.",
        )
        self.object_lists = m.counter(
            "edgefd_sink_object_lists_total",
            "Lists of the sink's own object before watching it: start, gone (410: the "
            "watch's resourceVersion had expired), error (never listed yet).",
            ["reason"],
        )
        self.object_events = m.counter(
            "edgefd_sink_object_events_total",
            "Watch events on the sink's own object, by type.",
            ["type"],
        )
        self.drift = m.counter(
            "edgefd_sink_object_changes_total",
            "Changes of the object's labels or ownership annotation the sink did not make "
            "(each wakes a sync), by how they were seen (event, list, deleted).",
            ["seen"],
        )
        self.repairs = m.counter(
            "edgefd_sink_repairs_total",
            "Writes that undid someone else's change to what the sink owns.",
        )
        self.repair_holds = m.counter(
            "edgefd_sink_repair_holds_total",
            "Repairs delayed because the same object kept being changed back (another writer "
            "fighting over a label): repairs then back off up to --max-backoff.",
        )

    def on_request(self, verb: str, resource: str) -> None:
        self.api_requests.labels(verb=verb, resource=resource).inc()
        if verb not in ("GET", "LIST", "WATCH"):
            self.api_writes.labels(verb=verb, resource=resource).inc()

    def on_wait(self, by: str, seconds: float) -> None:
        self.throttled.labels(by=by).inc()
        self.throttled_seconds.labels(by=by).inc(seconds)
