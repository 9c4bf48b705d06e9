"""The node's control plane and the clients the checks use.

The control plane is the real-peer API server of the other tests (tests/peers), with the
controllers a real node's DaemonSet needs and the kube-scheduler. Manifests go through the
harness-built ``kubectl`` (``apply -k``, as a user would); reads that must be fast (a Node
sampled every 100 ms) use plain HTTPS with the admin certificate.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import wait_until
from tests.peers.apiserver import KubeAPIServer

# What a DaemonSet on a real node needs: each namespace's "default" ServiceAccount and
# kube-root-ca.crt (the token volume's CA), the DaemonSet's pods, their removal with the
# DaemonSet (garbage collector) and the namespace's deletion. Names as of Kubernetes 1.37.
NODE_CONTROLLERS = [
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "daemonset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "resourceclaim-controller",  # claims from ResourceClaimTemplates (scripts/e2e --api dra)
    "device-taint-eviction-controller",  # NoExecute device taints (--evict-after, checks_evict)
    "deployment-controller",  # the evicted workload's controller (checks_evict)
    "replicaset-controller",
    "job-controller",  # the chart's policy gate, a pre-install/upgrade/rollback hook Job
]


def control_plane(workdir: Path, bin_dir: Path, port: int) -> KubeAPIServer:
    """etcd, kube-apiserver on ``127.0.0.1:port`` and kube-controller-manager (not started)."""
    return KubeAPIServer(workdir, bin_dir=bin_dir, port=port, controllers=NODE_CONTROLLERS)


def start_control_plane(cp: KubeAPIServer) -> None:
    """Start it all, and the kube-scheduler."""
    cp.start()
    cp.start_scheduler()


def _epoch(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


class KubeError(RuntimeError):
    def __init__(self, msg: str, status: int | None = None) -> None:
        super().__init__(msg)
        self.status = status


class Api:
    """Minimal JSON REST client: the admin's client certificate, or a bearer token."""

    def __init__(self, cp: KubeAPIServer, token: str | None = None) -> None:
        self.url = cp.url
        self.token = token
        self.ctx = ssl.create_default_context(cafile=cp.ca_file)
        if token is None:
            self.ctx.load_cert_chain(str(cp.pki.admin_crt), str(cp.pki.admin_key))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ctx) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise KubeError(f"{method} {path}: {e.code} {detail}", e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise KubeError(f"{method} {path}: {e}") from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except KubeError as e:
            if e.status == 404:
                return None
            raise


class Kubectl:
    """The harness-built kubectl with the admin kubeconfig."""

    def __init__(self, bin_dir: Path, kubeconfig: str) -> None:
        # its discovery cache goes beside the kubeconfig (the run's scratch dir), not into
        # $HOME/.kube (or ./.kube, where HOME is not set)
        cache = Path(kubeconfig).parent / "kubectl-cache"
        self.kubeconfig = kubeconfig
        self.argv = [str(bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}"]

    def __call__(self, *args: str, timeout: float = 120.0) -> str:
        r = subprocess.run([*self.argv, *args], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise KubeError(f"kubectl {' '.join(args[:3])}: {r.stderr.strip()[-2000:]}")
        return r.stdout

    def plugin(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``kubectl <plugin> ...`` as an operator types it: kubectl finds the plugin on PATH
        (``kubectl-edgefd``, the project's console script) and takes no flag before its name,
        so the kubeconfig is KUBECONFIG's."""
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        argv = [self.argv[0], *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def wait_for(
    what: str, fn: Callable[[], Any], timeout: float, interval: float = 0.1
) -> tuple[Any, float]:
    """Call ``fn`` until it returns something truthy; returns (value, seconds waited)."""
    start = time.monotonic()
    value = wait_until(fn, timeout, interval, what, errors=(KubeError,))
    return value, time.monotonic() - start


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def node_slices_path(node: str) -> str:
    """The ResourceSlices of edgefd.io on ``node``: what the sampler counts and checks read."""
    return f"{SLICES}?fieldSelector=spec.nodeName%3D{node},spec.driver%3Dedgefd.io"


@dataclass
class Sample:
    t: float  # time.monotonic()
    labels: dict[str, str]
    annotations: dict[str, str]
    allocatable: dict[str, str]
    capacity: dict[str, str]
    heartbeat: float = 0.0  # the kubelet's last status update (epoch s, whole seconds)
    slices: int = -1  # this node's ResourceSlices of edgefd.io (-1: not read, no DRA)


@dataclass
class NodeSampler:
    """Reads the Node every ``interval`` seconds in a thread, keeping every sample; with
    ``slices``, also how many ResourceSlices of edgefd.io the node has, so that when the first
    one appeared is known to a tenth of a second whatever check asks later."""

    api: Api
    node: str
    interval: float = 0.1
    slices: bool = False
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> NodeSampler:
        self._thread = threading.Thread(target=self._run, name="node-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                n = self.api.get(f"/api/v1/nodes/{self.node}")
                meta, status = n["metadata"], n.get("status", {})
                beats = [
                    c["lastHeartbeatTime"]
                    for c in status.get("conditions", [])
                    if c["type"] == "Ready" and c.get("lastHeartbeatTime")
                ]
                self.samples.append(
                    Sample(
                        t,
                        meta.get("labels") or {},
                        meta.get("annotations") or {},
                        status.get("allocatable") or {},
                        status.get("capacity") or {},
                        _epoch(beats[0]) if beats else 0.0,
                        self._slices() if self.slices else -1,
                    )
                )
            except KubeError:
                self.errors += 1
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t)))

    def _slices(self) -> int:
        return len(self.api.get(node_slices_path(self.node))["items"])

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        return self.samples

    def first(self, pred: Callable[[Sample], bool], since: float = 0.0) -> Sample | None:
        return next((s for s in list(self.samples) if s.t >= since and pred(s)), None)
