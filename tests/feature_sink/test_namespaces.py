"""The label namespaces the sink writes (namespaces.py): only edgefd's own producers' by
default, so a label in anyone else's namespace is never the sink's to write; --allow-namespace
widens that (with subdomains), --deny-namespace narrows it and wins. Seen as the desired state
a features.d yields under each policy, and as the policy answers for a key, within what a
producer may emit at all, with reasons that point to the fix. What may never be allowed
(Kubernetes' namespaces, what is not a DNS subdomain) is core's rule, tested in
tests/core/test_labels.py."""

from __future__ import annotations

import pytest

from edgefd.core.labels import PRODUCER_POLICY
from edgefd.feature_sink.namespaces import SINK_POLICY, sink_policy
from tests.feature_sink.states import desired_of


def test_desired_namespace_policy_options():
    files = {"p": "vendor.example/a=1\nother.example/b=2\nsub.vendor.example/c=3\n"}
    assert desired_of(files).labels == {}  # nobody's but edgefd's by default
    allow = sink_policy(allowed=["vendor.example"])
    assert desired_of(files, allow).labels == {"vendor.example/a": "1", "sub.vendor.example/c": "3"}
    both = sink_policy(allowed=["vendor.example", "other.example"], denied=["sub.vendor.example"])
    assert desired_of(files, both).labels == {"vendor.example/a": "1", "other.example/b": "2"}
    # NFD's profile namespace is not edgefd's, but may be allowed
    profile = {"p": "profile.node.kubernetes.io/edge=1\n"}
    assert desired_of(profile).labels == {}
    allow = sink_policy(allowed=["profile.node.kubernetes.io"])
    assert desired_of(profile, allow).labels == {"profile.node.kubernetes.io/edge": "1"}


@pytest.mark.parametrize(
    ("key", "sink", "producer"),
    [
        ("feature.node.kubernetes.io/x", True, True),
        ("sub.feature.node.kubernetes.io/x", True, True),
        ("edgefd.io/edgetpu.present", True, True),
        ("dra.edgefd.io/x", True, True),
        ("beta.devicetree.org/x", True, True),
        ("profile.node.kubernetes.io/x", False, True),  # NFD's, not edgefd's: widen for it
        ("example.com/x", False, True),
        ("team.example.com/owner", False, True),
        ("notedgefd.io/x", False, True),  # a suffix match must be on a dot boundary
        ("edgefd.io.evil.com/x", False, True),
        ("x", False, False),  # no namespace: the sink qualifies unprefixed feature-file keys
        ("team", False, False),
        ("kubernetes.io/x", False, False),
        ("topology.kubernetes.io/zone", False, False),
        ("k8s.io/x", False, False),
        ("foo.k8s.io/x", False, False),
        ("node-role.kubernetes.io/control-plane", False, False),
        ("node-restriction.kubernetes.io/x", False, False),
        ("a.node-role.kubernetes.io/x", False, False),
        ("notkubernetes.io/x", False, True),
    ],
)
def test_default_and_producer_namespace_policies(key: str, sink: bool, producer: bool) -> None:
    """The sink writes edgefd's own namespaces only; a producer may emit any namespace
    Kubernetes leaves open; neither a key without a namespace."""
    assert (SINK_POLICY.check(key) is None) is sink
    assert (PRODUCER_POLICY.check(key) is None) is producer


def test_the_sink_policy_is_within_the_producer_policy() -> None:
    """Whatever the operator allows, the sink never writes what no producer may."""
    keys = ["a/x", "a.b/x", "edgefd.io/x", "kubernetes.io/x", "sub.k8s.io/x", "x"]
    wide = sink_policy(allowed=["a", "b", "profile.node.kubernetes.io"])
    for key in keys:
        if wide.check(key) is None:
            assert PRODUCER_POLICY.check(key) is None, key


def test_extra_allowed_and_denied() -> None:
    policy = sink_policy(
        allowed=[" Vendor.Example ", "", "profile.node.kubernetes.io"], denied=["example.com"]
    )
    assert policy.check("vendor.example/x") is None
    assert policy.check("gpu.vendor.example/x") is None
    assert policy.check("profile.node.kubernetes.io/edge") is None
    assert policy.check("edgefd.io/x") is None  # edgefd's own stay
    assert policy.check("other.example/x") is not None
    reason = policy.check("gpu.example.com/x")
    assert reason is not None and "denied by configuration (example.com)" in reason
    # denials win, also over edgefd's own namespaces
    both = sink_policy(allowed=["example.com"], denied=["example.com", "edgefd.io"])
    assert both.check("example.com/x") is not None
    assert both.check("edgefd.io/x") is not None


def test_refusal_reasons_point_to_the_fix() -> None:
    reason = SINK_POLICY.check("kubernetes.io/x") or ""
    assert "reserved for Kubernetes" in reason and "feature.node.kubernetes.io/" in reason
    reason = SINK_POLICY.check("example.com/x") or ""
    assert "--allow-namespace" in reason and "edgefd.io" in reason
    reason = SINK_POLICY.check("team") or ""
    assert "no namespace" in reason
