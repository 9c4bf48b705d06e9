"""node-feature-discovery's own programs, built by the harness from the pinned module: the
nfd-worker run once against a fixture host root (the differential oracle of the USB/PCI
labels), and nfd-master, the single writer of feature labels in `--mode nodefeature`, with
NFD's CRDs from the same module (never hand-written)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port

from .processes import harness_binary, kill, spawn, tail

NFD_WORKER = "nfd-worker"
NFD_MASTER = "nfd-master"
NFD_CRDS = "nfd-api-crds.yaml"  # deployment/base/nfd-crds/ of the pinned module


class NFDWorker:
    """Runs the upstream nfd-worker once (``-oneshot -no-publish``) against a
    fixture host root (a directory with ``sys/``, ``etc/``, ... inside) and
    returns the labels it would publish."""

    def __init__(self, bin_path: Path | None = None):
        self.bin_path = Path(bin_path) if bin_path else harness_binary(NFD_WORKER)

    def run(
        self,
        host_root: str | Path,
        sources: str = "usb,pci",
        options: dict | None = None,
        timeout: float = 60.0,
    ) -> dict[str, str]:
        with tempfile.TemporaryDirectory(prefix="nfd-") as tmp:
            out = Path(tmp) / "labels.json"
            argv = [
                str(self.bin_path),
                f"-host-root={host_root}",
                f"-labels-out={out}",
                "-oneshot",
                "-no-publish",
                f"-label-sources={sources}",
                f"-feature-sources={sources}",
                f"-config={Path(tmp) / 'none.conf'}",
            ]
            if options:
                argv.append(f"-options={json.dumps(options)}")
            r = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "NODE_NAME": "fixture-node"},
            )
            if r.returncode != 0 or not out.exists():
                raise RuntimeError(f"nfd-worker failed ({r.returncode}):\n{r.stderr[-4000:]}")
            return json.loads(out.read_text())


@pytest.fixture(scope="session")
def nfd_worker() -> NFDWorker:
    return NFDWorker()


def install_nfd_crds(apiserver: Any, timeout: float = 60.0) -> list[str]:
    """Create NFD's CRDs (the pinned module's deployment file; existing ones are kept) and wait
    until each is Established. Their names."""
    import kubernetes.client as k8s
    import yaml

    text = harness_binary(NFD_CRDS, executable=False).read_text()
    crds = [d for d in yaml.safe_load_all(text) if d]
    ext = k8s.ApiextensionsV1Api(apiserver.admin_api())
    for crd in crds:
        try:
            ext.create_custom_resource_definition(crd)
        except k8s.exceptions.ApiException as e:
            if e.status != 409:
                raise
    names = [c["metadata"]["name"] for c in crds]
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = ext.read_custom_resource_definition(name)
            conds = crd.status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not established after {timeout}s")
            time.sleep(0.2)
    return names


class NFDMaster:
    """The upstream nfd-master against the harness API server (admin kubeconfig), reading
    NodeFeature objects of every namespace and writing the Nodes' labels.

    nfd-master patches the Node it runs on at start-up, so `node` must exist; `extra_label_ns`
    are label namespaces it accepts besides NFD's own. Its metrics (served on every address:
    upstream binds `:PORT`, cmd/nfd-master -port) say when it is up and how many Node updates
    it made."""

    def __init__(
        self,
        apiserver: Any,
        workdir: Path,
        node: str,
        namespace: str = "node-feature-discovery",
        extra_label_ns: tuple[str, ...] = (),
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.bin_path = harness_binary(NFD_MASTER)
        self.apiserver = apiserver
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "nfd-master.log"
        self.node = node
        self.namespace = namespace
        self.metrics_port = free_port()
        self.argv = [
            str(self.bin_path),
            f"-kubeconfig={apiserver.kubeconfig}",
            f"-config={self.dir / 'nfd-master.conf'}",  # absent: the defaults
            f"-port={self.metrics_port}",  # metrics and healthz (v0.19.0; -metrics before)
            *([f"-extra-label-ns={','.join(extra_label_ns)}"] if extra_label_ns else []),
            *extra_args,
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> NFDMaster:
        env = {**os.environ, "NODE_NAME": self.node, "KUBERNETES_NAMESPACE": self.namespace}
        self.proc = spawn(self.argv, self.log, env=env)
        deadline = time.monotonic() + timeout
        while self._metrics_text() is None:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"nfd-master exited with {self.proc.returncode}:\n{tail(self.log)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"nfd-master not up after {timeout}s:\n{tail(self.log)}")
            time.sleep(0.2)
        return self

    def _metrics_text(self) -> str | None:
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode()
        except (urllib.error.URLError, OSError):
            return None

    def metric(self, name: str) -> float:
        """The sum of a metric's samples (e.g. nfd_master_node_updates_total)."""
        total = 0.0
        for line in (self._metrics_text() or "").splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        kill(self.proc)
        self.proc = None

    def tail(self) -> str:
        return tail(self.log)


class NFDWorkerDaemon:
    """The upstream nfd-worker as deployed (no -oneshot, publishing): its NodeFeature object
    `node` in `namespace` of the harness API server (admin kubeconfig), its local source on
    `features_dir` with the fsnotify watch of NFD's release (source/local/local.go), only the
    local source enabled (the others would read this machine)."""

    def __init__(
        self,
        apiserver: Any,
        workdir: Path,
        features_dir: Path,
        node: str,
        namespace: str = "node-feature-discovery",
    ) -> None:
        self.apiserver = apiserver
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "nfd-worker.log"
        self.node = node
        self.namespace = namespace
        self.argv = [
            str(harness_binary(NFD_WORKER)),
            "-oneshot=false",
            "-no-publish=false",
            f"-kubeconfig={apiserver.kubeconfig}",
            f"-features-dir={features_dir}",
            f"-config={self.dir / 'nfd-worker.conf'}",  # absent: the defaults (60 s re-scan)
            "-feature-sources=local",
            "-label-sources=local",
            "-v=2",  # its fsnotify events, for a failure's log
        ]
        self.proc: subprocess.Popen | None = None
        self._objects: Any = None  # one client for the polls

    def start(self, timeout: float = 60.0) -> NFDWorkerDaemon:
        """Start it and wait until its first NodeFeature is there."""
        import kubernetes.client as k8s

        core = k8s.CoreV1Api(self.apiserver.admin_api())
        try:
            core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.namespace)))
        except k8s.exceptions.ApiException as e:
            if e.status != 409:
                raise
        env = {**os.environ, "NODE_NAME": self.node, "KUBERNETES_NAMESPACE": self.namespace}
        self.proc = spawn(self.argv, self.log, env=env)
        deadline = time.monotonic() + timeout
        while self.labels() is None:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"nfd-worker exited with {self.proc.returncode}:\n{tail(self.log)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"no NodeFeature after {timeout}s:\n{tail(self.log)}")
            time.sleep(0.1)
        return self

    def labels(self) -> dict[str, str] | None:
        """spec.labels of its NodeFeature (None while there is none)."""
        import kubernetes.client as k8s

        if self._objects is None:
            self._objects = k8s.CustomObjectsApi(self.apiserver.admin_api())
        try:
            obj = self._objects.get_namespaced_custom_object(
                "nfd.k8s-sigs.io", "v1alpha1", self.namespace, "nodefeatures", self.node
            )
        except k8s.exceptions.ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(obj.get("spec", {}).get("labels") or {})

    def stop(self) -> None:
        kill(self.proc)
        self.proc = None

    def tail(self) -> str:
        return tail(self.log)
