"""What a sync did, told at info level (story.py; issue 25 items 1 and 2): every label added,
changed or removed with its producer and why (a producer's change told from a hand edit the
sink set back), a producer's file gone and its grace, the first hundred changes of a big sync
at info and the rest at debug, and nothing while nothing happens. Units of the telling first;
then the default-level log of the running sink against the real kube-apiserver (its start-up
line with version, mode and settings too)."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

import edgefd
from edgefd.core.version import build_info
from edgefd.feature_sink import story
from edgefd.feature_sink.desired import Desired
from edgefd.feature_sink.ownership import Ownership, Target
from edgefd.feature_sink.patch import LabelChange, label_changes
from tests.feature_sink.peer import F, write
from tests.feature_sink.states import GRACE, NOW

USB = Desired(present=frozenset({"usb"}))  # usb's file was read


def test_why_tells_a_producers_change_from_a_repair():
    a, b = f"{F}/a", f"{F}/b"
    before = Ownership({"usb": frozenset({a, b})})
    after = Ownership({"usb": frozenset({a})})

    def why(c: LabelChange, applied: dict[str, str] | None = None, desired=USB) -> str:
        return story.why(c, before, after, desired, applied)

    assert why(LabelChange("remove", b, old="1")) == "usb no longer lists it"
    assert (
        why(LabelChange("remove", b, old="1"), desired=Desired())
        == "usb's file is gone and its removal grace is over"
    )
    assert (
        why(LabelChange("add", a, value="1"))
        == "from usb; repaired: someone had removed it from the node"
    )
    # the node's value is not the one the sink last applied: someone changed it
    assert (
        why(LabelChange("replace", a, value="1", old="99"), {a: "1"})
        == "from usb; repaired: someone had changed it on the node"
    )
    # it is: the producer asks for another value
    assert why(LabelChange("replace", a, value="2", old="1"), {a: "1"}) == "from usb"
    more = Ownership({"usb": frozenset({a}), "pci": frozenset({f"{F}/p"})})
    assert story.why(LabelChange("add", f"{F}/p", value="1"), before, more, USB, None) == "from pci"


def test_producer_news_a_file_gone_back_and_labels_adopted():
    a = f"{F}/a"
    owned = Ownership({"usb": frozenset({a})})
    missing = Ownership({"usb": frozenset({a})}, {"usb": NOW})
    assert story.producer_news([], owned, missing, Desired(), GRACE) == [
        "usb's file is gone; its 1 label(s) are kept until 2024-05-01T12:10:00Z"
    ]
    assert story.producer_news([], missing, owned, USB, GRACE) == ["usb's file is back"]
    keys = frozenset(f"{F}/k{i}" for i in range(7))
    adopted = Ownership({"usb": keys | {a}})
    added = [LabelChange("add", f"{F}/k6", value="1")]  # the one the sync itself adds
    assert story.producer_news(added, owned, adopted, USB, GRACE) == [
        f"adopted 6 label(s) already set as wanted: {F}/k0, {F}/k1, {F}/k2, {F}/k3, {F}/k4 "
        "and 1 more"
    ]


def test_a_big_sync_lists_its_first_changes_at_info_and_a_quiet_one_says_nothing(caplog):
    labels = {f"{F}/k{i:03d}": "1" for i in range(story.MAX_CHANGE_LINES + 5)}
    changes = label_changes({}, labels)
    outcome = Target(labels, Ownership({"usb": frozenset(labels)}))
    with caplog.at_level(logging.DEBUG, logger="edgefd.feature_sink"):
        story.tell("node n1", changes, Ownership(), outcome, USB, None, GRACE)
        told = [(r.levelno, r.getMessage()) for r in caplog.records]
        caplog.clear()
        # the next sync: nothing changed, nothing to say
        story.tell(
            "node n1", [], outcome.ownership, outcome, USB, story.applied_labels(outcome), GRACE
        )
        assert caplog.records == []
    assert told[0] == (logging.INFO, "node n1: 105 label(s) added, 0 changed, 0 removed; 105 owned")
    listed = told[1:]
    info, debug = logging.INFO, logging.DEBUG
    assert [level for level, _ in listed] == [info] * 101 + [debug] * 5
    assert listed[0][1] == f"node n1: add     {F}/k000=1 (from usb)"
    assert listed[100][1] == "node n1: ... 5 more change(s) (-vv lists them)"
    assert listed[-1][1] == f"node n1: add     {F}/k104=1 (from usb)"
    assert story.applied_labels(outcome) == labels


# -- the running sink's log, against the real API server -------------------------------------


@pytest.mark.realpeer
def test_a_default_level_log_tells_the_labels_story(cluster, sinks, fdir: Path) -> None:
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/a": "true", f"{F}/b": "1"})
    s = sinks(node, fdir, "--removal-grace", "2s", verbose=False)
    what = f"feature-sink: INFO: node {node}:"

    info = build_info()
    start = s.logged("starting")
    assert start.startswith(
        f"feature-sink: INFO: edgefd {edgefd.__version__} (python {info['python']}, "
        f"{info['platform']}) starting, mode node: node={node}, features={fdir}, "
    )
    assert "resync=2s, removal-grace=2s" in start and f"listen=127.0.0.1:{s.port}" in start
    s.logged(rf"^feature-sink: INFO: serving /healthz /readyz /metrics on 127\.0\.0\.1:{s.port}$")

    assert s.logged("label.s. added") == f"{what} 2 label(s) added, 0 changed, 0 removed; 2 owned"
    assert f"{what} add     {F}/a=true (from usb-scan)" in s.lines()
    assert f"{what} add     {F}/b=1 (from usb-scan)" in s.lines()

    # a producer's change, a removal, then hand edits the sink sets back
    write(fdir, "usb-scan", {f"{F}/b": "2"})
    s.logged(re.escape(f"{what} remove  {F}/a (was true) (usb-scan no longer lists it)"))
    s.logged(re.escape(f"{what} replace {F}/b=2 (was 1) (from usb-scan)"))
    cluster.set_label(node, f"{F}/b", "99")
    s.logged(re.escape("(from usb-scan; repaired: someone had changed it on the node)"))
    cluster.set_label(node, f"{F}/b", None)
    s.logged(re.escape(f"{what} add     {F}/b=2 (from usb-scan; repaired: someone had removed"))

    # steady state: two resyncs (2 s each) and not a line
    before = len(s.lines())
    time.sleep(5)
    assert s.lines()[before:] == []

    # a producer's file gone: kept for the grace, then removed, each said once
    (fdir / "usb-scan").unlink()
    s.logged(re.escape(f"{what} usb-scan's file is gone; its 1 label(s) are kept until "))
    s.logged(
        re.escape(f"{what} remove  {F}/b (was 2) (usb-scan's file is gone and its removal "),
    )
    assert not [ln for ln in s.lines() if "WARNING" in ln or "DEBUG" in ln], s.lines()
    assert s.metric("edgefd_build_info", **info) == 1
