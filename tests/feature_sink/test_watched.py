"""The sink's own object as its watch keeps it (watched.py): what counts as drift (a change of
the labels or the ownership annotation that the sink did not write; not a kubelet's status
update, not a late event, not the echo of its own write) and when the copy is trusted. Units
without an API server first; then against the real kube-apiserver: a foreign edit of an owned
label repaired within a second from the watch's copy (no read), and the watch surviving an API
server restart and an etcd compaction (410) without re-applying anything."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.report import Reporter
from edgefd.feature_sink.sync import NodeSyncer, Rules
from edgefd.feature_sink.watched import WatchedObject
from tests.feature_sink.peer import QUIET, Cluster, F, wait_for, write


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
    a = f"{F}/a"
    w, drifts = watched()
    assert w.get() == (False, None)  # nothing known yet: read from the API server
    w.listed({"n1": node(5, {a: "1"})}, "start")
    assert drifts == [] and w.get()[0]
    w.event("MODIFIED", node(6, {a: "1"}, status={"conditions": ["Ready"]}))
    assert drifts == []  # a kubelet status update
    w.event("MODIFIED", node(7, {a: "2"}))
    assert drifts == [1]
    w.event("MODIFIED", node(6, {a: "3"}))  # late, older than what is held
    assert drifts == [1] and w.get()[1]["metadata"]["labels"] == {a: "2"}
    annotated = node(8, {a: "2"})
    annotated["metadata"]["annotations"] = {"edgefd.io/owned-labels": "{}"}
    w.event("MODIFIED", annotated)
    assert drifts == [1, 1]
    w.event("MODIFIED", {"metadata": {"name": "other", "resourceVersion": "9"}})
    assert drifts == [1, 1]  # not the object the selector names
    w.event("DELETED", node(9, {a: "2"}))
    assert drifts == [1, 1, 1] and w.get() == (True, None)


def test_labels_outside_the_sinks_namespaces_are_no_drift():
    """Issue 30 item 9: another controller relabelling the Node in its own namespace (or
    unprefixed) cost a sync per change; the plan never reads those labels."""
    w, drifts = watched()
    w.listed({"n1": node(5, {f"{F}/usb": "true", "example.com/gen": "0"})}, "start")
    for rv in range(6, 56):
        w.event("MODIFIED", node(rv, {f"{F}/usb": "true", "example.com/gen": str(rv), "x": "y"}))
    assert drifts == []
    assert w.get()[1]["metadata"]["labels"]["example.com/gen"] == "55"  # the copy is current
    w.event("MODIFIED", node(56, {f"{F}/usb": "true", "edgefd.io/gen": "1"}))
    assert drifts == [1]  # one of the sink's namespaces: its plan may depend on it


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
    w.listed({"n1": node(5, {f"{F}/a": "1"})}, "start")
    w.lost()
    assert w.get()[0] is False  # the watch failed: reads go to the API server
    w.listed({"n1": node(9, {f"{F}/a": "1"})}, "gone")
    assert drifts == [] and w.get()[0]
    w.listed({"n1": node(10, {f"{F}/a": "2"})}, "gone")
    assert drifts == [1]


# -- against the real API server ------------------------------------------------------------


class NodeEvents:
    """The Node as an independent watch (the admin's) sees it, timestamped on arrival."""

    def __init__(self, cluster: Cluster, node: str) -> None:
        self.cluster = cluster
        self.node = node
        self.seen: list[tuple[float, dict[str, str], dict[str, str]]] = []
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> NodeEvents:
        self._thread.start()
        time.sleep(0.3)
        return self

    def _run(self) -> None:
        import kubernetes

        rv = self.cluster.node(self.node).metadata.resource_version
        while not self._stop.is_set():
            w = kubernetes.watch.Watch()
            try:
                for ev in w.stream(
                    self.cluster.core.list_node,
                    field_selector=f"metadata.name={self.node}",
                    resource_version=rv,
                    timeout_seconds=5,
                ):
                    md = ev["object"].metadata
                    rv = md.resource_version
                    with self._cond:
                        self.seen.append(
                            (time.monotonic(), dict(md.labels or {}), dict(md.annotations or {}))
                        )
                        self._cond.notify_all()
                    if self._stop.is_set():
                        break
            except Exception:  # the API server restarting
                time.sleep(0.2)

    def wait(self, pred: Any, after: float, timeout: float = 10.0) -> float:
        """When the first state seen after `after` satisfying `pred(labels, annotations)`
        arrived."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for t, labels, ann in self.seen:
                    if t >= after and pred(labels, ann):
                        return t
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not seen within {timeout}s: last {self.seen[-1:]}")
                self._cond.wait(left)

    def stop(self) -> None:
        self._stop.set()


@pytest.mark.realpeer
def test_foreign_edits_of_owned_labels_are_repaired_within_a_second(cluster, sinks, fdir):
    node = cluster.new_node({"example.com/team": "edge"})
    owned = {f"{F}/usb": "true", f"{F}/count": "2", "edgefd.io/edgetpu.present": "true"}
    write(fdir, "usb-scan", owned)
    s = sinks(node, fdir, *QUIET)
    wait_for(lambda: cluster.labels(node).get(f"{F}/count") == "2", what="labels applied")
    wait_for(lambda: s.watching(), what="the watch is open")
    # one watch-mode metric in every tool (issue 25 item 8; was edgefd_sink_watch_mode)
    assert s.metric("edgefd_watch_mode", component="feature-sink", mode="inotify") == 1
    events = NodeEvents(cluster, node).start()
    try:
        writes0, gets0 = s.requests("PATCH"), s.requests("GET")
        latencies = []
        keys = sorted(owned)
        for i in range(8):
            key = keys[i % len(keys)]
            # a foreign label changes in the same write: it must stay as the other writer left it
            change: dict[str, Any] = {"example.com/team": f"edge-{i}"}
            change[key] = None if i % 2 == 0 else "tampered"  # removed, or altered
            t0 = time.monotonic()
            cluster.core.patch_node(node, {"metadata": {"labels": change}})
            t = events.wait(lambda labels, _a, k=key: labels.get(k) == owned[k], t0)
            latencies.append(t - t0)
            time.sleep(2.2)  # not a fight (see test_loop.py, test_a_fight_over_a_label_backs_off)
        assert max(latencies) < 1.0, latencies
        labels = cluster.labels(node)
        assert labels["example.com/team"] == "edge-7"  # never touched
        assert {k: labels[k] for k in owned} == owned
        # each repair: one guarded PATCH planned against the watch's copy, no read
        assert s.requests("PATCH") - writes0 == 8
        assert s.requests("GET") - gets0 == 0
        assert s.metric("edgefd_sink_repairs_total") == 8
        assert s.metric("edgefd_sink_sync_triggers_total", trigger="drift") >= 8
    finally:
        events.stop()


@pytest.mark.realpeer
def test_watch_survives_apiserver_restart_and_compaction_without_reapplying(
    cluster, sinks, fdir, kube_apiserver
):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true", f"{F}/n": "1"})
    s = sinks(node, fdir, *QUIET)
    wait_for(lambda: cluster.labels(node).get(f"{F}/n") == "1")
    wait_for(lambda: s.watching(), what="the watch is open")
    patches0, lists0 = s.requests("PATCH"), s.requests("LIST")
    rv0 = cluster.node(node).metadata.resource_version
    kube_apiserver.stop_apiserver()
    try:
        for i in range(5):  # etcd moves on while the API server is away ...
            kube_apiserver.etcd_put(f"k{i}", "x")
        kube_apiserver.etcd_compact()  # ... and forgets every older revision
    finally:
        kube_apiserver.start_apiserver()
    wait_for(
        lambda: s.metric("edgefd_sink_object_lists_total", reason="gone") >= 1 and s.watching(),
        60,
        f"relisted after the 410 and watching again; log:\n{s.tail()}",
    )
    time.sleep(1)
    # no re-apply storm: one list, no write, the Node untouched
    assert s.requests("PATCH") == patches0
    assert s.requests("LIST") - lists0 == 1
    assert cluster.node(node).metadata.resource_version == rv0
    # and the new watch repairs as before
    t0 = time.monotonic()
    cluster.set_label(node, f"{F}/n", None)
    wait_for(lambda: cluster.labels(node).get(f"{F}/n") == "1", 5, "repaired after the restart")
    assert time.monotonic() - t0 < 2


@pytest.mark.realpeer
def test_a_burst_of_foreign_label_changes_costs_no_sync_per_change(cluster, sinks, fdir):
    """Issue 30 item 9: another controller changing labels 50 times was 50 syncs. In its own
    namespace: none at all; in one of the sink's (a label the sink neither owns nor wants):
    coalesced, a few for the whole burst. Nothing written either way."""
    node = cluster.new_node({"example.com/gen": "0"})
    owned = {f"{F}/usb": "true", "edgefd.io/edgetpu.present": "true"}
    write(fdir, "usb-scan", owned)
    s = sinks(node, fdir, *QUIET)
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true", what="labels applied")
    wait_for(lambda: s.watching(), what="the watch is open")
    time.sleep(0.5)
    drift0 = s.metric("edgefd_sink_sync_triggers_total", trigger="drift")
    patches0, gets0 = s.requests("PATCH"), s.requests("GET")
    for i in range(50):
        cluster.set_label(node, "example.com/gen", str(i + 1))
    for i in range(50):
        cluster.set_label(node, f"{F}/other-controller", str(i))
    time.sleep(1.5)
    drift = s.metric("edgefd_sink_sync_triggers_total", trigger="drift") - drift0
    assert 1 <= drift <= 8, drift
    assert s.requests("PATCH") == patches0 and s.requests("GET") == gets0
    labels = cluster.labels(node)
    assert labels["example.com/gen"] == "50" and labels[f"{F}/other-controller"] == "49"
    assert {k: labels[k] for k in owned} == owned
