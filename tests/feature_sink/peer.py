"""The feature-sink's real-peer harness: a Node on the real kube-apiserver (`Cluster`) and the
sink as a subprocess (`Sink`, `run_sink`, `run_once`), with what the tests read of them (the
Node's Events, the sink's metrics and log), shared by every sink test module that runs the sink
(conftest's fixtures, the real-API-server tests, the command's tests without an API server)
and by the manifests' tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgefd.feature_sink.ownership import ANNOTATION, decode
from tests.helpers import free_port, untimed, wait_until

ROOT = Path(__file__).resolve().parents[2]
F = "feature.node.kubernetes.io"
# the sink's account in k8s/rbac.yaml (tests/k8s/test_manifests.py holds the manifests to it)
SINK_SA = "edgefd-feature-sink"
QUIET = ("--resync-interval", "1h")  # only the watch repairs; the resync never runs


# -- helpers -------------------------------------------------------------------------------


def wait_for(pred: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """wait_until with this suite's pace (an API server restart takes seconds)."""
    return wait_until(pred, timeout, 0.05, what)


class Cluster:
    """Admin access to the harness apiserver, plus Node helpers."""

    def __init__(self, apiserver: Any) -> None:
        import kubernetes.client as k8s

        self.apiserver = apiserver
        self.kubeconfig = str(apiserver.kubeconfig)
        self.core = k8s.CoreV1Api(apiserver.admin_api())
        self.k8s = k8s

    def new_node(self, labels: dict[str, str] | None = None) -> str:
        name = f"sink-{uuid.uuid4().hex[:10]}"
        self.core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                },
            }
        )
        return name

    def node(self, name: str) -> Any:
        return self.core.read_node(name)

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name).metadata.labels or {})

    def ownership(self, name: str):
        ann = self.node(name).metadata.annotations or {}
        return decode(ann.get(ANNOTATION))

    def set_label(self, name: str, key: str, value: str | None) -> None:
        self.core.patch_node(name, {"metadata": {"labels": {key: value}}})

    def events(self, name: str) -> list[Any]:
        evs = self.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={name}"
        )
        return list(evs.items)

    def node_patches_total(self) -> float:
        """The API server's own count of PATCH requests on nodes (all clients)."""
        import ssl

        a = self.apiserver
        ctx = ssl.create_default_context(cafile=a.ca_file)
        ctx.load_cert_chain(str(a.pki.admin_crt), str(a.pki.admin_key))
        with urllib.request.urlopen(f"{a.url}/metrics", timeout=10, context=ctx) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if (
                line.startswith("apiserver_request_total{")
                and 'verb="PATCH"' in line
                and 'resource="nodes"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total


def event_messages(cluster: Cluster, node: str, reason: str | None = None) -> list[str]:
    """The messages of the Node's Events (of one reason)."""
    return [e.message for e in cluster.events(node) if reason is None or e.reason == reason]


def forget_other_tests_nodes(cluster: Cluster) -> None:
    """The API server is the session's: other tests left Nodes with (tampered) annotations.
    A cluster being uninstalled has only its own sink's; take theirs away."""
    for n in cluster.core.list_node().items:
        if ANNOTATION in (n.metadata.annotations or {}):
            cluster.core.patch_node(
                n.metadata.name, {"metadata": {"annotations": {ANNOTATION: None}}}
            )


class Sink:
    """A feature-sink subprocess with its metrics endpoint."""

    def __init__(
        self,
        cluster: Cluster,
        node: str,
        features: Path,
        tmp: Path,
        *extra: str,
        verbose: bool = True,
    ):
        self.port = free_port()
        self.log_path = tmp / f"sink-{uuid.uuid4().hex[:6]}.log"
        self.args = [
            sys.executable,
            "-m",
            "edgefd.feature_sink",
            "--kubeconfig",
            cluster.kubeconfig,
            "--node-name",
            node,
            "--features-dir",
            str(features),
            "--listen",
            f"127.0.0.1:{self.port}",
            "--resync-interval",
            "2s",
            "--max-backoff",
            "1s",
            "--api-timeout",
            "3s",
            *(["-vv"] if verbose else []),
            *extra,
        ]
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stderr=self.log, stdout=self.log)

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=3) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def metric(self, name: str, **labels: str) -> float:
        want = name + (
            "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""
        )
        return self.metrics().get(want, 0.0)

    def wait_synced(self, n: int = 1, timeout: float = 20) -> None:
        wait_for(
            lambda: self.metric("edgefd_sink_syncs_total", result="success") >= n,
            timeout,
            f"{n} successful sync(s); log:\n{self.tail()}",
        )

    def tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def lines(self) -> list[str]:
        """The whole log, line by line, without each line's leading time."""
        self.log.flush()
        return untimed(self.log_path.read_text(errors="replace")).splitlines()

    def logged(self, pattern: str, timeout: float = 15.0) -> str:
        """The first log line matching `pattern` (a regular expression), waited for."""
        rx = re.compile(pattern)
        return wait_for(
            lambda: next((ln for ln in self.lines() if rx.search(ln)), None),
            timeout,
            f"a log line like {pattern!r}; log:\n" + "\n".join(self.lines()[-30:]),
        )

    def watching(self) -> bool:
        """The watch on the sink's own object is open."""
        return self.metric("edgefd_sink_object_watch_up") == 1

    def requests(self, verb: str | None = None) -> float:
        """API requests the sink sent (of one verb), by its own count."""
        m = self.metrics()
        return sum(
            v
            for k, v in m.items()
            if k.startswith("edgefd_sink_api_requests_total") and (verb is None or f'"{verb}"' in k)
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(20)
        finally:
            self.log.close()


def write(d: Path, name: str, labels: dict[str, str]) -> None:
    tmp = d / f".{name}.tmp"
    tmp.write_text("".join(f"{k}={v}\n" for k, v in labels.items()))
    os.replace(tmp, d / name)


def run_sink(
    *args: str, stdin: bytes = b"", env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """`python -m edgefd.feature_sink ARGS` to its end (with `env` added to the environment)."""
    return subprocess.run(
        [sys.executable, "-m", "edgefd.feature_sink", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def run_once(cluster: Cluster, node: str, fdir: Path, *extra: str) -> Any:
    """`feature-sink --once` for `node` with `fdir`, against the cluster, to its end."""
    return run_sink(
        "--once",
        "--kubeconfig",
        cluster.kubeconfig,
        "--node-name",
        node,
        "--features-dir",
        str(fdir),
        "--api-timeout",
        "5",
        *extra,
    )


def dead_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig pointing at a port nobody listens on."""
    port = free_port()
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path
