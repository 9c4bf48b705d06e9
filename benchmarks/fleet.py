"""A simulated fleet for bench_fleet.py: N real feature-sink processes against one API server,
the fleet's Nodes as an independent watch sees them, and the kubelets' own traffic as a yardstick.

Each simulated node is a real feature-sink process running the console script's code
(`edgefd.feature_sink.cli.main`) with its own features.d, Node, metrics endpoint, threads and
API connection. They are forked from one "zygote" that imported everything first (gunicorn's
preload), so the pages of the imported code are shared: 200 separately started interpreters
would need ~10 GB here, and the machine is shared. What one sink on a real node uses is
measured apart (a sink started on its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ZYGOTE = r"""
import gc, json, os, signal, sys
import kubernetes.client, kubernetes.config, urllib3, prometheus_client  # noqa: F401
import edgefd.feature_sink.cli, edgefd.feature_sink.service, edgefd.feature_sink.nodeapi
import edgefd.feature_sink.loop, edgefd.feature_sink.watched, edgefd.kube.listwatch
import edgefd.runtime.watch, edgefd.runtime.metrics, edgefd.runtime.signals  # noqa: F401
import ctypes
prctl = ctypes.CDLL(None, use_errno=True).prctl
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
gc.freeze()
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            prctl(1, int(signal.SIGKILL))  # die with the zygote
            os.setsid()
            fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0); os.dup2(fd, 1); os.dup2(fd, 2)
            sys.argv = ["feature-sink", *job["argv"]]
            edgefd.feature_sink.cli.main(args=job["argv"], prog_name="feature-sink")
        except SystemExit as e:
            os._exit(e.code if isinstance(e.code, int) else 1)
        except BaseException:
            os._exit(70)
        os._exit(0)
    print(pid, flush=True)
"""


class Zygote:
    """The preloaded parent the fleet's sinks are forked from."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("the zygote did not start")

    def fork(self, argv: list[str], log: Path) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def free_ports(n: int) -> list[int]:
    from tests.helpers import free_ports as fp

    return fp(n)


def write_features(d: Path, labels: dict[str, str]) -> None:
    tmp = d / ".usb-scan.tmp"
    tmp.write_text("".join(f"{k}={v}\n" for k, v in labels.items()))
    os.replace(tmp, d / "usb-scan")


class Sinks:
    """N feature-sink processes, one per Node, and their /metrics."""

    def __init__(self, zygote: Zygote, workdir: Path) -> None:
        self.zygote = zygote
        self.dir = workdir
        self.pids: dict[str, int] = {}
        self.ports: dict[str, int] = {}
        self.fdirs: dict[str, Path] = {}
        self.pool = ThreadPoolExecutor(8)

    def start(self, node: str, kubeconfig: str, labels: dict[str, str], *extra: str) -> None:
        d = self.dir / node / "features.d"
        d.mkdir(parents=True, exist_ok=True)
        write_features(d, labels)
        port = free_ports(1)[0]
        argv = [
            "--kubeconfig", kubeconfig, "--node-name", node, "--features-dir", str(d),
            "--listen", f"127.0.0.1:{port}", *extra,
        ]  # fmt: skip
        self.pids[node] = self.zygote.fork(argv, self.dir / node / "sink.log")
        self.ports[node] = port
        self.fdirs[node] = d

    def metrics(self, node: str) -> dict[str, float]:
        from measure import scrape

        return scrape(self.ports[node])

    def all_metrics(self) -> dict[str, dict[str, float]]:
        nodes = list(self.ports)
        return dict(zip(nodes, self.pool.map(self.metrics, nodes), strict=True))

    def stop(self) -> None:
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for pid in self.pids.values():
            while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
                time.sleep(0.05)
        self.pids.clear()
        self.ports.clear()


def total(m: dict[str, float], prefix: str, *must: str) -> float:
    return sum(v for k, v in m.items() if k.startswith(prefix) and all(x in k for x in must))


def memory_kib(pid: int) -> dict[str, int]:
    """Rss, Pss and private (Private_Clean + Private_Dirty) of a process, KiB."""
    out = {"Rss": 0, "Pss": 0, "Private": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    out[key] = int(rest.split()[0])
                elif key in ("Private_Clean", "Private_Dirty"):
                    out["Private"] += int(rest.split()[0])
    except OSError:
        pass
    return out


class NodeWatch:
    """The fleet's Nodes as one watch of the benchmark's own sees them: when each Node was
    first seen with a wanted label value."""

    def __init__(self, client: Any, selector: str) -> None:
        from edgefd.kube.listwatch import ListWatch

        self.labels: dict[str, dict[str, str]] = {}
        self.history: list[tuple[float, str, dict[str, str]]] = []
        self.cond = threading.Condition()
        path = f"/api/v1/nodes?labelSelector={selector}"
        self.lw = ListWatch(client, "nodes", path, "the fleet's Nodes", self)

    def start(self) -> NodeWatch:
        self.lw.start()
        return self

    def listed(self, objects: dict[str, dict[str, Any]], reason: str) -> None:
        now = time.monotonic()
        with self.cond:
            for name, obj in objects.items():
                self._seen(now, name, obj)
            self.cond.notify_all()

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        with self.cond:
            self._seen(now, obj["metadata"]["name"], obj)
            self.cond.notify_all()

    def lost(self) -> None:
        pass

    def _seen(self, now: float, name: str, obj: dict[str, Any]) -> None:
        labels = dict(obj["metadata"].get("labels") or {})
        self.labels[name] = labels
        self.history.append((now, name, labels))

    def when(
        self, nodes: list[str], key: str, value: str | None, since: float | None, timeout: float
    ) -> dict[str, float]:
        """For each node, the first time after `since` it was seen with key=value (None: the
        key absent; `since` None: a node already so counts now); waits until all are, or the
        timeout."""
        end = time.monotonic() + timeout
        wanted = set(nodes)
        found: dict[str, float] = {}
        idx = 0
        with self.cond:
            if since is None:  # already so now counts, as of now
                now = time.monotonic()
                found = {n: now for n in nodes if self.labels.get(n, {}).get(key) == value}
                since = now
            while True:
                for t, name, labels in self.history[idx:]:
                    if (
                        name in wanted
                        and name not in found
                        and t >= since
                        and labels.get(key) == value
                    ):
                        found[name] = t
                idx = len(self.history)
                if len(found) >= len(nodes) or time.monotonic() >= end:
                    return {n: found[n] for n in nodes if n in found}
                self.cond.wait(min(1.0, max(0.01, end - time.monotonic())))

    def stop(self) -> None:
        self.lw.stop()


def cpu_seconds(pid: int | None) -> float:
    from measure import cpu_seconds as cs

    return cs(pid) if pid else 0.0


class Kubelets:
    """The kubelets' own API traffic for the same Nodes, at their default rates: a Lease
    renewal (PUT) every 10 s (40 s lease, renewed at a quarter) and a Node status PATCH every
    5 minutes when nothing changed (nodeStatusReportFrequency); their GETs come from the
    kubelet's informer, not the API server."""

    LEASE_EVERY = 10.0
    STATUS_EVERY = 300.0

    def __init__(self, client: Any, nodes: list[str]) -> None:
        self.client = client
        self.nodes = nodes
        self.leases: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self._stop = threading.Event()

    def _lease_path(self, node: str = "") -> str:
        base = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        return f"{base}/{node}" if node else base

    def create(self) -> None:
        for n in self.nodes:
            body = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": n, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": n, "leaseDurationSeconds": 40, "renewTime": _now()},
            }  # fmt: skip
            self.leases[n] = self.client.request(
                "POST", "leases", self._lease_path(), "create lease", body, "application/json"
            )

    def run(self, seconds: float) -> None:
        """Renew every lease every LEASE_EVERY s and patch each status every STATUS_EVERY s,
        spread evenly, for `seconds`."""
        start = time.monotonic()
        n = len(self.nodes)
        events: list[tuple[float, str, str]] = []
        for i, node in enumerate(self.nodes):
            offset = self.LEASE_EVERY * i / n
            t = offset
            while t < seconds:
                events.append((t, "lease", node))
                t += self.LEASE_EVERY
            t = self.STATUS_EVERY * i / n
            while t < seconds:
                events.append((t, "status", node))
                t += self.STATUS_EVERY
        events.sort()
        with ThreadPoolExecutor(4) as pool:
            for at, kind, node in events:
                delay = start + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(self._lease if kind == "lease" else self._status, node)
        self.elapsed = time.monotonic() - start

    def _lease(self, node: str) -> None:
        lease = self.leases[node]
        lease["spec"]["renewTime"] = _now()
        self.leases[node] = self.client.request(
            "PUT", "leases", self._lease_path(node), "renew lease", lease, "application/json"
        )
        self.requests += 1

    def _status(self, node: str) -> None:
        cond = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": _now(),
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]  # fmt: skip
        self.client.request(
            "PATCH", "nodes", f"/api/v1/nodes/{node}/status", "node status",
            {"status": {"conditions": cond}}, "application/strategic-merge-patch+json",
        )  # fmt: skip
        self.requests += 1


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
