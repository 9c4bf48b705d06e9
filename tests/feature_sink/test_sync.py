"""One sync (sync.py): the planner from the object and the desired state to at most one guarded
write (`plan_node`, pure: it realises the outcome, never touches a label the sink does not own
or a key its policy refuses, converges so that a second sync writes nothing, and writes
nothing at all under an untrusted annotation), and `Syncer.sync` around it (planned against the
watch's copy when asked, a write refused because the object moved planned again from a fresh
read, given up after a few attempts). The API is an in-memory stand-in; the real API server's
side of a sync is in test_realpeer.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.nodeapi import ApiConflict
from edgefd.feature_sink.ownership import ANNOTATION, Ownership, vet
from edgefd.feature_sink.patch import NodeView
from edgefd.feature_sink.report import Reporter
from edgefd.feature_sink.sync import MAX_CONFLICT_RETRIES, NodeSyncer, plan_node
from tests.feature_sink.states import NOW, RULES, F, apply, desired_of, node


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


# -- Syncer.sync: reads, writes and the retry after a concurrent write ------------------------


class MovingNodeAPI:
    """The Node API as a sync uses it: each GET answers the next of `nodes` (the last one
    repeats); the first `conflicts` PATCHes are refused because the Node moved."""

    def __init__(self, nodes: list[NodeView], conflicts: int = 0) -> None:
        self.nodes = nodes
        self.conflicts = conflicts
        self.gets = 0
        self.patches: list[list[dict[str, Any]]] = []

    def get_node(self, name: str) -> NodeView:
        self.gets += 1
        return self.nodes[min(self.gets, len(self.nodes)) - 1]

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        self.patches.append(ops)
        if len(self.patches) <= self.conflicts:
            raise ApiConflict(f"patch node {name}: 422 the test operation failed")
        return {"kind": "Node", "metadata": {"name": name, "resourceVersion": "9"}}


class TrustedCopy:
    """A watch's copy of the Node that is up (trusted), and what the sink's writes left."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.remembered: list[dict[str, Any] | None] = []

    def get(self) -> tuple[bool, dict[str, Any] | None]:
        return True, self.obj

    def remember(self, obj: dict[str, Any] | None) -> None:
        self.remembered.append(obj)


def node_syncer(api: MovingNodeAPI) -> tuple[NodeSyncer, SinkMetrics]:
    metrics = SinkMetrics()
    return NodeSyncer(api, "n1", RULES, metrics, Reporter(metrics, events=False)), metrics


def rv_tested(ops: list[dict[str, Any]]) -> str:
    assert ops[0]["path"] == "/metadata/resourceVersion" and ops[0]["op"] == "test", ops
    return ops[0]["value"]


def test_a_write_refused_because_the_node_moved_is_planned_again_from_a_fresh_read():
    moved = NodeView("n1", {"example.com/x": "1"}, {}, "2")
    api = MovingNodeAPI([moved], conflicts=1)
    syncer, metrics = node_syncer(api)
    syncer.cache = TrustedCopy({"kind": "Node", "metadata": {"name": "n1", "resourceVersion": "1"}})
    result = syncer.sync(desired_of({"usb": f"{F}/a=1\n"}), NOW, fresh=False)
    # the first plan against the watch's copy (no GET), the retry against the API server's Node
    assert api.gets == 1
    assert [rv_tested(ops) for ops in api.patches] == ["1", "2"]
    assert result.wrote and result.owned == 1
    assert [c.key for c in result.changes] == [f"{F}/a"]
    stored = {"kind": "Node", "metadata": {"name": "n1", "resourceVersion": "9"}}
    assert syncer.cache.remembered == [stored]  # so its watch echo is no drift
    assert metrics.value("edgefd_sink_patch_conflicts_total") == 1
    assert metrics.value("edgefd_sink_owned_labels") == 1
    # a fresh sync (the start, the safety resync) reads the API server whatever the copy says
    syncer.sync(desired_of({"usb": f"{F}/a=1\n"}), NOW, fresh=True)
    assert api.gets == 2


def test_a_node_that_keeps_moving_is_given_up_after_a_few_attempts():
    api = MovingNodeAPI([NodeView("n1", {}, {}, str(i)) for i in range(1, 20)], conflicts=99)
    syncer, metrics = node_syncer(api)
    with pytest.raises(ApiConflict, match=f"gave up after {MAX_CONFLICT_RETRIES} attempts"):
        syncer.sync(desired_of({"usb": f"{F}/a=1\n"}), NOW)
    assert api.gets == len(api.patches) == MAX_CONFLICT_RETRIES  # each attempt read afresh
    assert [rv_tested(ops) for ops in api.patches] == [
        str(i) for i in range(1, MAX_CONFLICT_RETRIES + 1)
    ]
    assert metrics.value("edgefd_sink_patch_conflicts_total") == MAX_CONFLICT_RETRIES
    assert syncer.applied is None  # nothing was applied
