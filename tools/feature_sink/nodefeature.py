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
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .desired import Desired
from .metrics import SinkMetrics
from .nodeapi import NFD_GROUP, NFD_VERSION, ApiRefused, NodeAPI
from .ownership import ANNOTATION
from .patch import label_changes
from .report import Reporter
from .sync import Plan, Rules, Syncer, decide

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


class NodeFeatureSyncer(Syncer):
    """Keeps `<namespace>/<node>` NodeFeature's spec.labels equal to the desired labels."""

    def __init__(
        self,
        api: NodeAPI | None,
        node_name: str,
        namespace: str,
        rules: Rules,
        metrics: SinkMetrics,
        reporter: Reporter,
        on_drift: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(api, node_name, rules, metrics, reporter, on_drift)
        self.namespace = namespace
        self.what = f"NodeFeature {namespace}/{node_name}"

    def fetch(self) -> dict[str, Any] | None:
        assert self.api is not None
        return self.api.get_nodefeature(self.namespace, self.node_name)

    def view(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return obj

    def query(self) -> tuple[str, str]:
        assert self.api is not None
        return self.api.nodefeature_query(self.namespace, self.node_name)

    def fingerprint(self, obj: dict[str, Any] | None) -> Any:
        if obj is None:
            return None
        md = obj.get("metadata") or {}
        labels = (obj.get("spec") or {}).get("labels") or {}
        return (
            tuple(sorted(labels.items())),
            (md.get("annotations") or {}).get(ANNOTATION),
            (md.get("labels") or {}).get(MANAGED_BY_LABEL),
        )

    def empty(self) -> dict[str, Any] | None:
        return None

    def plan(self, current: dict[str, Any] | None, desired: Desired, now: datetime) -> Plan:
        """The object to write (None: nothing to do) and what it changes. Pure."""
        if current is not None:
            md = current.get("metadata") or {}
            if (md.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
                raise ApiRefused(
                    f"{self.what} exists and was not created by feature-sink; refusing to "
                    "overwrite it (use another --namespace)"
                )
            labels = dict((current.get("spec") or {}).get("labels") or {})
            raw = (md.get("annotations") or {}).get(ANNOTATION)
            rv = md.get("resourceVersion")
        else:
            labels, raw, rv = {}, None, None
        d = decide(labels, raw, desired, now, self.rules, self.what)
        if d.blocked:
            return Plan(d.outcome, [], None, d.problems, d.blocked)
        changes = label_changes(labels, d.outcome.labels)
        body = None
        if current is None or changes or d.annotation != raw:
            body = build_object(
                self.node_name, self.namespace, d.outcome.labels, d.annotation, rv, now
            )
        return Plan(d.outcome, changes, body, d.problems, owned=d.owned)

    def write(self, current: dict[str, Any] | None, plan: Plan) -> dict[str, Any]:
        assert self.api is not None
        if current is None:
            return self.api.create_nodefeature(self.namespace, plan.write)
        return self.api.replace_nodefeature(self.namespace, plan.write)
