"""A producer rewriting its file in place (issue 11, item 10): a read caught between the
truncate and the last write must not make labels flap."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from edgefd.feature_sink.desired import FeaturesDirGone, read_directory
from edgefd.feature_sink.patch import NodeView
from edgefd.feature_sink.sync import Rules, plan_node
from tests.feature_sink.jsonpatch import apply_patch

F = "feature.node.kubernetes.io"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
RULES = Rules(timedelta(minutes=10))


def at(path: Path, when: datetime) -> None:
    os.utime(path, (when.timestamp(), when.timestamp()))


def sync(n: NodeView, d, now: datetime) -> NodeView:
    plan = plan_node(n, d, now, RULES)
    if not plan.write:
        return n
    doc = {"metadata": {"labels": n.labels, "annotations": n.annotations, "resourceVersion": "1"}}
    md = apply_patch(doc, plan.write)["metadata"]
    return NodeView(n.name, md.get("labels"), md.get("annotations"), "1")


@pytest.fixture
def applied(tmp_path: Path) -> tuple[Path, NodeView]:
    f = tmp_path / "usb-scan"
    f.write_text(f"{F}/a=true\n{F}/b=true\n")
    at(f, T0 - timedelta(minutes=1))
    n = sync(NodeView("n1", {}, {}, "1"), read_directory(tmp_path, now=T0, settle=1.0), T0)
    assert n.labels == {f"{F}/a": "true", f"{F}/b": "true"}
    return f, n


def test_an_empty_read_right_after_a_change_removes_nothing_until_quiet(applied, tmp_path):
    f, n = applied
    f.write_text("")  # truncated: the producer is about to write
    at(f, T0)
    d = read_directory(tmp_path, now=T0 + timedelta(seconds=0.2), settle=1.0)
    assert d.settling == {"usb-scan"}
    assert d.recheck_at == T0 + timedelta(seconds=1)
    assert sync(n, d, T0).labels == n.labels
    # still empty once quiet: the producer really has nothing to say
    quiet = read_directory(tmp_path, now=T0 + timedelta(seconds=1), settle=1.0)
    assert not quiet.settling and quiet.recheck_at is None
    assert sync(n, quiet, T0).labels == {}


def test_an_unterminated_last_line_is_not_taken_while_fresh(applied, tmp_path):
    f, n = applied
    f.write_text(f"{F}/a=true\n{F}/b=tr")  # caught mid-write
    at(f, T0)
    d = read_directory(tmp_path, now=T0, settle=1.0)
    assert sync(n, d, T0).labels == n.labels  # no b=tr, no removal
    # a file that ends without a newline for good is read as NFD reads it
    later = read_directory(tmp_path, now=T0 + timedelta(seconds=5), settle=1.0)
    assert sync(n, later, T0).labels == {f"{F}/a": "true", f"{F}/b": "tr"}


def test_a_fresh_file_still_adds_and_changes_at_once(applied, tmp_path):
    f, n = applied
    f.write_text(f"{F}/a=false\n{F}/c=true\n")
    at(f, T0)
    after = sync(n, read_directory(tmp_path, now=T0, settle=1.0), T0)
    assert after.labels == {f"{F}/a": "false", f"{F}/b": "true", f"{F}/c": "true"}
    quiet = sync(after, read_directory(tmp_path, now=T0 + timedelta(seconds=2), settle=1.0), T0)
    assert quiet.labels == {f"{F}/a": "false", f"{F}/c": "true"}


def test_settle_zero_is_the_old_behaviour(applied, tmp_path):
    f, n = applied
    f.write_text("")
    at(f, T0)
    assert sync(n, read_directory(tmp_path, now=T0, settle=0.0), T0).labels == {}


def test_a_vanished_directory_is_a_fault_not_an_empty_directory(tmp_path):
    with pytest.raises(FeaturesDirGone, match="every label is kept"):
        read_directory(tmp_path / "gone")
    (tmp_path / "file").write_text("")
    with pytest.raises(FeaturesDirGone, match="no longer a directory"):
        read_directory(tmp_path / "file")


def test_a_one_shot_run_waits_for_a_fresh_file_to_settle(tmp_path):
    """`--once` and `--dry-run` have no later sync: a file written just now is read again once
    quiet, so what it no longer lists is removed by this very run."""
    import time

    from edgefd.feature_sink.service import read_settled

    f = tmp_path / "usb-scan"
    f.write_text(f"{F}/a=true\n")
    reads = []

    def read():
        reads.append(read_directory(tmp_path, settle=0.3))
        return reads[-1]

    start = time.monotonic()
    d = read_settled(read)
    assert reads[0].settling == {"usb-scan"} and not d.settling
    assert 0.25 <= time.monotonic() - start < 2
    assert d.producers["usb-scan"] == {f"{F}/a": "true"}


def test_a_file_rewritten_on_every_look_is_taken_as_it_stands(tmp_path):
    from edgefd.feature_sink.service import SETTLE_ROUNDS, read_settled

    f = tmp_path / "usb-scan"
    reads = 0

    def read():
        nonlocal reads
        reads += 1
        f.write_text(f"{F}/a={reads}\n")
        return read_directory(tmp_path, settle=0.05)

    d = read_settled(read)
    assert reads == SETTLE_ROUNDS + 1 and d.settling == {"usb-scan"}
