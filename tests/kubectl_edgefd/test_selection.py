"""Which nodes a pod's selectors let it onto, and what is said when none does."""

from __future__ import annotations

from edgefd.kubectl_edgefd.selection import asks_labels, selected, selector_cause

from .objects import node, pod

PI = node("pi", {"edgefd.io/edgetpu.present": "true", "kubernetes.io/arch": "arm64"})
X86 = node(
    "x86",
    {"feature.node.kubernetes.io/pci-0302_10de.present": "true", "kubernetes.io/arch": "amd64"},
)


def test_a_misspelt_key_is_named_with_the_one_meant() -> None:
    p = pod("p", nodeSelector={"edgefd.io/edgtpu.present": "true"})
    assert selected(p, [PI, X86]) == []
    cause = selector_cause(p, [PI, X86])
    assert cause is not None and cause.kind == "no-node-matches-selector"
    assert cause.text == (
        "No node has what its nodeSelector asks (edgefd.io/edgtpu.present=true): no node has a "
        "label edgefd.io/edgtpu.present (did you mean edgefd.io/edgetpu.present? pi has it)."
    )


def test_a_value_no_node_carries() -> None:
    cause = selector_cause(pod("p", nodeSelector={"edgefd.io/edgetpu.present": "True"}), [PI])
    assert cause is not None
    assert (
        "the nodes have edgefd.io/edgetpu.present=true (label values are case-sensitive"
        in cause.text
    )


def test_requirements_met_apart_but_never_together() -> None:
    p = pod("p", nodeSelector={"edgefd.io/edgetpu.present": "true", "kubernetes.io/arch": "amd64"})
    cause = selector_cause(p, [PI, X86])
    assert cause is not None
    assert (
        "no node has all of edgefd.io/edgetpu.present=true and kubernetes.io/arch=amd64"
        in cause.text
    )
    assert "(edgefd.io/edgetpu.present=true on pi; kubernetes.io/arch=amd64 on x86)" in cause.text


def test_a_selected_node_means_no_cause() -> None:
    p = pod("p", nodeSelector={"edgefd.io/edgetpu.present": "true"})
    assert selector_cause(p, [PI, X86]) is None
    assert [r.key for r in asks_labels(p)] == ["edgefd.io/edgetpu.present"]
    assert asks_labels(pod("p", nodeSelector={"kubernetes.io/arch": "arm64"})) == []


def test_affinity_terms_are_told_each() -> None:
    p = pod("p")
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "edgefd.io/myriadx.present", "operator": "Exists"}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "edgefd.io/hailo.count", "operator": "Gt", "values": ["0"]}
                        ]
                    },
                ]
            }
        }
    }
    cause = selector_cause(p, [PI, X86])
    assert cause is not None
    assert cause.text.startswith("No node has what its node affinity asks")
    assert "term 1: no node has a label edgefd.io/myriadx.present" in cause.text
    assert "term 2: no node has a label edgefd.io/hailo.count" in cause.text
