"""feature-sink's watch on its own Node, against the real kube-apiserver: foreign edits of owned
labels repaired within a second (foreign labels and the ownership annotation's trust rules as
before), a fight with another writer backed off, the watch surviving an API-server restart and
an etcd compaction (410) without re-applying anything, no request at all while idle, and the
API server's 429 Retry-After honoured (its own priority and fairness rejecting the sink's
requests)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from edgefd.feature_sink.ownership import ANNOTATION
from tests.feature_sink.peer import Cluster, F, Sink, wait_for, write

pytestmark = pytest.mark.realpeer

QUIET = ("--resync-interval", "1h")  # only the watch repairs; the resync never runs here


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


def watching(s: Sink) -> bool:
    return s.metric("edgefd_sink_object_watch_up") == 1


def requests(s: Sink, verb: str | None = None) -> float:
    m = s.metrics()
    return sum(
        v
        for k, v in m.items()
        if k.startswith("edgefd_sink_api_requests_total") and (verb is None or f'"{verb}"' in k)
    )


def test_foreign_edits_of_owned_labels_are_repaired_within_a_second(cluster, sinks, fdir):
    node = cluster.new_node({"example.com/team": "edge"})
    owned = {f"{F}/usb": "true", f"{F}/count": "2", "edgefd.io/edgetpu.present": "true"}
    write(fdir, "usb-scan", owned)
    s = sinks(node, fdir, *QUIET)
    wait_for(lambda: cluster.labels(node).get(f"{F}/count") == "2", what="labels applied")
    wait_for(lambda: watching(s), what="the watch is open")
    # one watch-mode metric in every tool (issue 25 item 8; was edgefd_sink_watch_mode)
    assert s.metric("edgefd_watch_mode", component="feature-sink", mode="inotify") == 1
    events = NodeEvents(cluster, node).start()
    try:
        writes0, gets0 = requests(s, "PATCH"), requests(s, "GET")
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
            time.sleep(2.2)  # not a fight (see test_a_fight_over_a_label_backs_off)
        assert max(latencies) < 1.0, latencies
        labels = cluster.labels(node)
        assert labels["example.com/team"] == "edge-7"  # never touched
        assert {k: labels[k] for k in owned} == owned
        # each repair: one guarded PATCH planned against the watch's copy, no read
        assert requests(s, "PATCH") - writes0 == 8
        assert requests(s, "GET") - gets0 == 0
        assert s.metric("edgefd_sink_repairs_total") == 8
        assert s.metric("edgefd_sink_sync_triggers_total", trigger="drift") >= 8
    finally:
        events.stop()


def test_the_trust_rules_hold_when_the_watch_wakes_the_sink(cluster, sinks, fdir):
    """A tampered annotation seen through the watch is judged as at any sync: a forged claim on
    a label the policy refuses is dropped (the label kept), an unreadable one blocks every
    write until a person removes it."""
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    s = sinks(node, fdir, *QUIET)
    wait_for(lambda: f"{F}/usb" in cluster.ownership(node).keys, what="owned")
    wait_for(lambda: watching(s), what="the watch is open")
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


def test_a_fight_over_a_label_backs_off(cluster, sinks, fdir):
    """Another writer that removes an owned label again and again (a controller bug): the
    sink repairs, but after a few repairs in a row it backs off instead of trading writes with
    it as fast as the API server takes them."""
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    s = sinks(node, fdir, *QUIET, "--max-backoff", "30s")
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true")
    wait_for(lambda: watching(s), what="the watch is open")
    writes0 = requests(s, "PATCH")
    flips = 0
    end = time.monotonic() + 6
    while time.monotonic() < end:
        if f"{F}/usb" in cluster.labels(node):
            cluster.set_label(node, f"{F}/usb", None)
            flips += 1
        time.sleep(0.05)
    writes = requests(s, "PATCH") - writes0
    repairs = s.metric("edgefd_sink_repairs_total")
    # 3 quick repairs, then waits of 0.25-0.5, 0.5-1, 1-2, 2-4 s ...: a handful in 6 s (a
    # repair may take two PATCHes: the other writer can move the Node between plan and write)
    fights = [line for line in s.tail().splitlines() if "fighting" in line]
    assert 3 <= repairs <= 8 and writes <= 2 * repairs, (repairs, writes, flips, fights)
    assert s.metric("edgefd_sink_repair_holds_total") >= 1
    assert "fighting over them" in s.tail()


def test_watch_survives_apiserver_restart_and_compaction_without_reapplying(
    cluster, sinks, fdir, kube_apiserver
):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true", f"{F}/n": "1"})
    s = sinks(node, fdir, *QUIET)
    wait_for(lambda: cluster.labels(node).get(f"{F}/n") == "1")
    wait_for(lambda: watching(s), what="the watch is open")
    patches0, lists0 = requests(s, "PATCH"), requests(s, "LIST")
    rv0 = cluster.node(node).metadata.resource_version
    kube_apiserver.stop_apiserver()
    try:
        for i in range(5):  # etcd moves on while the API server is away ...
            kube_apiserver.etcd_put(f"k{i}", "x")
        kube_apiserver.etcd_compact()  # ... and forgets every older revision
    finally:
        kube_apiserver.start_apiserver()
    wait_for(
        lambda: s.metric("edgefd_sink_object_lists_total", reason="gone") >= 1 and watching(s),
        60,
        f"relisted after the 410 and watching again; log:\n{s.tail()}",
    )
    time.sleep(1)
    # no re-apply storm: one list, no write, the Node untouched
    assert requests(s, "PATCH") == patches0
    assert requests(s, "LIST") - lists0 == 1
    assert cluster.node(node).metadata.resource_version == rv0
    # and the new watch repairs as before
    t0 = time.monotonic()
    cluster.set_label(node, f"{F}/n", None)
    wait_for(lambda: cluster.labels(node).get(f"{F}/n") == "1", 5, "repaired after the restart")
    assert time.monotonic() - t0 < 2


def test_no_watch_reads_the_node_at_each_sync_and_repairs_at_the_resync(cluster, sinks, fdir):
    """--no-watch (RBAC without list/watch): no list or watch is ever sent; a foreign edit
    waits for the resync."""
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})
    s = sinks(node, fdir, "--no-watch", "--resync-interval", "3s")
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true")
    # past the start-up syncs (the first, and the one once the new file has settled)
    wait_for(lambda: s.metric("edgefd_sink_sync_triggers_total", trigger="resync") >= 1, 10)
    resyncs = s.metric("edgefd_sink_sync_triggers_total", trigger="resync")
    cluster.set_label(node, f"{F}/usb", None)
    wait_for(lambda: cluster.labels(node).get(f"{F}/usb") == "true", 10, "repaired at the resync")
    assert s.metric("edgefd_sink_sync_triggers_total", trigger="resync") > resyncs
    assert requests(s, "LIST") == 0 and requests(s, "WATCH") == 0
    assert s.metric("edgefd_sink_sync_triggers_total", trigger="drift") == 0


@pytest.mark.slow
def test_an_idle_sink_sends_no_request_for_60_s(cluster, sinks, fdir, kube_apiserver):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb-{i}": "true" for i in range(20)})
    s = sinks(node, fdir, "--resync-interval", "1h")
    wait_for(lambda: f"{F}/usb-19" in cluster.labels(node))
    wait_for(lambda: watching(s), what="the watch is open")
    time.sleep(2)

    def server_node_requests() -> float:  # every client's, by the API server's own count
        return sum(
            kube_apiserver.metric_sum("apiserver_request_total", resource="nodes", verb=v)
            for v in ("GET", "LIST", "PATCH", "UPDATE", "POST")
        )

    ours0, server0 = requests(s), server_node_requests()
    time.sleep(60)
    assert requests(s) == ours0, s.metrics()
    assert server_node_requests() == server0
    open_watches = kube_apiserver.metric_sum(
        "apiserver_longrunning_requests", resource="nodes", verb="WATCH"
    )
    assert open_watches >= 1 and watching(s)


APF_NS = "edgefd-apf"
APF_LEVEL = "edgefd-test-reject"
HOLD = 20  # seconds the slow webhook keeps the level's one request executing


class SlowWebhook:
    """An admission webhook that answers "allowed" after HOLD seconds: a request it admits
    keeps its priority level's only seat for that long (TLS with the API server's own serving
    certificate, which names 127.0.0.1 and is signed by the cluster CA)."""

    def __init__(self, apiserver: Any) -> None:
        import ssl
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(HOLD)
                out = json.dumps({
                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": True},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(apiserver.pki.server_crt), str(apiserver.pki.server_key))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def throttled(cluster: Cluster, kube_apiserver: Any) -> Any:
    """A priority level with no seat of its own (API priority and fairness, Reject): while a
    request of it executes, every other is answered 429 with Retry-After. A "holder" account
    keeps one executing (a ConfigMap create that a slow webhook admits after HOLD s); the
    sink's account shares the level under a FlowSchema of its own (so its 429s are counted
    apart). Yields (the sink's kubeconfig, release(): stop holding)."""
    import base64

    import kubernetes.client as k8s

    api = kube_apiserver.admin_api()
    rbac = k8s.RbacAuthorizationV1Api(api)
    flow = k8s.FlowcontrolApiserverV1Api(api)
    admission = k8s.AdmissionregistrationV1Api(api)
    webhook = SlowWebhook(kube_apiserver)
    undo: list[Any] = [webhook.stop]
    for sa in ("sink", "holder"):
        kube_apiserver.ensure_service_account(APF_NS, sa)
    rbac.create_cluster_role_binding({
        "metadata": {"name": "edgefd-apf"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": APF_NS}
                     for sa in ("sink", "holder")],
    })  # fmt: skip
    undo.append(lambda: rbac.delete_cluster_role_binding("edgefd-apf"))
    flow.create_priority_level_configuration({
        "metadata": {"name": APF_LEVEL},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"}}},
    })  # fmt: skip
    undo.append(lambda: flow.delete_priority_level_configuration(APF_LEVEL))
    for sa in ("sink", "holder"):
        flow.create_flow_schema({
            "metadata": {"name": f"edgefd-test-{sa}"},
            "spec": {
                "priorityLevelConfiguration": {"name": APF_LEVEL},
                "matchingPrecedence": 10,
                "rules": [{
                    "subjects": [{"kind": "ServiceAccount",
                                  "serviceAccount": {"name": sa, "namespace": APF_NS}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                       "clusterScope": True, "namespaces": ["*"]}],
                }],
            },
        })  # fmt: skip
        undo.append(lambda sa=sa: flow.delete_flow_schema(f"edgefd-test-{sa}"))
    ca = base64.b64encode(Path(kube_apiserver.ca_file).read_bytes()).decode()
    admission.create_validating_webhook_configuration({
        "metadata": {"name": "edgefd-test-slow"},
        "webhooks": [{
            "name": "slow.edgefd.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "timeoutSeconds": HOLD + 5, "failurePolicy": "Ignore",
            "clientConfig": {"url": webhook.url, "caBundle": ca},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": APF_NS}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}],
        }],
    })  # fmt: skip
    undo.append(lambda: admission.delete_validating_webhook_configuration("edgefd-test-slow"))
    holder = kube_apiserver.api_for_token(kube_apiserver.mint_token(APF_NS, "holder"))
    sink_kubeconfig = kube_apiserver.kubeconfig_for_token(kube_apiserver.mint_token(APF_NS, "sink"))
    holding = threading.Event()
    holding.set()

    def hold() -> None:
        core = k8s.CoreV1Api(holder)
        n = 0
        while holding.is_set():
            n += 1
            body = {"metadata": {"name": f"hold-{uuid.uuid4().hex[:8]}"}}
            try:
                core.create_namespaced_config_map(APF_NS, body, _request_timeout=HOLD + 10)
            except Exception:  # rejected in a race with the sink: just go again
                time.sleep(0.01)

    holder_thread = threading.Thread(target=hold, daemon=True)
    holder_thread.start()

    def seat_held() -> bool:
        from edgefd.kube.client import connect
        from edgefd.kube.errors import ApiUnreachable

        try:
            connect(sink_kubeconfig, 5).request("GET", "nodes", "/api/v1/nodes?limit=1", "probe")
        except ApiUnreachable as e:
            return e.retry_after is not None
        return False

    try:
        wait_for(seat_held, 30, "429 for the sink's account")
        yield sink_kubeconfig, holding.clear
    finally:
        holding.clear()
        for fn in reversed(undo):
            try:
                fn()
            except k8s.exceptions.ApiException as e:
                if e.status != 404:
                    raise


def test_the_api_servers_429_retry_after_is_honoured(
    cluster, sinks, fdir, kube_apiserver, throttled
):
    kubeconfig, release = throttled
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb": "true"})

    def rejected() -> float:
        return kube_apiserver.metric_sum(
            "apiserver_flowcontrol_rejected_requests_total", flow_schema="edgefd-test-sink"
        )

    before = rejected()
    # two loops (sync, watch) retrying every 0.05-0.1 s, were the Retry-After ignored
    s = sinks(node, fdir, "--kubeconfig", kubeconfig, "--max-backoff", "0.1s", *QUIET)
    time.sleep(8)
    sent, refused = requests(s), rejected() - before
    assert s.metric("edgefd_sink_api_throttled_total", by="server") >= 1, s.tail()
    assert "asked to retry after" in s.tail()
    # the whole client waits each Retry-After (>= 1 s): when it ends, each of the two loops
    # may send one, so at most about two requests a second, where ignoring it would have sent
    # ~160 in these 8 s
    assert 1 <= refused <= sent <= 20, (refused, sent, s.metrics())
    assert f"{F}/usb" not in cluster.labels(node)
    release()
    wait_for(
        lambda: cluster.labels(node).get(f"{F}/usb") == "true", HOLD + 40, "applied once lifted"
    )
