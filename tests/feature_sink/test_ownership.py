"""Which labels the sink owns (ownership.py): the annotation that records it (encode/decode),
what a claim in it is worth (issue 11, item 1: anyone who may patch the Node can edit it, so
an annotation that cannot be read as a whole is untrusted and blocks every write, and a claim
the sink's own rules could never have written is dropped, never acted on: `vet`), and the
rules deciding the node's target labels (`reconcile`: adopt, conflict, remove, the removal
grace, repair). Pure units and properties first (the planner's patch applied with the JSON
Patch test applier); then the trust rules held by the running sink against the real
kube-apiserver, at a --once and when its watch wakes it."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.core.labels import check_key
from edgefd.feature_sink.desired import check_producer_name, read_stream
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
from tests.feature_sink.peer import QUIET, event_messages, run_once, run_sink, wait_for, write
from tests.feature_sink.states import GRACE, NOW, F, desired_of


def annotation(producers: dict, missing: dict | None = None, **extra) -> str:
    doc = {"v": 1, "producers": producers, **({"missing": missing} if missing else {}), **extra}
    return json.dumps(doc)


# -- the annotation ------------------------------------------------------------------------


def test_annotation_roundtrip_is_compact_and_sorted():
    own = Ownership(
        {"usb": frozenset({f"{F}/b", f"{F}/a"}), "pci": frozenset({f"{F}/c"})},
        {"usb": NOW},
    )
    text = encode(own)
    assert text is not None and " " not in text
    doc = json.loads(text)
    assert list(doc["producers"]) == ["pci", "usb"]
    assert doc["producers"]["usb"] == [f"{F}/a", f"{F}/b"]
    assert doc["missing"] == {"usb": "2024-05-01T12:00:00Z"}
    assert decode(text) == own
    assert encode(Ownership()) is None


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        '{"v":2,"producers":{}}',
        '{"v":1,"producers":{"a":"x"}}',
        '{"v":1,"producers":{},"missing":{"a":"yesterday"}}',
    ],
)
def test_malformed_annotation_is_refused_not_guessed(raw):
    with pytest.raises(MalformedOwnership):
        decode(raw)


# -- trust: a claim that cannot be read as a whole, claims the sink would never write -------


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


# -- reconcile rules -----------------------------------------------------------------------


def test_new_labels_are_added_and_owned_unowned_untouched():
    d = desired_of({"usb": f"{F}/a=1\n"})
    out = reconcile({"kubernetes.io/hostname": "n1"}, Ownership(), d, NOW, GRACE)
    assert out.labels == {"kubernetes.io/hostname": "n1", f"{F}/a": "1"}
    assert out.ownership.producers == {"usb": {f"{F}/a"}}


def test_unowned_label_same_value_adopted_other_value_conflict():
    d = desired_of({"usb": f"{F}/a=1\n{F}/b=1\n"})
    out = reconcile({f"{F}/a": "1", f"{F}/b": "manual"}, Ownership(), d, NOW, GRACE)
    assert out.labels == {f"{F}/a": "1", f"{F}/b": "manual"}
    assert out.ownership.producers == {"usb": {f"{F}/a"}}
    assert [(c.key, c.wanted, c.found) for c in out.conflicts] == [(f"{F}/b", "1", "manual")]


def test_owned_label_dropped_by_its_file_is_removed():
    owned = Ownership({"usb": frozenset({f"{F}/a", f"{F}/b"})})
    d = desired_of({"usb": f"{F}/a=1\n"})
    out = reconcile({f"{F}/a": "1", f"{F}/b": "1", "x/y": "z"}, owned, d, NOW, GRACE)
    assert out.labels == {f"{F}/a": "1", "x/y": "z"}


def test_vanished_file_keeps_labels_for_grace_then_removes():
    owned = Ownership({"usb": frozenset({f"{F}/a"}), "pci": frozenset({f"{F}/p"})})
    labels = {f"{F}/a": "1", f"{F}/p": "1"}
    d = desired_of({"pci": f"{F}/p=1\n"})
    out = reconcile(labels, owned, d, NOW, GRACE)
    assert out.labels == labels
    assert out.ownership.missing == {"usb": NOW}
    assert out.kept_for_grace == {f"{F}/a"}
    assert out.next_expiry == NOW + GRACE
    # the clock is the one recorded, not restarted by a later sync (or a restarted sink)
    later = reconcile(labels, decode(encode(out.ownership)), d, NOW + GRACE / 2, GRACE)
    assert later.ownership.missing == {"usb": NOW}
    expired = reconcile(labels, out.ownership, d, NOW + GRACE, GRACE)
    assert expired.labels == {f"{F}/p": "1"}
    assert "usb" not in expired.ownership.producers and not expired.ownership.missing


def test_file_coming_back_stops_the_clock():
    owned = Ownership({"usb": frozenset({f"{F}/a"})}, {"usb": NOW})
    d = desired_of({"usb": f"{F}/a=1\n"})
    out = reconcile({f"{F}/a": "1"}, owned, d, NOW + GRACE * 2, GRACE)
    assert out.labels == {f"{F}/a": "1"}
    assert out.ownership == Ownership({"usb": frozenset({f"{F}/a"})})


def test_hand_edits_of_owned_labels_are_repaired():
    owned = Ownership({"usb": frozenset({f"{F}/a", f"{F}/b"})})
    d = desired_of({"usb": f"{F}/a=1\n{F}/b=2\n"})
    out = reconcile({f"{F}/a": "edited"}, owned, d, NOW, GRACE)
    assert out.labels == {f"{F}/a": "1", f"{F}/b": "2"}


def test_label_moving_between_producers_is_not_removed():
    owned = Ownership({"a": frozenset({f"{F}/x"})})
    d = desired_of({"a": "", "b": f"{F}/x=1\n"})
    out = reconcile({f"{F}/x": "1"}, owned, d, NOW, GRACE)
    assert out.labels == {f"{F}/x": "1"}
    assert out.ownership.producers == {"b": {f"{F}/x"}}


def test_stream_never_removes_other_producers_labels():
    owned = Ownership({"usb": frozenset({f"{F}/a"})})
    d = read_stream(f"{F}/s=1\n".encode())
    out = reconcile({f"{F}/a": "1"}, owned, d, NOW, GRACE)
    assert out.labels == {f"{F}/a": "1", f"{F}/s": "1"}
    assert out.ownership.producers == {"usb": {f"{F}/a"}, "stdin": {f"{F}/s"}}
    assert not out.ownership.missing


def test_grace_clock_never_starts_early_after_annotation_round_trip():
    owned = Ownership({"usb": frozenset({f"{F}/a"})})
    noticed = NOW + timedelta(microseconds=700_000)
    out = reconcile({f"{F}/a": "1"}, owned, desired_of({}), noticed, GRACE)
    stored = decode(encode(out.ownership)).missing["usb"]
    assert stored >= noticed and stored - noticed < timedelta(seconds=1)
    assert out.ownership.missing["usb"] == stored  # memory and annotation agree
    just_before = noticed + GRACE - timedelta(milliseconds=1)
    assert reconcile(
        {f"{F}/a": "1"}, decode(encode(out.ownership)), desired_of({}), just_before, GRACE
    ).labels == {f"{F}/a": "1"}


def test_a_clock_recorded_in_the_future_restarts_now():
    owned = Ownership({"usb": frozenset({f"{F}/a"})}, {"usb": NOW + timedelta(days=365)})
    out = reconcile({f"{F}/a": "1"}, owned, desired_of({}), NOW, GRACE)
    assert out.ownership.missing["usb"] == NOW
    assert out.next_expiry == NOW + GRACE


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


# -- the same trust rules held by the running sink, against the real API server -------------


@pytest.mark.realpeer
def test_forged_ownership_claims_are_dropped_never_acted_on(cluster, fdir):
    theirs = {"node-role.kubernetes.io/control-plane": "", "team.example.com/owner": "alice"}
    node = cluster.new_node(theirs)
    forged = json.dumps(
        {"v": 1, "producers": {"usb-scan": ["kubernetes.io/hostname", *theirs, f"{F}/mine"]}}
    )
    cluster.core.patch_node(
        node, {"metadata": {"annotations": {ANNOTATION: forged}, "labels": {f"{F}/mine": "1"}}}
    )
    write(fdir, "usb-scan", {f"{F}/usb": "true"})  # lists none of the claimed keys
    p = run_once(cluster, node, fdir, "--deny-namespace", "team.example.com")
    assert p.returncode == 0, p.stderr
    labels = cluster.labels(node)
    assert labels["kubernetes.io/hostname"] == node
    assert {k: labels[k] for k in theirs} == theirs
    assert f"{F}/mine" not in labels and labels[f"{F}/usb"] == "true"  # its own: removed, added
    assert cluster.ownership(node).producers == {"usb-scan": {f"{F}/usb"}}
    dropped = " ".join(event_messages(cluster, node, "OwnershipClaimDropped"))
    assert "kubernetes.io/hostname" in dropped and "never writable" in dropped
    assert "denied by configuration (team.example.com)" in dropped


@pytest.mark.realpeer
def test_an_untrusted_annotation_blocks_every_write_until_removed(cluster, fdir):
    node = cluster.new_node({f"{F}/usb": "old"})
    cluster.core.patch_node(
        node, {"metadata": {"annotations": {ANNOTATION: '{"v":2,"producers":{}}'}}}
    )
    write(fdir, "usb-scan", {f"{F}/usb": "new", f"{F}/pci": "true"})
    rv = cluster.node(node).metadata.resource_version
    p = run_once(cluster, node, fdir)
    assert p.returncode == 1, p.stderr
    assert b"no supported format version" in p.stderr and b"writes nothing" in p.stderr
    assert cluster.node(node).metadata.resource_version == rv  # not even the annotation
    assert event_messages(cluster, node, "OwnershipUntrusted")
    dry = run_sink(
        "--dry-run",
        "--kubeconfig",
        cluster.kubeconfig,
        "--node-name",
        node,
        "--features-dir",
        str(fdir),
    )
    assert dry.returncode == 1 and dry.stdout == b""
    # a person removes it: the sink starts over, adopting nothing it would overwrite
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: None}}})
    assert run_once(cluster, node, fdir).returncode == 0
    labels = cluster.labels(node)
    assert labels[f"{F}/usb"] == "old" and labels[f"{F}/pci"] == "true"


@pytest.mark.realpeer
def test_the_trust_rules_hold_when_the_watch_wakes_the_sink(cluster, sinks, fdir):
    """A tampered annotation seen through the watch is judged as at any sync: a forged claim on
    a label the policy refuses is dropped (the label kept), an unreadable one blocks every
    write until a person removes it."""
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    s = sinks(node, fdir, *QUIET)
    wait_for(lambda: f"{F}/usb" in cluster.ownership(node).keys, what="owned")
    wait_for(lambda: s.watching(), what="the watch is open")
    forged = json.dumps(
        {"v": 1, "producers": {"usb-scan": [f"{F}/usb", "kubernetes.io/hostname"]}},
        separators=(",", ":"),
    )
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: forged}}})
    wait_for(lambda: cluster.ownership(node).keys == {f"{F}/usb"}, 2, "the forged claim dropped")
    assert cluster.labels(node)["kubernetes.io/hostname"] == node  # left exactly as it was
    cluster.core.patch_node(
        node, {"metadata": {"annotations": {ANNOTATION: "{garbage"}, "labels": {f"{F}/usb": None}}}
    )
    wait_for(
        lambda: s.metric("edgefd_sink_sync_failures_total", reason="untrusted") >= 1,
        what="untrusted",
    )
    rv = cluster.node(node).metadata.resource_version
    time.sleep(1.5)
    assert cluster.node(node).metadata.resource_version == rv  # nothing written, not even adds
    assert f"{F}/usb" not in cluster.labels(node)
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: None}}})
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true", 5, "back once removed")
