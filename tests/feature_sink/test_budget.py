"""The publishing budget (budget.py; issue 11, item 6): a producer that does not fit is refused
whole, with a reason, and every other producer is still applied; labels already applied are
never pushed out by a new file; what is published never exceeds the budget. Pure units and a
property (the planner's patch applied with the JSON Patch test applier); then against the real
kube-apiserver, whose 256 KiB annotation limit the budget keeps the sink under."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.feature_sink.budget import fit
from edgefd.feature_sink.ownership import ANNOTATION, Ownership, decode, encode
from edgefd.feature_sink.patch import NodeView
from edgefd.feature_sink.sync import Rules, plan_node
from tests.feature_sink.jsonpatch import apply_patch
from tests.feature_sink.peer import event_messages, run_once, write
from tests.feature_sink.states import GRACE, NOW, F, desired_of, published_size


def lines(prefix: str, n: int, value: str = "1") -> str:
    return "".join(f"{F}/{prefix}-{i:05d}={value}\n" for i in range(n))


def apply(n: NodeView, ops) -> NodeView:
    doc = {"metadata": {"labels": n.labels, "annotations": n.annotations, "resourceVersion": "1"}}
    md = apply_patch(doc, ops)["metadata"] if ops else doc["metadata"]
    return NodeView(n.name, md["labels"], md["annotations"], "1")


def test_a_producer_that_does_not_fit_is_refused_whole_the_others_are_applied():
    files = {"a-big": lines("a", 400), "b-big": lines("b", 400), "usb-scan": lines("u", 3)}
    n = NodeView("n1", {}, {}, "1")
    plan = plan_node(n, desired_of(files), NOW, Rules(GRACE, budget=40_000))
    after = apply(n, plan.write)
    labels = after.labels or {}
    assert {k for k in labels if "/u-" in k} == {f"{F}/u-0000{i}" for i in range(3)}
    applied = {p for p in ("a", "b") if any(f"/{p}-" in k for k in labels)}
    assert len(applied) == 1  # one 400-label file fits, the second does not
    (over,) = [p for p in plan.problems if p.reason == "LabelBudgetExceeded"]
    refused = "b-big" if applied == {"a"} else "a-big"
    assert over.message.startswith(f"{refused}: its 400 labels need ")
    assert "40000-byte budget (--label-budget)" in over.message
    own = decode(after.annotations[ANNOTATION])
    assert published_size(labels, own) <= 40_000
    assert refused not in own.producers


def test_labels_already_applied_are_not_pushed_out_by_a_new_file():
    first = plan_node(
        NodeView("n1", {}, {}, "1"),
        desired_of({"z-old": lines("z", 300)}),
        NOW,
        Rules(GRACE, budget=40_000),
    )
    n = apply(NodeView("n1", {}, {}, "1"), first.write)
    files = {"a-new": lines("a", 300), "z-old": lines("z", 300)}
    plan = plan_node(n, desired_of(files), NOW, Rules(GRACE, budget=40_000))
    assert [p.message.split(":")[0] for p in plan.problems] == ["a-new"]
    assert not [c for c in plan.changes if c.op != "add" or "/z-" in c.key]


def test_a_refused_producer_keeps_what_it_has_for_the_grace_period():
    rules = Rules(GRACE, budget=40_000)
    n = apply(
        NodeView("n1", {}, {}, "1"),
        plan_node(
            NodeView("n1", {}, {}, "1"), desired_of({"usb": lines("u", 10)}), NOW, rules
        ).write,
    )
    grown = {"usb": lines("u", 2000)}
    plan = plan_node(n, desired_of(grown), NOW, rules)
    after = apply(n, plan.write)
    assert after.labels == n.labels  # nothing of the grown file, nothing removed
    assert decode(after.annotations[ANNOTATION]).missing == {"usb": NOW}
    later = plan_node(after, desired_of(grown), NOW + GRACE, rules)
    assert not apply(after, later.write).labels  # like any unreadable file, after the grace


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "stdin"]),
        st.tuples(st.integers(0, 120), st.integers(1, 40)),
        max_size=5,
    ),
    st.integers(2_000, 20_000),
)
def test_what_is_published_never_exceeds_the_budget(sizes, budget):
    """Property: from any state that was within the budget, a sync stays within it."""
    rules = Rules(GRACE, budget=budget)
    files = {p: lines(p, n, "v" * width) for p, (n, width) in sizes.items()}
    n = NodeView("n1", {}, {}, "1")
    for step in range(3):  # fresh, then changes: files shrink, grow and vanish
        d = desired_of(files)
        n = apply(n, plan_node(n, d, NOW + timedelta(seconds=step), rules).write)
        own = decode((n.annotations or {}).get(ANNOTATION))
        assert published_size(n.labels or {}, own) <= budget
        files = {
            p: t[: len(t) // 2] if step else t + t.replace("-", "-x")
            for p, t in list(files.items())[step:]
        }


def test_fit_is_a_no_op_within_the_budget():
    d = desired_of({"a": lines("a", 3)})
    assert fit(d, Ownership(), {}, 10_000) == (d, ())
    assert encode(Ownership()) is None


# -- against the real API server: a budget instead of one 422 for everybody -----------------


@pytest.mark.realpeer
def test_producers_over_the_budget_are_refused_the_others_still_land(cluster, fdir):
    for j in range(5):  # each file under 64 KiB; their keys alone are over 256 KiB together
        text = "".join(f"{F}/p{j}-k{i:05d}-padding-padding=1\n" for i in range(1000))
        assert len(text) < 65536
        (fdir / f"p{j}").write_text(text)
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    node = cluster.new_node()
    p = run_once(cluster, node, fdir)
    assert p.returncode == 0, p.stderr
    labels = cluster.labels(node)
    assert labels[f"{F}/usb"] == "true"
    applied = {j for j in range(5) if f"{F}/p{j}-k00000-padding-padding" in labels}
    assert len(applied) == 1
    over = event_messages(cluster, node, "LabelBudgetExceeded")
    assert len(over) == 4 and all("--label-budget" in m for m in over)
    own = decode(cluster.node(node).metadata.annotations[ANNOTATION])
    assert published_size(labels, own) <= 128 * 1024
