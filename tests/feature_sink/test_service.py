"""feature-sink's three ways to run (service.py), wired from one set of settings: the one-shot
runs (`--once`, `--dry-run`) waiting for a file caught mid-rewrite to settle, the dry run
printing the write it would send (against a Node with no labels when the API cannot be read),
and the service (serve) running with the API down (health served, not ready, SIGTERM exit 0),
its watch of the object or --no-watch, no request while idle, the API server's 429 Retry-After
honoured by both of its loops. In-process units and the command without an API server first;
then the service against the real kube-apiserver."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from edgefd.feature_sink.desired import read_directory
from edgefd.feature_sink.service import SETTLE_ROUNDS, read_settled
from tests.feature_sink.peer import (
    QUIET,
    ROOT,
    Cluster,
    F,
    dead_kubeconfig,
    run_sink,
    wait_for,
    write,
)
from tests.helpers import free_port

# -- the one-shot runs -------------------------------------------------------------------------


def test_a_one_shot_run_waits_for_a_fresh_file_to_settle(tmp_path):
    """`--once` and `--dry-run` have no later sync: a file written just now is read again once
    quiet, so what it no longer lists is removed by this very run."""
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
    f = tmp_path / "usb-scan"
    reads = 0

    def read():
        nonlocal reads
        reads += 1
        f.write_text(f"{F}/a={reads}\n")
        return read_directory(tmp_path, settle=0.05)

    d = read_settled(read)
    assert reads == SETTLE_ROUNDS + 1 and d.settling == {"usb-scan"}


def test_dry_run_from_stdin_without_api(tmp_path: Path):
    stream = f"{F}/usb-fe_1a6e_089a.present=true\nnode-role.kubernetes.io/master=\n".encode()
    kc = dead_kubeconfig(tmp_path)
    p = run_sink(
        "--dry-run",
        "--features",
        "-",
        "--node-name",
        "n1",
        "--kubeconfig",
        str(kc),
        "--api-timeout",
        "2",
        "-o",
        "json",
        stdin=stream,
    )
    assert p.returncode == 0, p.stderr
    ops = json.loads(p.stdout)
    assert {
        "op": "add",
        "path": "/metadata/labels",
        "value": {f"{F}/usb-fe_1a6e_089a.present": "true"},
    } not in ops  # empty map exists: per-key adds
    assert {
        "op": "add",
        "path": f"/metadata/labels/{F}~1usb-fe_1a6e_089a.present",
        "value": "true",
    } in ops
    assert b"Node with no labels" in p.stderr
    assert b"stdin:2: label refused: namespace node-role.kubernetes.io" in p.stderr
    assert b"master" not in p.stderr  # the refused key itself is not repeated
    text = run_sink(
        "--dry-run",
        "--features",
        "-",
        "--node-name",
        "n1",
        "--kubeconfig",
        str(kc),
        "--api-timeout",
        "2",
        stdin=stream,
    )
    assert text.stdout.decode().split() == ["add", f"{F}/usb-fe_1a6e_089a.present=true"]


# -- the service ---------------------------------------------------------------------------


def test_sigterm_with_api_down_exits_0_and_serves_health(tmp_path: Path):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgefd.feature_sink",
            "--features-dir",
            str(tmp_path),
            "--node-name",
            "n1",
            "--kubeconfig",
            str(dead_kubeconfig(tmp_path)),
            "--listen",
            f"127.0.0.1:{port}",
            "--max-backoff",
            "0.5",
            "--api-timeout",
            "1",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        import urllib.error
        import urllib.request

        def get(path: str) -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        end = time.monotonic() + 20
        while True:
            try:
                code, body = get("/metrics")
                if 'reason="unreachable"' in body:
                    break
            except OSError:
                pass
            assert time.monotonic() < end, "sink never served metrics"
            time.sleep(0.1)
        assert get("/healthz")[0] == 200
        code, body = get("/readyz")
        assert code == 503 and "no successful sync" in body
        assert proc.poll() is None  # API down never makes it exit
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.realpeer
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
    assert s.requests("LIST") == 0 and s.requests("WATCH") == 0
    assert s.metric("edgefd_sink_sync_triggers_total", trigger="drift") == 0


@pytest.mark.realpeer
@pytest.mark.slow
def test_an_idle_sink_sends_no_request_for_60_s(cluster, sinks, fdir, kube_apiserver):
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/usb-{i}": "true" for i in range(20)})
    s = sinks(node, fdir, "--resync-interval", "1h")
    wait_for(lambda: f"{F}/usb-19" in cluster.labels(node))
    wait_for(lambda: s.watching(), what="the watch is open")
    time.sleep(2)

    def server_node_requests() -> float:  # every client's, by the API server's own count
        return sum(
            kube_apiserver.metric_sum("apiserver_request_total", resource="nodes", verb=v)
            for v in ("GET", "LIST", "PATCH", "UPDATE", "POST")
        )

    ours0, server0 = s.requests(), server_node_requests()
    time.sleep(60)
    assert s.requests() == ours0, s.metrics()
    assert server_node_requests() == server0
    open_watches = kube_apiserver.metric_sum(
        "apiserver_longrunning_requests", resource="nodes", verb="WATCH"
    )
    assert open_watches >= 1 and s.watching()


# -- the API server's 429 Retry-After (its own priority and fairness rejecting the sink) -----

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


@pytest.mark.realpeer
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
    sent, refused = s.requests(), rejected() - before
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
