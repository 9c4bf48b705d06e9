"""What a pod asks and where it may go, read as the scheduler reads it."""

from __future__ import annotations

import pytest

from edgefd.kubectl_edgefd.podspec import (
    Requirement,
    blocking_taints,
    count,
    edgefd_requests,
    requests,
    selector_terms,
    selects,
    tolerates,
)

from .objects import node, pod


@pytest.mark.parametrize(
    ("text", "n"), [("1", 1), ("2", 2), ("1k", 1000), ("500m", 1), ("1Ki", 1024), ("x", 0), ("", 0)]
)
def test_count(text: str, n: int) -> None:
    assert count(text) == n


def test_requests_count_sidecars_and_the_largest_init_container() -> None:
    def c(n: int, **kw: object) -> dict:
        return {"name": f"c{n}", "resources": {"limits": {"edgefd.io/coral-usb": str(n)}}, **kw}

    p = pod("p")
    p["spec"]["containers"] = [c(1), c(1)]
    p["spec"]["initContainers"] = [c(1, restartPolicy="Always"), c(2)]
    # containers 1 + 1 and the sidecar 1 = 3; the init container: 2 + the sidecar before it = 3
    assert requests(p)["edgefd.io/coral-usb"] == 3
    p["spec"]["initContainers"] = [c(5)]
    assert requests(p) == {"edgefd.io/coral-usb": 5}


def test_requests_take_requests_over_limits_and_only_edgefd_resources() -> None:
    p = pod("p", limits={"edgefd.io/ncs2": "2", "cpu": "1", "nvidia.com/gpu": "1"})
    p["spec"]["containers"][0]["resources"]["requests"] = {"edgefd.io/ncs2": "1"}
    assert edgefd_requests(p) == {"edgefd.io/ncs2": 1}


def test_selector_terms_and_the_node_selector_and_together() -> None:
    p = pod("p", nodeSelector={"edgefd.io/edgetpu.present": "true"})
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
                        ]
                    },
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["x86"]}
                        ]
                    },
                ]
            }
        }
    }
    terms = selector_terms(p)
    assert len(terms) == 2 and all(t[0].key == "edgefd.io/edgetpu.present" for t in terms)
    pi = node("pi", {"edgefd.io/edgetpu.present": "true", "kubernetes.io/arch": "arm64"})
    x86 = node("x86", {"edgefd.io/edgetpu.present": "true", "kubernetes.io/arch": "amd64"})
    bare = node("x86b", {"kubernetes.io/arch": "amd64"})
    assert selects(terms, pi) and selects(terms, x86) and not selects(terms, bare)


@pytest.mark.parametrize(
    ("op", "values", "label", "holds"),
    [
        ("In", ("a", "b"), "b", True),
        ("NotIn", ("a",), None, True),
        ("NotIn", ("a",), "a", False),
        ("Exists", (), "", True),
        ("DoesNotExist", (), "x", False),
        ("Gt", ("3",), "4", True),
        ("Lt", ("3",), "4", False),
        ("Gt", ("3",), "four", False),
    ],
)
def test_requirement_operators(op: str, values: tuple, label: str | None, holds: bool) -> None:
    n = node("n", {} if label is None else {"k": label})
    assert Requirement("k", op, values).holds(n) is holds


def test_taints_and_tolerations() -> None:
    taint = {"key": "dedicated", "value": "cameras", "effect": "NoSchedule"}
    n = node("n", taints=[taint, {"key": "soft", "effect": "PreferNoSchedule"}])
    assert blocking_taints(pod("p"), n) == [taint]
    assert tolerates([{"key": "dedicated", "operator": "Exists"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)
    assert not tolerates([{"key": "dedicated", "value": "dogs"}], taint)
    assert not tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], taint)
    p = pod("p", tolerations=[{"key": "dedicated", "value": "cameras", "effect": "NoSchedule"}])
    assert blocking_taints(p, n) == []
    cordoned = node("c", unschedulable=True)
    assert [t["key"] for t in blocking_taints(pod("p"), cordoned)] == [
        "node.kubernetes.io/unschedulable"
    ]
