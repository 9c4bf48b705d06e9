"""When the sink syncs (loop.py): at once on a change, with the syncs under a burst bounded;
at once on drift, from the watch's copy, with a fight over a label backed off; after a failure
with backoff, never exiting, the failure said once and its end once; and by itself when a
settling file has been quiet. Units with a recording syncer first (the debouncer that feeds the
loop too); then the running sink against the real kube-apiserver."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from edgefd.feature_sink.desired import Desired, read_directory
from edgefd.feature_sink.loop import DRIFT_COALESCE, FIGHT_REPAIRS, LoopConfig, SinkLoop
from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.nodeapi import ApiUnreachable
from edgefd.feature_sink.sync import SyncResult
from edgefd.runtime.watch import Watcher
from tests.feature_sink.peer import QUIET, F, wait_for, write


class RecordingSyncer:
    """Stands in for the API side to observe *when* the loop syncs and what it read."""

    def __init__(self, fail_first: int = 0) -> None:
        self.calls: list[tuple[float, dict[str, str]]] = []
        self.fresh: list[bool] = []
        self.fail_first = fail_first

    def sync(self, desired: Desired, now: datetime, fresh: bool = True) -> SyncResult:
        self.fresh.append(fresh)
        self.calls.append((time.monotonic(), desired.labels))
        if len(self.calls) <= self.fail_first:
            raise ApiUnreachable("connection refused")
        return SyncResult(wrote=True)

    def lost(self) -> None:
        """No watch here: nothing to distrust."""


def run_loop(loop: SinkLoop) -> threading.Thread:
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    return t


def test_loop_bounds_syncs_under_a_burst_and_applies_the_final_state(tmp_path: Path):
    syncer = RecordingSyncer()
    metrics = SinkMetrics()
    cfg = LoopConfig(resync_interval=3600)
    loop = SinkLoop(lambda: read_directory(tmp_path), syncer, metrics, cfg)
    watcher = Watcher(loop.changed, [tmp_path], debounce=0.1, max_delay=0.5).start()
    t = run_loop(loop)
    try:
        time.sleep(0.3)
        assert len(syncer.calls) == 1  # the start-up sync
        start = time.monotonic()
        for i in range(1000):
            (tmp_path / f"p{i % 10}").write_text(f"{F}/n{i % 10}={i}\n")
        burst = time.monotonic() - start
        time.sleep(0.8)
        n = len(syncer.calls) - 1
        # at most one sync per max_latency window during the burst, plus the trailing one
        assert 1 <= n <= int(burst / 0.5) + 2, (n, burst)
        assert syncer.calls[-1][1] == {f"{F}/n{k}": str(990 + k) for k in range(10)}
    finally:
        loop.stop()
        t.join(5)
        watcher.stop()
    assert not t.is_alive()


def test_loop_keeps_retrying_with_backoff_and_never_exits(tmp_path: Path):
    syncer = RecordingSyncer(fail_first=4)
    metrics = SinkMetrics()
    cfg = LoopConfig(resync_interval=3600, max_backoff=0.4)
    loop = SinkLoop(lambda: read_directory(tmp_path), syncer, metrics, cfg)
    t = run_loop(loop)
    try:
        end = time.monotonic() + 5
        while time.monotonic() < end and len(syncer.calls) < 5:
            time.sleep(0.02)
        assert len(syncer.calls) == 5
        gaps = [b[0] - a[0] for a, b in zip(syncer.calls, syncer.calls[1:], strict=False)]
        assert all(g >= 0.09 for g in gaps), gaps  # backed off (initial 0.2 s, jitter <= 50 %)
        assert metrics.value("edgefd_sink_sync_failures_total", reason="unreachable") == 4
        assert metrics.value("edgefd_sink_syncs_total", result="success") == 1
        assert loop.ready(60)[0] and loop.alive(60)[0]
    finally:
        loop.stop()
        t.join(5)


# -- drift: at once, and backing off a fight -------------------------------------------------


class DriftSyncer:
    """Records each sync's trigger freshness; every drift sync 'repairs' (writes)."""

    what = "node n1"

    def __init__(self) -> None:
        self.calls: list[tuple[float, bool]] = []

    def sync(self, desired: Desired, now: datetime, fresh: bool = True) -> SyncResult:
        self.calls.append((time.monotonic(), fresh))
        return SyncResult(wrote=len(self.calls) > 1)


def test_drift_syncs_at_once_from_the_watchs_copy_and_a_fight_backs_off():
    syncer = DriftSyncer()
    metrics = SinkMetrics()
    loop = SinkLoop(Desired, syncer, metrics, LoopConfig(3600, max_backoff=2.0))
    t = run_loop(loop)
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
    t = run_loop(loop)
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


class NothingToRepair(DriftSyncer):
    """Every sync finds the object as it should be (another writer changed labels the sink
    neither owns nor wants)."""

    def sync(self, desired: Desired, now: datetime, fresh: bool = True) -> SyncResult:
        self.calls.append((time.monotonic(), fresh))
        return SyncResult(wrote=False)


def test_a_burst_of_drift_that_repairs_nothing_is_coalesced():
    """Issue 30 item 9: 50 foreign changes in a second were 50 syncs."""
    syncer = NothingToRepair()
    metrics = SinkMetrics()
    loop = SinkLoop(Desired, syncer, metrics, LoopConfig(3600))
    t = run_loop(loop)
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        for _ in range(50):
            loop.drifted()
            time.sleep(0.02)
        time.sleep(DRIFT_COALESCE + 0.3)
        drift = syncer.calls[1:]
        assert drift[0][0] - t0 < 0.1  # the first at once
        # then one per window at most: 1 s of burst and the window after it
        assert 2 <= len(drift) <= 4, [c[0] - t0 for c in drift]
        assert metrics.value("edgefd_sink_sync_triggers_total", trigger="drift") == len(drift)
        # the last change of the burst is synced, within a window of it
        assert drift[-1][0] - (t0 + 1.0) < DRIFT_COALESCE + 0.2
    finally:
        loop.stop()
        t.join(5)


# -- the running sink, against the real API server -------------------------------------------


@pytest.mark.realpeer
def test_a_fight_over_a_label_backs_off(cluster, sinks, fdir):
    """Another writer that removes an owned label again and again (a controller bug): the
    sink repairs, but after a few repairs in a row it backs off instead of trading writes with
    it as fast as the API server takes them."""
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    s = sinks(node, fdir, *QUIET, "--max-backoff", "30s")
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true")
    wait_for(lambda: s.watching(), what="the watch is open")
    writes0 = s.requests("PATCH")
    flips = 0
    end = time.monotonic() + 6
    while time.monotonic() < end:
        if f"{F}/usb" in cluster.labels(node):
            cluster.set_label(node, f"{F}/usb", None)
            flips += 1
        time.sleep(0.05)
    writes = s.requests("PATCH") - writes0
    repairs = s.metric("edgefd_sink_repairs_total")
    # 3 quick repairs, then waits of 0.25-0.5, 0.5-1, 1-2, 2-4 s ...: a handful in 6 s (a
    # repair may take two PATCHes: the other writer can move the Node between plan and write)
    fights = [line for line in s.tail().splitlines() if "fighting" in line]
    assert 3 <= repairs <= 8 and writes <= 2 * repairs, (repairs, writes, flips, fights)
    assert s.metric("edgefd_sink_repair_holds_total") >= 1
    assert "fighting over them" in s.tail()


@pytest.mark.realpeer
def test_the_api_lost_and_back_is_said_once_each(cluster, sinks, fdir, kube_apiserver) -> None:
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/a": "true"})
    s = sinks(node, fdir, verbose=False)
    s.wait_synced()
    kube_apiserver.stop_apiserver()
    try:
        write(fdir, "usb-scan", {f"{F}/a": "true", f"{F}/c": "true"})
        wait_for(
            lambda: s.metric("edgefd_sink_sync_failures_total", reason="unreachable") >= 4,
            30,
            "several failed attempts",
        )
    finally:
        kube_apiserver.start_apiserver()
    back = s.logged("sync succeeded again", 60)
    assert re.fullmatch(
        r"feature-sink: INFO: sync succeeded again after \d+ failed attempt\(s\) over \d+s "
        r"\(unreachable\)",
        back,
    ), back
    lost = [ln for ln in s.lines() if "sync failed" in ln]
    assert len(lost) == 1 and lost[0].startswith("feature-sink: WARNING: sync failed (unreachable)")
    s.logged(re.escape(f"add     {F}/c=true (from usb-scan)"))


@pytest.mark.realpeer
def test_a_file_left_empty_is_read_again_once_quiet(cluster, sinks, fdir):
    """The settle rule only delays a removal: the sink comes back by itself (not at the next
    resync, an hour away here) and applies the file as it is."""
    path = fdir / "usb-scan"
    path.write_text(f"{F}/usb=true\n")
    node = cluster.new_node()
    sinks(node, fdir, "--resync-interval", "1h")
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true")
    with open(path, "r+") as f:
        f.truncate(0)  # a producer that truncates and then dies
    gone_at = time.monotonic()
    wait_for(lambda: f"{F}/usb" not in cluster.labels(node), 15, "removal once quiet")
    assert time.monotonic() - gone_at >= 0.9  # not before --settle (1 s)
