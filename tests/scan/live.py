"""The live-labels pipeline against the real API server, for tests and the benchmark: a fixture
host, the bus-scan sidecar's command (`usb-scan --watch --also pci-scan`), feature-sink, and
a watch on the Node recording every label change with its time.

Devices are plugged and unplugged by editing the fixture host's sysfs (tests/fixturegen), which
is what the kernel does; on a fixture tree the watcher sees it through inotify.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixturegen import HostBuilder, build_host
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
TPU = "edgefd.io/edgetpu"
NFD = "feature.node.kubernetes.io"
CORAL_BOOT = {
    "vendor": "1a6e",
    "product": "089a",
    "class": "00",
    "speed": 5000,
    "interfaces": [{"class": "fe", "subclass": "01", "protocol": "02"}],
}
CORAL_RUNTIME = {
    "vendor": "18d1",
    "product": "9302",
    "class": "00",
    "speed": 5000,
    "manufacturer": "Google Inc.",
    "interfaces": [{"class": "ff", "subclass": "ff", "protocol": "ff"}],
}


class NodeHistory:
    """Every state of a Node's labels, timestamped (monotonic), from a watch."""

    def __init__(self, core: Any, node: str) -> None:
        self.core = core
        self.node = node
        self.states: list[tuple[float, dict[str, str]]] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="node-watch")

    def start(self) -> NodeHistory:
        self._thread.start()
        return self

    def _run(self) -> None:
        import kubernetes

        w = kubernetes.watch.Watch()
        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    obj = self.core.read_node(self.node)
                    rv = obj.metadata.resource_version
                    self._record(obj)
                for ev in w.stream(
                    self.core.list_node,
                    field_selector=f"metadata.name={self.node}",
                    resource_version=rv,
                    timeout_seconds=5,
                ):
                    obj = ev["object"]
                    rv = obj.metadata.resource_version
                    self._record(obj)
                    if self._stop.is_set():
                        w.stop()
                        break
            except Exception:  # a closed or expired watch: read afresh
                rv = None
                time.sleep(0.05)

    def _record(self, obj: Any) -> None:
        labels = dict(obj.metadata.labels or {})
        with self._cond:
            if not self.states or self.states[-1][1] != labels:
                self.states.append((time.monotonic(), labels))
                self._cond.notify_all()

    def wait(self, pred: Callable[[dict[str, str]], bool], timeout: float, since: float) -> float:
        """The time of the first state at or after `since` satisfying `pred`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for t, labels in self.states:
                    if t >= since and pred(labels):
                        return t
                left = deadline - time.monotonic()
                if left <= 0:
                    last = self.states[-1][1] if self.states else None
                    raise AssertionError(f"no such Node state in {timeout}s; last: {last}")
                self._cond.wait(left)

    def current(self) -> dict[str, str]:
        with self._cond:
            return dict(self.states[-1][1]) if self.states else {}

    def between(self, start: float, end: float) -> list[dict[str, str]]:
        """The states in force at any moment of [start, end]."""
        with self._cond:
            before = [s for t, s in self.states if t <= start][-1:]
            return before + [s for t, s in self.states if start < t <= end]

    def stop(self) -> None:
        self._stop.set()


class LivePipeline:
    """A fixture host, the bus-scan sidecar command and feature-sink, for one new Node."""

    def __init__(self, apiserver: Any, tmp: Path, node_description: str = "rpi4-coral") -> None:
        import kubernetes.client as k8s

        self.tmp = tmp
        self.host = build_host(node_description, tmp / "host", devicetree=False)
        self.builder = HostBuilder(self.host)
        self.features = tmp / "features.d"
        self.features.mkdir()
        self.core = k8s.CoreV1Api(apiserver.admin_api())
        self.node = f"live-{uuid.uuid4().hex[:10]}"
        self.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node}})
        self.kubeconfig = str(apiserver.kubeconfig)
        self.scan_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.history = NodeHistory(self.core, self.node)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - owned by the process
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=log)
        log.close()
        self.procs.append(proc)
        return proc

    def start(self, hold: str = "3s") -> LivePipeline:
        py = sys.executable
        self._spawn(
            "bus-scan",
            [py, "-m", "edgefd.usb_scan", "--watch", "--also", "pci-scan",
             "--host-root", str(self.host), "--features-dir", str(self.features),
             "--hold", hold, "--listen", f"127.0.0.1:{self.scan_port}", "-v"],
        )  # fmt: skip
        self._wait_ready()
        # as in the pod: the sink starts once the sidecar's startup probe passed
        self._spawn(
            "feature-sink",
            [py, "-m", "edgefd.feature_sink", "--kubeconfig", self.kubeconfig,
             "--node-name", self.node, "--features-dir", str(self.features),
             "--listen", "", "--resync-interval", "60s", "--api-timeout", "5s", "-v"],
        )  # fmt: skip
        self.history.start()
        self.history.wait(lambda s: s.get(f"{TPU}.present") == "true", 30, 0.0)
        return self

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.scan_port}/readyz"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"bus-scan never ready:\n{self.log('bus-scan')}")

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.history.stop()
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        self.core.api_client.close()
