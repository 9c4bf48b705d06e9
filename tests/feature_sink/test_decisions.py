"""feature-sink's pure decisions: desired state, ownership rules, the guarded JSON Patch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.core.featuresd import parse_text
from edgefd.core.labels import NamespacePolicy
from edgefd.feature_sink.desired import build_desired, read_directory, read_stream
from edgefd.feature_sink.namespaces import SINK_POLICY, sink_policy
from edgefd.feature_sink.ownership import (
    ANNOTATION,
    MalformedOwnership,
    Ownership,
    decode,
    encode,
    reconcile,
    vet,
)
from edgefd.feature_sink.patch import NodeView, escape_pointer
from edgefd.feature_sink.sync import Rules, plan_node
from tests.feature_sink.jsonpatch import apply_patch

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
GRACE = timedelta(minutes=10)
RULES = Rules(GRACE)
F = "feature.node.kubernetes.io"


def desired_of(files: dict[str, str], policy: NamespacePolicy | None = None):
    parsed = [parse_text(text, name, NOW) for name, text in sorted(files.items())]
    return build_desired(parsed, policy or SINK_POLICY)


def node(labels=None, owned: Ownership | None = None, rv="7", extra_ann=None) -> NodeView:
    ann = dict(extra_ann or {})
    if owned is not None:
        value = encode(owned)
        if value is not None:
            ann[ANNOTATION] = value
    return NodeView("n1", labels, ann, rv, "uid-1")


def apply(n: NodeView, ops) -> NodeView:
    doc = {
        "metadata": {
            "resourceVersion": n.resource_version,
            **({"labels": n.labels} if n.labels is not None else {}),
            **({"annotations": n.annotations} if n.annotations is not None else {}),
        }
    }
    out = apply_patch(doc, ops)["metadata"]
    return NodeView(n.name, out.get("labels"), out.get("annotations"), "8", n.uid)


# -- desired -------------------------------------------------------------------------------


def test_desired_later_file_wins_and_owns_the_key():
    d = desired_of({"a-usb": f"{F}/x=1\n{F}/a=yes\n", "b-pci": f"{F}/x=2\n"})
    assert d.producers == {"a-usb": {f"{F}/a": "yes"}, "b-pci": {f"{F}/x": "2"}}
    assert d.labels == {f"{F}/a": "yes", f"{F}/x": "2"}
    assert any("overrides" in w for w in d.warnings)


def test_desired_rejects_invalid_and_privileged_with_file_and_line():
    d = desired_of(
        {
            "dt": "# header\nbeta.devicetree.org/nvidia-p3449-0000-b00+p3448=1\n"
            "node-role.kubernetes.io/control-plane=\n"
            f"{F}/kernel=4.9.140-tegra+\n"
            "kubernetes.io/arch=arm64\n"
            "example.com/other=1\n"
            "edgefd.io/ok=1\n"
        }
    )
    assert d.labels == {"edgefd.io/ok": "1"}
    by_key = {r.key: r for r in d.rejected}
    assert by_key["beta.devicetree.org/nvidia-p3449-0000-b00+p3448"].source == "dt:2"
    assert by_key["node-role.kubernetes.io/control-plane"].source == "dt:3"
    assert "never writable" in by_key["node-role.kubernetes.io/control-plane"].reason
    assert "'+'" in by_key[f"{F}/kernel"].reason
    assert "reserved" in by_key["kubernetes.io/arch"].reason
    assert "--allow-namespace" in by_key["example.com/other"].reason


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


def test_desired_skipped_file_is_not_present(tmp_path: Path):
    (tmp_path / "big").write_bytes(b"a/b=1\n" * 20000)
    (tmp_path / "ok").write_text(f"{F}/ok=1\n")
    (tmp_path / ".ok.tmp").write_text(f"{F}/tmp=1\n")
    d = read_directory(tmp_path)
    assert d.present == {"ok"}
    assert d.labels == {f"{F}/ok": "1"}
    assert any("65536" in w for w in d.warnings)


def test_stream_is_one_non_authoritative_producer():
    d = read_stream(f"{F}/usb-fe_1a6e_089a.present=true\n".encode())
    assert d.producers == {"stdin": {f"{F}/usb-fe_1a6e_089a.present": "true"}}
    assert not d.authoritative


# -- ownership annotation ------------------------------------------------------------------


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


# -- patch ---------------------------------------------------------------------------------


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


def test_untrusted_annotation_blocks_every_write_and_says_why():
    """A claim the sink cannot read as a whole is not guessed at, and not overwritten either:
    it may come from a newer sink, or be the evidence of tampering (README, ownership trust)."""
    n = NodeView("n1", {f"{F}/a": "1", f"{F}/b": "old"}, {ANNOTATION: "garbage"}, "1")
    plan = plan_node(n, desired_of({"usb": f"{F}/a=1\n{F}/b=new\n{F}/c=1\n"}), NOW, RULES)
    assert plan.blocked and "not JSON" in plan.blocked and "writes nothing" in plan.blocked
    assert plan.write == [] and not plan.needed and plan.changes == []
    assert [p.reason for p in plan.problems] == ["OwnershipUntrusted"]


# -- properties ----------------------------------------------------------------------------

keys = st.sampled_from([f"{F}/k{i}" for i in range(8)] + ["x.example/k", "kubernetes.io/os"])
values = st.sampled_from(["1", "2", "true", ""])
producers = st.sampled_from(["usb", "pci", "dt"])


@st.composite
def scenarios(draw):
    node_labels = draw(st.dictionaries(keys, values, max_size=8))
    # claims as a hand edit or a forgery may leave them: keys of two producers, refused keys
    owned_map = draw(st.dictionaries(producers, st.frozensets(keys, max_size=4), max_size=3))
    files = draw(st.dictionaries(producers, st.dictionaries(keys, values, max_size=5), max_size=3))
    texts = {p: "".join(f"{k}={v}\n" for k, v in labels.items()) for p, labels in files.items()}
    return node_labels, Ownership({p: k for p, k in owned_map.items() if k}), texts


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.integers(min_value=0, max_value=30))
def test_patch_realises_the_outcome_unowned_labels_survive_and_second_sync_is_quiet(s, minutes):
    node_labels, owned, texts = s
    d = desired_of(texts)
    n = node(node_labels, owned)
    now = NOW + timedelta(minutes=minutes)
    plan = plan_node(n, d, now, RULES)
    after = apply(n, plan.write) if plan.write else n
    assert (after.labels or {}) == plan.outcome.labels
    trusted, _ = vet(owned, RULES.policy)
    # labels the sink did not own (or only by a claim it refuses) are never changed or removed
    for k, v in node_labels.items():
        if k not in trusted.keys:
            assert (after.labels or {}).get(k) == v
    # and it only ever touches keys its namespace policy lets a producer write
    for c in plan.changes:
        assert RULES.policy.check(c.key) is None, c
    # owned labels end up either desired, kept for grace, or gone
    for k in trusted.keys:
        if k in (after.labels or {}):
            assert k in d.labels or k in plan.outcome.kept_for_grace
    # what the sink applied is valid and desired
    for k in plan.outcome.ownership.keys:
        assert k in d.labels or k in plan.outcome.kept_for_grace
    # converged: a second sync (a restart, a resync) writes nothing
    assert plan_node(after, d, now, RULES).write == []


def test_unqualified_keys_get_nfd_namespace_before_merge():
    d = desired_of(
        {"a": "gpu=1\n", "b": f"{F}/gpu=2\nvendor.example/x\n"},
        sink_policy(allowed=["vendor.example"]),
    )
    assert d.labels == {f"{F}/gpu": "2", "vendor.example/x": "true"}
    assert d.producers["a"] == {}


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


def test_skipped_and_garbage_files_are_reported_not_silent(tmp_path: Path, caplog):
    """A file skipped whole (too big) or a line refused (not UTF-8) is logged once, counted."""
    import logging

    from edgefd.feature_sink.metrics import SinkMetrics
    from edgefd.feature_sink.report import Reporter, desired_problems

    (tmp_path / "huge").write_bytes(b"x" * 70000)
    (tmp_path / "binary").write_bytes(b"edgefd.io/k=\xff\xfe\nedgefd.io/good=1\n")
    (tmp_path / "ok").write_text(f"{F}/ok=1\n# +bogus-directive\n")
    desired = read_directory(tmp_path)
    metrics = SinkMetrics()
    reporter = Reporter(metrics, events=False)
    with caplog.at_level(logging.WARNING):
        reporter.observe(desired_problems(desired))
        reporter.observe(desired_problems(desired))  # a resync does not repeat the log lines
    text = caplog.text
    assert "huge: 70000 bytes, over the 65536-byte limit" in text
    assert "binary:1: not UTF-8 text; line skipped" in text
    assert "ok:2: unknown directive (known: expiry-time=, no-label, no-feature)" in text
    assert text.count("huge: 70000 bytes") == 1
    assert metrics.value("edgefd_sink_feature_file_problems") == 3
    assert desired.labels == {f"{F}/ok": "1", "edgefd.io/good": "1"}


def test_each_problem_is_logged_once_across_syncs(caplog):
    """A sync reports the files' problems before reading the object, then everything: a
    conflict (known only after the read) must not be logged again at every resync."""
    import logging

    from edgefd.feature_sink.metrics import SinkMetrics
    from edgefd.feature_sink.ownership import Conflict
    from edgefd.feature_sink.report import Reporter, conflict_problems, desired_problems

    d = desired_of({"usb": f"{F}/a=1\nbad key\n"})
    files = desired_problems(d)
    conflicts = conflict_problems([Conflict(f"{F}/a", "1", "2", "usb")])
    metrics = SinkMetrics()
    reporter = Reporter(metrics, events=False)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # three syncs
            reporter.observe(files, complete=False)
            reporter.observe(files + conflicts)
    assert caplog.text.count("not applied: the node has '2'") == 1
    assert caplog.text.count("usb:2: label refused") == 1
    assert metrics.value("edgefd_sink_label_conflicts") == 1
    reporter.observe(files)  # the conflict went away: forgotten, so a recurrence is reported
    with caplog.at_level(logging.WARNING):
        reporter.observe(files + conflicts)
    assert caplog.text.count("not applied: the node has '2'") == 2
