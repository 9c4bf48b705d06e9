"""The one guarded JSON Patch a sync sends (patch.py): pointer escaping, `test` operations on
the resourceVersion and the annotation read (so a concurrent writer is never clobbered), the
label changes and the ownership annotation in the same patch, maps created whole when the Node
has none, and no patch at all when nothing changes. Each patch is planned as a sync plans it
and applied with the JSON Patch test applier, so it is checked to do what the diff says
independently of the API server."""

from __future__ import annotations

import pytest

from edgefd.feature_sink.ownership import ANNOTATION, Ownership, decode
from edgefd.feature_sink.patch import NodeView, escape_pointer
from edgefd.feature_sink.sync import plan_node
from tests.feature_sink.states import NOW, RULES, F, apply, desired_of, node


def test_pointer_escaping():
    assert escape_pointer("feature.node.kubernetes.io/a~b") == "feature.node.kubernetes.io~1a~0b"


def test_patch_is_guarded_and_updates_annotation_in_the_same_patch():
    n = node({"kubernetes.io/hostname": "n1"}, Ownership({"usb": frozenset({f"{F}/old"})}))
    n = NodeView(n.name, {**n.labels, f"{F}/old": "1"}, n.annotations, "7", "u")
    plan = plan_node(n, desired_of({"usb": f"{F}/new=1\n"}), NOW, RULES)
    ops = plan.write
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert (
        ops[1]["op"] == "test" and ops[1]["path"] == "/metadata/annotations/edgefd.io~1owned-labels"
    )
    paths = {(o["op"], o["path"]) for o in ops[2:]}
    assert ("add", f"/metadata/labels/{F}~1new") in paths
    assert ("remove", f"/metadata/labels/{F}~1old") in paths
    assert ("add", "/metadata/annotations/edgefd.io~1owned-labels") in paths
    after = apply(n, ops)
    assert after.labels == {"kubernetes.io/hostname": "n1", f"{F}/new": "1"}
    assert decode(after.annotations[ANNOTATION]).producers == {"usb": {f"{F}/new"}}


def test_no_patch_when_nothing_changes():
    owned = Ownership({"usb": frozenset({f"{F}/a"})})
    n = node({f"{F}/a": "1"}, owned)
    assert plan_node(n, desired_of({"usb": f"{F}/a=1\n"}), NOW, RULES).write == []


def test_node_without_labels_or_annotations_maps():
    n = NodeView("n1", None, None, "3")
    ops = plan_node(n, desired_of({"usb": f"{F}/a=1\n"}), NOW, RULES).write
    after = apply(n, ops)
    assert after.labels == {f"{F}/a": "1"}
    assert ANNOTATION in after.annotations


def test_stale_resource_version_fails_the_test_op():
    n = node({}, Ownership())
    ops = plan_node(n, desired_of({"usb": f"{F}/a=1\n"}), NOW, RULES).write
    moved = NodeView(n.name, n.labels, n.annotations, "8")
    with pytest.raises(ValueError, match="test failed"):
        apply(moved, ops)


def test_owning_nothing_removes_the_annotation():
    owned = Ownership({"usb": frozenset({f"{F}/a"})})
    n = node({f"{F}/a": "1"}, owned, extra_ann={"other": "x"})
    after = apply(n, plan_node(n, desired_of({"usb": ""}), NOW, RULES).write)
    assert after.labels == {}
    assert after.annotations == {"other": "x"}
