"""The shared label rules (Kubernetes validation) and namespace policy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.core.labels import (
    NamespacePolicy,
    Rejected,
    check_key,
    check_label,
    check_name,
    check_prefix,
    check_value,
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
    "namespace",
    ["kubernetes.io", "topology.kubernetes.io", "node-role.kubernetes.io", "k8s.io", "x.k8s.io"],
)
def test_kubernetes_namespaces_cannot_be_allowed(namespace: str) -> None:
    """The admission policy refuses them whatever the sink is told, and one refused label
    fails the whole patch: an allowance of one is a usage error, not a 403 on every sync."""
    with pytest.raises(ValueError, match=f"--allow-namespace {namespace}: namespace"):
        NamespacePolicy.from_lists((), allowed=[namespace])


@pytest.mark.parametrize("entry", ["Bad_Name", "a..b", "-a.com", "a/b", "x" * 254])
def test_a_namespace_option_must_be_a_dns_subdomain(entry: str) -> None:
    with pytest.raises(ValueError, match=r"is not a DNS subdomain|characters long"):
        NamespacePolicy.from_lists((), allowed=[entry])
    with pytest.raises(ValueError, match="--deny-namespace"):
        NamespacePolicy.from_lists((), denied=[entry])


def test_check_label_and_what_a_refusal_says() -> None:
    assert check_label("edgefd.io/a", "1") is None
    assert check_label("edgefd.io/a", "bad value") is not None
    assert check_label("kubernetes.io/a", "1") is not None
    assert check_label("example.com/a", "1") is None  # a producer may emit any open namespace
    narrow = NamespacePolicy(("edgefd.io",))
    assert check_label("example.com/a", "1", narrow) is not None  # outside what is allowed
    refused = Rejected("edgefd.io/bad+", "1", check_label("edgefd.io/bad+", "1") or "", "f:3")
    assert str(refused) == (
        "f:3: label refused: key name contains '+'; only letters, digits, '-', '_' and '.' "
        "are allowed"
    )
    assert str(Rejected("k", "v", "why")) == "label refused: why"
    assert refused.detail().startswith("f:3: label 'edgefd.io/bad+'='1' refused: ")


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
    policy = NamespacePolicy.from_lists(("edgefd.io",), denied=["ok.example"])
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
