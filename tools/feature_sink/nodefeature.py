"""`--mode nodefeature`: publish a NodeFeature object for an existing nfd-master to apply.

In clusters that already run NFD, nfd-master is the one writer of feature labels; the sink then
only publishes `nfd.k8s-sigs.io/v1alpha1` NodeFeature `<namespace>/<node>` with the node-name
label nfd-master selects on and `spec.labels` = the desired labels (`spec.features` stays empty:
edgefd producers emit labels, not raw features).

The same ownership rules apply (the annotation lives on the NodeFeature), so the removal grace
period and "a restart changes nothing" hold here too. An object of that name not created by
the sink (e.g. nfd-worker's own, in the same namespace) is never overwritten.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from .desired import Desired
from .metrics import SinkMetrics
from .nodeapi import NFD_GROUP, NFD_VERSION, ApiConflict, ApiRefused, NodeAPI
from .ownership import ANNOTATION, MalformedOwnership, Ownership, decode, encode, reconcile
from .patch import NodeView, label_changes
from .sync import MAX_CONFLICT_RETRIES, Reporter, SyncResult

log = logging.getLogger(__name__)

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "edgefd-feature-sink"


def build_object(
    node_name: str,
    namespace: str,
    labels: dict[str, str],
    ownership_annotation: str | None,
    resource_version: str | None,
    now: datetime,
) -> dict[str, Any]:
    """The NodeFeature the sink wants to exist. Pure."""
    metadata: dict[str, Any] = {
        "name": node_name,
        "namespace": namespace,
        "labels": {NODE_NAME_LABEL: node_name, MANAGED_BY_LABEL: MANAGED_BY},
    }
    if ownership_annotation is not None:
        metadata["annotations"] = {ANNOTATION: ownership_annotation}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": f"{NFD_GROUP}/{NFD_VERSION}",
        "kind": "NodeFeature",
        "metadata": metadata,
        "spec": {"labels": dict(sorted(labels.items())), "features": {}},
        # newer NFD CRDs require status; older ones prune it
        "status": {
            "lastAppliedAt": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "numberOfLabels": len(labels),
        },
    }


class NodeFeatureSyncer:
    """Keeps `<namespace>/<node>` NodeFeature's spec.labels equal to the desired labels."""

    def __init__(
        self,
        api: NodeAPI,
        node_name: str,
        namespace: str,
        grace: timedelta,
        metrics: SinkMetrics,
        reporter: Reporter,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.namespace = namespace
        self.grace = grace
        self.metrics = metrics
        self.reporter = reporter

    def plan(
        self, obj: dict[str, Any] | None, desired: Desired, now: datetime
    ) -> tuple[dict[str, Any] | None, SyncResult]:
        """The object to write (None: nothing to do) and what it changes. Pure."""
        if obj is not None:
            md = obj.get("metadata") or {}
            if (md.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
                raise ApiRefused(
                    f"NodeFeature {self.namespace}/{self.node_name} exists and was not created "
                    "by feature-sink; refusing to overwrite it (use another --namespace)"
                )
            current = dict((obj.get("spec") or {}).get("labels") or {})
            raw = (md.get("annotations") or {}).get(ANNOTATION)
            rv = md.get("resourceVersion")
        else:
            current, raw, rv = {}, None, None
        try:
            owned = decode(raw)
        except MalformedOwnership as e:
            log.error("%s; treating the sink as owning no labels", e)
            owned = Ownership()
        outcome = reconcile(current, owned, desired, now, self.grace)
        new_ann = encode(outcome.ownership)
        changes = label_changes(current, outcome.labels)
        same_ann = raw == new_ann or (raw is not None and _decodes_to(raw, outcome.ownership))
        result = SyncResult(
            wrote=False,
            changes=changes,
            owned=len(outcome.ownership.keys),
            next_expiry=outcome.next_expiry,
        )
        if obj is not None and not changes and same_ann:
            return None, result
        body = build_object(self.node_name, self.namespace, outcome.labels, new_ann, rv, now)
        return body, result

    def sync(self, desired: Desired, now: datetime) -> SyncResult:
        self.reporter.observe(desired, ())
        for attempt in range(1, MAX_CONFLICT_RETRIES + 1):
            obj = self.api.get_nodefeature(self.namespace, self.node_name)
            body, result = self.plan(obj, desired, now)
            if body is not None:
                try:
                    if obj is None:
                        self.api.create_nodefeature(self.namespace, body)
                    else:
                        self.api.replace_nodefeature(self.namespace, body)
                except ApiConflict as e:
                    self.metrics.patch_conflicts.inc()
                    log.info("NodeFeature changed while syncing (attempt %d): %s", attempt, e)
                    continue
                result.wrote = True
                for c in result.changes:
                    log.info("NodeFeature %s/%s: %s", self.namespace, self.node_name, c)
            self.metrics.owned.set(result.owned)
            self.reporter.post_events(self.api, NodeView(self.node_name, None, None), desired, ())
            return result
        raise ApiConflict(
            f"NodeFeature {self.namespace}/{self.node_name} kept changing; gave up after "
            f"{MAX_CONFLICT_RETRIES} attempts"
        )


def _decodes_to(raw: str, own: Ownership) -> bool:
    try:
        return decode(raw) == own
    except MalformedOwnership:
        return False
