"""feature-sink's NodeFeature mode decisions (no API: the syncer's pure `plan`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.nodeapi import ApiRefused
from edgefd.feature_sink.nodefeature import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODE_NAME_LABEL,
    NodeFeatureSyncer,
)
from edgefd.feature_sink.ownership import ANNOTATION, decode
from edgefd.feature_sink.report import Reporter
from edgefd.feature_sink.sync import Rules
from tests.feature_sink.states import desired_of

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
F = "feature.node.kubernetes.io"


def syncer() -> NodeFeatureSyncer:
    m = SinkMetrics()
    return NodeFeatureSyncer(
        None, "n1", "edgefd", Rules(timedelta(minutes=10)), m, Reporter(m, False)
    )


def test_first_object_carries_node_name_label_and_spec_labels():
    plan = syncer().plan(None, desired_of({"usb": f"{F}/a=1\nnode-role.kubernetes.io/x=\n"}), NOW)
    body = plan.write
    assert body["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and body["kind"] == "NodeFeature"
    md = body["metadata"]
    assert md["name"] == "n1" and md["namespace"] == "edgefd"
    assert md["labels"] == {NODE_NAME_LABEL: "n1", MANAGED_BY_LABEL: MANAGED_BY}
    assert "resourceVersion" not in md
    assert body["spec"]["labels"] == {f"{F}/a": "1"}
    assert decode(md["annotations"][ANNOTATION]).producers == {"usb": {f"{F}/a"}}
    assert [c.key for c in plan.changes] == [f"{F}/a"]


def test_unchanged_object_is_not_rewritten_and_updates_are_guarded():
    s = syncer()
    d = desired_of({"usb": f"{F}/a=1\n"})
    body = s.plan(None, d, NOW).write
    stored = {**body, "metadata": {**body["metadata"], "resourceVersion": "42"}}
    assert s.plan(stored, d, NOW + timedelta(hours=1)).write is None
    result = s.plan(stored, desired_of({"usb": f"{F}/b=1\n"}), NOW)
    body2 = result.write
    assert body2["metadata"]["resourceVersion"] == "42"  # replace fails with 409 if it moved
    assert body2["spec"]["labels"] == {f"{F}/b": "1"}
    assert {(c.op, c.key) for c in result.changes} == {("add", f"{F}/b"), ("remove", f"{F}/a")}


def test_foreign_object_is_never_overwritten():
    foreign = {"metadata": {"name": "n1", "labels": {NODE_NAME_LABEL: "n1"}}, "spec": {}}
    with pytest.raises(ApiRefused, match="not created by feature-sink"):
        syncer().plan(foreign, desired_of({"usb": f"{F}/a=1\n"}), NOW)
