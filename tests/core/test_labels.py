"""The shared label rules (Kubernetes validation) and namespace policy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.core.labels import (
    DEFAULT_POLICY,
    NamespacePolicy,
    Rejected,
    check_key,
    check_label,
    check_name,
    check_prefix,
    check_value,
    partition_labels,
    qualify,
    split_key,
)


@pytest.mark.parametrize(
    "name",
    ["a", "A", "0", "a-b", "a_b", "a.b", "Tesla-T4", "a" * 63, "cortex-a72", "x1.2_3-4"],
)
def test_valid_names(name: str) -> None:
    assert check_name(name) is None


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "is empty"),
        ("a" * 64, "64 characters long, the limit is 63"),
        ("-a", "must start and end with a letter or digit"),
        ("a-", "must start and end with a letter or digit"),
        ("_a", "must start and end"),
        ("a.", "must start and end"),
        ("4.9.140-tegra+", "contains '+'"),
        ("Tesla (PCIe)", "contains ' ' '(' ')'"),
        ("a/b", "contains '/'"),
        ("abc\n", "contains '\\n'"),  # `$` alone would accept a trailing newline
        ("ünï", "contains non-ASCII characters"),
    ],
)
def test_invalid_names_say_why(name: str, fragment: str) -> None:
    reason = check_name(name)
    assert reason is not None and fragment in reason


def test_value_rules() -> None:
    assert check_value("") is None  # empty values are valid
    assert check_value("true") is None
    assert check_value("4") is None
    assert "value" in (check_value("4.9.140-tegra+") or "")
    assert "limit is 63" in (check_value("v" * 64) or "")


@pytest.mark.parametrize(
    "prefix",
    ["example.com", "a", "feature.node.kubernetes.io", "a-b.c-d", "x" * 63 + "." + "y" * 63],
)
def test_valid_prefixes(prefix: str) -> None:
    assert check_prefix(prefix) is None


@pytest.mark.parametrize(
    ("prefix", "fragment"),
    [
        ("", "empty"),
        ("Example.com", "not a DNS subdomain"),
        ("example..com", "not a DNS subdomain"),
        ("-example.com", "not a DNS subdomain"),
        ("example.com-", "not a DNS subdomain"),
        ("exa_mple.com", "not a DNS subdomain"),
        ("example.com\n", "not a DNS subdomain"),
        ("a." * 127, "254 characters long, the limit is 253"),
    ],
)
def test_invalid_prefixes(prefix: str, fragment: str) -> None:
    reason = check_prefix(prefix)
    assert reason is not None and fragment in reason


def test_keys() -> None:
    assert check_key("example.com/gpu") is None
    assert check_key("gpu") is None
    assert "more than one '/'" in (check_key("a/b/c") or "")
    assert "prefix before '/' is empty" in (check_key("/gpu") or "")
    assert "name is empty" in (check_key("example.com/") or "")
    assert check_key("example.com/" + "n" * 64) is not None
    assert split_key("a.b/c") == ("a.b", "c")
    assert split_key("c") == ("", "c")
    assert qualify("c") == "feature.node.kubernetes.io/c"
    assert qualify("x.io/c") == "x.io/c"


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("feature.node.kubernetes.io/x", True),
        ("sub.feature.node.kubernetes.io/x", True),
        ("profile.node.kubernetes.io/x", True),
        ("example.com/x", True),
        ("beta.devicetree.org/x", True),
        ("x", True),  # unqualified: NFD qualifies it into feature.node.kubernetes.io
        ("kubernetes.io/x", False),
        ("topology.kubernetes.io/zone", False),
        ("k8s.io/x", False),
        ("foo.k8s.io/x", False),
        ("node-role.kubernetes.io/control-plane", False),
        ("node-restriction.kubernetes.io/x", False),
        ("a.node-role.kubernetes.io/x", False),
        ("notkubernetes.io/x", True),  # a suffix match must be on a dot boundary
    ],
)
def test_default_namespace_policy(key: str, allowed: bool) -> None:
    assert (DEFAULT_POLICY.check(key) is None) is allowed


def test_extra_allowed_and_denied() -> None:
    policy = NamespacePolicy.from_lists(
        allowed=[" Topology.Kubernetes.io ", ""], denied=["example.com"]
    )
    assert policy.check("topology.kubernetes.io/zone") is None
    reason = policy.check("gpu.example.com/x")
    assert reason is not None and "denied by configuration (example.com)" in reason
    # denials win, and node-role/node-restriction can never be allowed
    both = NamespacePolicy.from_lists(allowed=["example.com"], denied=["example.com"])
    assert both.check("example.com/x") is not None
    sneaky = NamespacePolicy.from_lists(
        allowed=["kubernetes.io", "node-role.kubernetes.io", "node-restriction.kubernetes.io"]
    )
    assert sneaky.check("kubernetes.io/x") is None
    assert "never writable" in (sneaky.check("node-role.kubernetes.io/worker") or "")
    assert "never writable" in (sneaky.check("node-restriction.kubernetes.io/x") or "")


def test_reserved_reason_points_to_the_fix() -> None:
    reason = DEFAULT_POLICY.check("kubernetes.io/x") or ""
    assert "reserved for Kubernetes" in reason and "feature.node.kubernetes.io/" in reason


def test_check_label_and_partition() -> None:
    assert check_label("example.com/a", "1") is None
    assert check_label("example.com/a", "bad value") is not None
    assert check_label("kubernetes.io/a", "1") is not None
    good, bad = partition_labels(
        {"example.com/ok": "1", "example.com/bad+": "1", "kubernetes.io/x": "y"}, source="f:3"
    )
    assert good == {"example.com/ok": "1"}
    assert [r.key for r in bad] == ["example.com/bad+", "kubernetes.io/x"]
    assert str(bad[0]) == (
        "f:3: label refused: key name contains '+'; only letters, digits, '-', '_' and '.' "
        "are allowed"
    )
    assert str(Rejected("k", "v", "why")) == "label refused: why"
    assert bad[0].detail().startswith("f:3: label 'example.com/bad+'='1' refused: ")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("root:$6$Sx9.q/a1$Zk8wQ", "true"),  # a shadow line: a key without '='
        ("example.com/token", "eyJhbGciOiJSUzI1NiIs.Ik/pZCI6+Ij"),  # an invalid value
        ("node-role.kubernetes.io/s3cr3t-n4me", ""),  # a valid key in a denied namespace
        ("s3cr3t.example.com/" + "n" * 70, "1"),  # too long
        ("S3CR3T.example.com/x", "1"),  # bad prefix
        ("a/s3cr3t/x", "1"),
        ("-s3cr3t", "1"),
        ("ok.example/x", "s3cr3t\nforged: log line"),
    ],
)
def test_reasons_never_quote_the_key_or_value(key: str, value: str) -> None:
    """A refused line may be a secret read through a misplaced file: reasons, and str() of a
    Rejected, say why without repeating it (issue 11, item 2)."""
    policy = NamespacePolicy.from_lists(denied=["ok.example"])
    reason = check_label(key, value, policy)
    assert reason is not None
    text = str(Rejected(key, value, reason, "secrets:3"))
    for fragment in ("s3cr3t", "$6$", "Zk8wQ", "eyJhbG", "forged", "root"):
        assert fragment not in text
    assert "\n" not in text


# "qz" appears in no reason, so finding a marked text in one means it was quoted
marked = st.text(max_size=80).map(lambda t: f"qz{t}zq")


@settings(max_examples=300, deadline=None)
@given(st.one_of(marked, st.builds(lambda a, b: f"{a}/{b}", marked, marked)), marked)
def test_no_reason_contains_the_text_it_checks(key: str, value: str) -> None:
    """Property: whatever the key and value, a reason quotes neither, nor holds a raw
    control character."""
    reason = check_label(key, value)
    if reason is None:
        return
    text = str(Rejected(key, value, reason, "f:1"))
    assert "qz" not in text
    assert all(c.isprintable() for c in text)
