"""`kubectl edgefd why` against the real API server and the real kube-scheduler (peer.py):
each test builds a Pending pod of one kind, the real scheduler leaves it Pending for its real
reason, and the paragraph must name that reason with its evidence (the node, the label, the
device, the pods holding it). Nodes and devices come from the real tools' dry runs on fixture
hosts. The pure reasoning is tested on plain objects in test_*.py beside this one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .peer import Cluster, host, labels_of, resources_of

pytestmark = pytest.mark.realpeer

CORAL = "edgefd.io/coral-usb"


def kinds(told: dict[str, Any]) -> list[str]:
    return [c["kind"] for c in told["causes"]]


def coral_node(cluster: Cluster, hosts: Path, name: str, **kw: Any) -> None:
    root = host("rpi4-coral", str(hosts))
    cluster.node(name, labels_of(root), kw.pop("resources", None) or resources_of(root), **kw)


def asks(resource: str, n: int = 1) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "app",
                "image": "registry.example.com/app:1",
                "resources": {"limits": {resource: str(n)}},
            }
        ]
    }


def test_no_node_has_the_label(cluster: Cluster, hosts: Path) -> None:
    coral_node(cluster, hosts, "pi-a")
    cluster.pod("misspelt", {"nodeSelector": {"edgefd.io/edgtpu.present": "true"}})
    assert cluster.wait_placed("misspelt") is None
    told = cluster.why("misspelt")
    assert kinds(told) == ["no-node-matches-selector"]
    text = told["paragraph"]
    assert "no node has a label edgefd.io/edgtpu.present" in text
    assert "did you mean edgefd.io/edgetpu.present? pi-a has it" in text
    assert "didn't match Pod's node affinity/selector" in text  # the scheduler's own words


def test_a_value_the_nodes_do_not_carry(cluster: Cluster, hosts: Path) -> None:
    coral_node(cluster, hosts, "pi-a")
    cluster.pod("capital", {"nodeSelector": {"edgefd.io/edgetpu.present": "True"}})
    assert cluster.wait_placed("capital") is None
    text = cluster.why("capital")["paragraph"]
    assert "the nodes have edgefd.io/edgetpu.present=true" in text
    assert "case-sensitive" in text


def test_every_device_in_use_and_by_whom(cluster: Cluster, hosts: Path) -> None:
    coral_node(cluster, hosts, "pi-a")
    cluster.pod("first", asks(CORAL))
    assert cluster.wait_placed("first") == "pi-a"
    cluster.pod("second", asks(CORAL))
    assert cluster.wait_placed("second") is None
    told = cluster.why("second")
    assert kinds(told) == ["in-use"]
    assert (
        f"Every {CORAL} is in use: node pi-a's 1 held by pod why-test/first." in told["paragraph"]
    )
    assert f"Insufficient {CORAL}" in told["scheduler"]
    # the one that got it is not Pending for the scheduler's sake
    first = cluster.why("first")
    assert kinds(first) == ["scheduled"]
    assert "already scheduled to node pi-a" in first["paragraph"]


def test_unhealthy_device(cluster: Cluster, hosts: Path) -> None:
    coral_node(cluster, hosts, "pi-a", resources={CORAL: (1, 0)})  # devplugin said Unhealthy
    cluster.pod("waits", asks(CORAL))
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert kinds(told) == ["unhealthy"]
    assert f"Node pi-a has 1 {CORAL}, 1 of them unhealthy" in told["paragraph"]


def test_plugin_not_registered(cluster: Cluster, hosts: Path) -> None:
    root = host("rpi4-coral", str(hosts))
    cluster.node("pi-a", labels_of(root), {})  # labelled, nothing in its capacity
    cluster.pod("waits", asks(CORAL))
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert kinds(told) == ["plugin-not-registered"]
    text = told["paragraph"]
    assert "Node pi-a has 1 edgetpu device (label edgefd.io/edgetpu.count=1)" in text
    assert f"but no {CORAL} in its capacity" in text
    assert "no edgefd devplugin runs there" in text


def test_misspelt_resource(cluster: Cluster, hosts: Path) -> None:
    coral_node(cluster, hosts, "pi-a")
    cluster.pod("typo", asks("edgefd.io/coral"))
    assert cluster.wait_placed("typo") is None
    told = cluster.why("typo")
    assert kinds(told) == ["unknown-resource"]
    assert "did you mean edgefd.io/coral-usb?" in told["paragraph"]


def test_node_with_a_free_device_is_tainted(cluster: Cluster, hosts: Path) -> None:
    taint = {"key": "dedicated", "value": "cameras", "effect": "NoSchedule"}
    coral_node(cluster, hosts, "pi-a", taints=[taint])
    cluster.pod("waits", asks(CORAL))
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert kinds(told) == ["node-blocked"]
    assert "does not tolerate its taint dedicated=cameras:NoSchedule" in told["paragraph"]


def test_not_pending(cluster: Cluster, hosts: Path) -> None:
    coral_node(cluster, hosts, "pi-a")
    cluster.pod("runs", asks(CORAL))
    assert cluster.wait_placed("runs") == "pi-a"
    cluster.set_phase("runs", "Running")
    told = cluster.why("runs")
    assert told["paragraph"] == "Pod why-test/runs is not Pending: it is Running on node pi-a."
