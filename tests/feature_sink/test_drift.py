"""The watch's side of the sink, without an API server: what counts as drift (watched.py) and
how the loop reacts to it (at once; backing off a fight; fresh reads only where needed). The
same against the real API server: test_watch.py."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

from edgefd.feature_sink.desired import Desired
from edgefd.feature_sink.loop import FIGHT_REPAIRS, LoopConfig, SinkLoop
from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.report import Reporter
from edgefd.feature_sink.sync import NodeSyncer, Rules, SyncResult
from edgefd.feature_sink.watched import WatchedObject

F = "feature.node.kubernetes.io"


def node(rv: int, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "n1", "resourceVersion": str(rv), "labels": labels or {}}
    return {"kind": "Node", "metadata": md, **extra}


def fingerprint(obj: dict[str, Any] | None) -> Any:
    metrics = SinkMetrics()
    syncer = NodeSyncer(None, "n1", Rules(timedelta(0)), metrics, Reporter(metrics, events=False))
    return syncer.fingerprint(obj)


def watched() -> tuple[WatchedObject, list[int]]:
    drifts: list[int] = []
    return WatchedObject("n1", fingerprint, lambda: drifts.append(1)), drifts


def test_only_a_change_of_labels_or_the_annotation_is_drift():
    w, drifts = watched()
    assert w.get() == (False, None)  # nothing known yet: read from the API server
    w.listed({"n1": node(5, {"a": "1"})}, "start")
    assert drifts == [] and w.get()[0]
    w.event("MODIFIED", node(6, {"a": "1"}, status={"conditions": ["Ready"]}))
    assert drifts == []  # a kubelet status update
    w.event("MODIFIED", node(7, {"a": "2"}))
    assert drifts == [1]
    w.event("MODIFIED", node(6, {"a": "3"}))  # late, older than what is held
    assert drifts == [1] and w.get()[1]["metadata"]["labels"] == {"a": "2"}
    annotated = node(8, {"a": "2"})
    annotated["metadata"]["annotations"] = {"edgefd.io/owned-labels": "{}"}
    w.event("MODIFIED", annotated)
    assert drifts == [1, 1]
    w.event("MODIFIED", {"metadata": {"name": "other", "resourceVersion": "9"}})
    assert drifts == [1, 1]  # not the object the selector names
    w.event("DELETED", node(9, {"a": "2"}))
    assert drifts == [1, 1, 1] and w.get() == (True, None)


def test_the_echo_of_the_sinks_own_write_is_not_drift():
    w, drifts = watched()
    w.listed({"n1": node(5, {"a": "1"})}, "start")
    w.remember(node(6, {"a": "1", f"{F}/x": "true"}))  # the PATCH's answer
    w.event("MODIFIED", node(6, {"a": "1", f"{F}/x": "true"}))  # its echo
    assert drifts == []
    # echo first, answer second: one harmless wake-up, then nothing
    w.event("MODIFIED", node(7, {"a": "1"}))
    w.remember(node(7, {"a": "1"}))
    assert drifts == [1]


def test_a_relist_that_finds_the_same_object_changes_nothing():
    w, drifts = watched()
    w.listed({"n1": node(5, {"a": "1"})}, "start")
    w.lost()
    assert w.get()[0] is False  # the watch failed: reads go to the API server
    w.listed({"n1": node(9, {"a": "1"})}, "gone")
    assert drifts == [] and w.get()[0]
    w.listed({"n1": node(10, {"a": "2"})}, "gone")
    assert drifts == [1]


class DriftSyncer:
    """Records each sync's trigger freshness; every drift sync 'repairs' (writes)."""

    what = "node n1"

    def __init__(self) -> None:
        self.calls: list[tuple[float, bool]] = []

    def sync(self, desired: Desired, now: datetime, fresh: bool = True) -> SyncResult:
        self.calls.append((time.monotonic(), fresh))
        return SyncResult(wrote=len(self.calls) > 1)


def start(loop: SinkLoop) -> threading.Thread:
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    return t


def test_drift_syncs_at_once_from_the_watchs_copy_and_a_fight_backs_off():
    syncer = DriftSyncer()
    metrics = SinkMetrics()
    loop = SinkLoop(Desired, syncer, metrics, LoopConfig(3600, max_backoff=2.0))
    t = start(loop)
    try:
        time.sleep(0.2)
        assert syncer.calls == [(syncer.calls[0][0], True)]  # the start-up sync reads fresh
        t0 = time.monotonic()
        loop.drifted()
        while len(syncer.calls) < 2:
            time.sleep(0.005)
        assert syncer.calls[1][0] - t0 < 0.1 and syncer.calls[1][1] is False
        # another writer undoing each repair at once: the first repairs are immediate,
        # then each waits longer
        for _ in range(6):
            n = len(syncer.calls)
            loop.drifted()
            while len(syncer.calls) == n:
                time.sleep(0.005)
        gaps = [b[0] - a[0] for a, b in zip(syncer.calls[1:], syncer.calls[2:], strict=False)]
        quick = FIGHT_REPAIRS - 1
        assert all(g < 0.1 for g in gaps[:quick]), gaps
        held = gaps[quick:]
        assert held[0] >= 0.2 and held[-1] >= 0.9 and held[-1] <= 2.1, gaps  # up to the cap
        assert metrics.value("edgefd_sink_repair_holds_total") >= 4
        assert metrics.value("edgefd_sink_repairs_total") == 7
        assert metrics.value("edgefd_sink_sync_triggers_total", trigger="drift") == 7
    finally:
        loop.stop()
        t.join(5)


def test_repairs_seconds_apart_are_no_fight():
    syncer = DriftSyncer()
    metrics = SinkMetrics()
    loop = SinkLoop(Desired, syncer, metrics, LoopConfig(3600, max_backoff=2.0))
    loop._last_repair = None
    t = start(loop)
    try:
        time.sleep(0.1)
        import edgefd.feature_sink.loop as loopmod

        saved, loopmod.FIGHT_WINDOW = loopmod.FIGHT_WINDOW, 0.05  # a person, not a controller
        try:
            for _ in range(5):
                n = len(syncer.calls)
                time.sleep(0.1)
                t0 = time.monotonic()
                loop.drifted()
                while len(syncer.calls) == n:
                    time.sleep(0.005)
                assert syncer.calls[-1][0] - t0 < 0.1
        finally:
            loopmod.FIGHT_WINDOW = saved
        assert metrics.value("edgefd_sink_repair_holds_total") == 0
    finally:
        loop.stop()
        t.join(5)
