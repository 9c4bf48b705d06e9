"""Ownership trust (issue 11, item 1): the annotation is a claim anyone who may patch the Node
can edit, so the sink only ever acts on claims its own rules could have written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.core.featuresd import parse_text
from edgefd.core.labels import NamespacePolicy, check_key
from edgefd.feature_sink.desired import build_desired, check_producer_name
from edgefd.feature_sink.namespaces import SINK_POLICY, sink_policy
from edgefd.feature_sink.ownership import (
    ANNOTATION,
    MAX_ANNOTATION_BYTES,
    MalformedOwnership,
    Ownership,
    decode,
    encode,
    reconcile,
    vet,
)
from edgefd.feature_sink.patch import NodeView
from edgefd.feature_sink.sync import Rules, plan_node
from tests.feature_sink.jsonpatch import apply_patch

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
GRACE = timedelta(minutes=10)
F = "feature.node.kubernetes.io"


def desired_of(files: dict[str, str], policy: NamespacePolicy = SINK_POLICY):
    parsed = [parse_text(text, name, NOW) for name, text in sorted(files.items())]
    return build_desired(parsed, policy)


def annotation(producers: dict, missing: dict | None = None, **extra) -> str:
    doc = {"v": 1, "producers": producers, **({"missing": missing} if missing else {}), **extra}
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("not json", "not JSON"),
        ("[]", "no supported format version"),
        ('{"v":2,"producers":{}}', "no supported format version"),
        ('{"v":true,"producers":{}}', "no supported format version"),
        ('{"v":1.0,"producers":{}}', "no supported format version"),
        ('{"producers":{}}', "no supported format version"),
        ('{"v":1,"producers":{},"extra":{}}', "unknown member 'extra'"),
        ('{"v":1,"producers":{"a":["x/y"]},"producers":{}}', "appears twice"),
        ('{"v":1,"producers":{"a":["x/y"],"a":[]}}', "appears twice"),
        ('{"v":1,"producers":[]}', "must be objects"),
        ('{"v":1,"producers":{"a":"x/y"}}', "must be a list of strings"),
        ('{"v":1,"producers":{"a":[1]}}', "must be a list of strings"),
        ('{"v":1,"producers":{},"missing":{"a":"yesterday"}}', "bad time"),
        ('{"v":1,"producers":{},"missing":{"a":5}}', "bad time"),
        ('{"v":1,"producers":{"a":' + "[" * 100_000 + "]" * 100_000 + "}}", "nested too deeply"),
        (annotation({"a": ["x/" + "y" * MAX_ANNOTATION_BYTES]}), "more than any the sink writes"),
    ],
)
def test_a_claim_that_cannot_be_read_as_a_whole_is_untrusted(raw: str, why: str) -> None:
    with pytest.raises(MalformedOwnership, match=why):
        decode(raw)


def test_claims_outside_the_namespace_policy_are_dropped_never_acted_on():
    """The attack of issue 11: a hand-edited annotation makes the sink delete labels it never
    set. Each claim is dropped from the annotation (reported); the labels stay."""
    policy = sink_policy(denied=["team.example.com"])
    labels = {
        "kubernetes.io/hostname": "n1",
        "node-role.kubernetes.io/control-plane": "",
        "team.example.com/owner": "alice",
        f"{F}/usb": "true",
        f"{F}/mine": "1",
    }
    raw = annotation(
        {
            "usb-scan": [
                "kubernetes.io/hostname",
                "node-role.kubernetes.io/control-plane",
                "team.example.com/owner",
                f"{F}/usb",
            ],
            "pci-scan": [f"{F}/mine"],
        }
    )
    n = NodeView("n1", labels, {ANNOTATION: raw}, "5")
    # usb-scan's file exists and no longer lists any of them: a trusted claim would remove all
    plan = plan_node(
        n,
        desired_of({"usb-scan": "", "pci-scan": f"{F}/mine=1\n"}, policy),
        NOW,
        Rules(GRACE, policy),
    )
    after = apply_patch(
        {
            "metadata": {
                "labels": dict(labels),
                "annotations": {ANNOTATION: raw},
                "resourceVersion": "5",
            }
        },
        plan.write,
    )
    kept = after["metadata"]["labels"]
    assert kept == {k: v for k, v in labels.items() if k != f"{F}/usb"}  # only its own label
    own = decode(after["metadata"]["annotations"][ANNOTATION])
    assert own.producers == {"pci-scan": frozenset({f"{F}/mine"})}
    dropped = [p for p in plan.problems if p.reason == "OwnershipClaimDropped"]
    text = " ".join(p.message for p in dropped)
    assert len(dropped) == 3  # one per reason: reserved, never writable, denied
    assert "kubernetes.io/hostname" in text and "denied by configuration" in text
    assert "never writable" in text and "the labels are left as they are" in text


def _plan_after(labels: dict[str, str], raw: str, files: dict[str, str], policy=SINK_POLICY):
    n = NodeView("n1", labels, {ANNOTATION: raw}, "5")
    plan = plan_node(n, desired_of(files, policy), NOW, Rules(GRACE, policy))
    node = {"metadata": {"labels": dict(labels), "annotations": {ANNOTATION: raw}}}
    node["metadata"]["resourceVersion"] = "5"
    return plan, (apply_patch(node, plan.write) if plan.write else node)


def test_claims_on_keys_without_a_namespace_are_dropped():
    """Issue 22, item 4: `team` and `zone` are keys the sink can never write (it qualifies
    unprefixed feature-file keys) and the admission policy forbids: a claim on them is
    dropped, so neither a sync nor --prune removes them, and the sink's write carries no
    change the API server would refuse."""
    labels = {"team": "a", "zone": "b", f"{F}/usb": "true"}
    raw = annotation({"usb-scan": ["team", "zone", f"{F}/usb"]})
    plan, after = _plan_after(labels, raw, {"usb-scan": f"{F}/usb=true\n"})
    assert after["metadata"]["labels"] == labels
    own = decode(after["metadata"]["annotations"][ANNOTATION])
    assert own.producers == {"usb-scan": frozenset({f"{F}/usb"})}
    changed = {op["path"] for op in plan.write if op["op"] != "test"}
    assert changed == {"/metadata/annotations/edgefd.io~1owned-labels"}
    (dropped,) = [p for p in plan.problems if p.reason == "OwnershipClaimDropped"]
    assert "'team', 'zone'" in dropped.message and "no namespace" in dropped.message


def test_a_claim_on_another_namespace_is_inert_by_default():
    """Issue 22, item 13: `team.example.com/owner` claimed under usb-scan, whose file no
    longer lists it. edgefd's producers never write that namespace, so the claim is dropped
    and the user's label stays; only an operator who allows the namespace makes it edgefd's."""
    labels = {"team.example.com/owner": "alice", f"{F}/usb": "true"}
    raw = annotation({"usb-scan": ["team.example.com/owner", f"{F}/usb"]})
    files = {"usb-scan": f"{F}/usb=true\n"}
    plan, after = _plan_after(labels, raw, files)
    assert after["metadata"]["labels"] == labels
    assert any("--allow-namespace" in p.message for p in plan.problems)
    wide = sink_policy(allowed=["example.com"])
    _, after = _plan_after(labels, raw, files, wide)
    assert after["metadata"]["labels"] == {f"{F}/usb": "true"}


@pytest.mark.parametrize(
    ("producers", "why"),
    [
        ({"a/b": [f"{F}/x"]}, "no usable producer name"),
        ({"": [f"{F}/x"]}, "no usable producer name"),
        ({".tmp": [f"{F}/x"]}, "no usable producer name"),
        ({"a\nforged": [f"{F}/x"]}, "no usable producer name"),
        ({"x" * 256: [f"{F}/x"]}, "no usable producer name"),
        ({"a": ["not a key"]}, "key name contains ' '"),
        ({"a": ["a/b/c"]}, "more than one '/'"),
        ({"a": [f"{F}/x"], "b": [f"{F}/x"]}, "claimed by more than one producer"),
    ],
)
def test_entries_the_sink_would_never_write_are_dropped(producers: dict, why: str) -> None:
    clocks = {p: "2024-05-01T10:00:00Z" for p in producers}
    own, dropped = vet(decode(annotation(producers, clocks)), SINK_POLICY)
    assert own == Ownership()  # and the clocks of dropped producers go with them
    assert dropped and all(why in str(d) for d in dropped)
    assert all("\n" not in str(d) for d in dropped)


def test_a_clock_recorded_in_the_future_restarts_now():
    owned = Ownership({"usb": frozenset({f"{F}/a"})}, {"usb": NOW + timedelta(days=365)})
    out = reconcile({f"{F}/a": "1"}, owned, desired_of({}), NOW, GRACE)
    assert out.ownership.missing["usb"] == NOW
    assert out.next_expiry == NOW + GRACE


def test_producer_names_follow_the_file_name_rules():
    assert check_producer_name("usb-scan") is None
    assert check_producer_name("stdin") is None
    assert check_producer_name("ünïcode name") is None
    for bad in ("", ".x", "a/b", "a\x00b", "a\tb", "a\udcffb", "é" * 128):
        assert check_producer_name(bad) is not None, bad


def test_a_features_file_with_an_unusable_name_is_not_read():
    d = desired_of({"ok": f"{F}/a=1\n", "bad\x1bname": f"{F}/b=1\n"})
    assert d.labels == {f"{F}/a": "1"} and d.present == {"ok"}
    assert d.warnings == (
        "'bad\\x1bname': file name contains control characters or bytes "
        "that are not UTF-8; not read",
    )


# -- fuzz / properties ---------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
claim_keys = st.one_of(
    st.sampled_from(
        [
            f"{F}/a",
            f"{F}/b",
            "kubernetes.io/hostname",
            "node-role.kubernetes.io/x",
            "example.com/z",
            "team.example.com/owner",
            "team",
            "zone",
            "bad key",
            "a/b/c",
            "",
        ]
    ),
    st.text(max_size=30),
)
producer_names = st.one_of(st.sampled_from(["usb", "pci", "stdin", "", ".t", "a/b"]), st.text())


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=200), json_values.map(json.dumps)))
def test_fuzz_any_text_decodes_or_is_refused_cleanly(raw: str) -> None:
    try:
        decode(raw)
    except MalformedOwnership as e:
        assert "\n" not in str(e)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        producer_names, st.one_of(st.lists(claim_keys, max_size=5), json_values), max_size=4
    ),
    st.dictionaries(
        producer_names, st.one_of(st.just("2024-05-01T10:00:00Z"), json_values), max_size=2
    ),
    st.sampled_from(
        [
            SINK_POLICY,
            sink_policy(denied=["example.com"]),
            sink_policy(allowed=["example.com"]),
        ]
    ),
)
def test_fuzz_whatever_the_annotation_says_only_policy_keys_survive(producers, missing, policy):
    raw = json.dumps({"v": 1, "producers": producers, "missing": missing})
    try:
        own = decode(raw)
    except MalformedOwnership:
        return
    trusted, dropped = vet(own, policy)
    for producer, keys in trusted.producers.items():
        assert check_producer_name(producer) is None
        for k in keys:
            assert check_key(k) is None and policy.check(k) is None
            assert trusted.owner_of(k) == producer
            # a claim survives only on a key a producer's file can make the sink write
            assert desired_of({"p": f"{k}=1\n"}, policy).labels == {k: "1"}
    assert set(trusted.missing) <= set(trusted.producers)
    assert trusted.keys | {k for d in dropped for k in d.keys} >= own.keys - {
        k for p in own.producers for k in own.producers[p] if check_producer_name(p)
    }
    # what the sink writes back is read back the same, and trusted as it is
    text = encode(trusted)
    assert decode(text) == trusted and vet(decode(text), policy) == (trusted, ())
