"""Running `devplugin --api dra` against the real API server, and the objects the real-peer
tests need around it: a schedulable Node, claims, pods, reading the slices back. The fixtures
built on it (`api`, `node`, `plugins`) are dra/conftest.py's; `start` runs a plugin among
`plugins` until its first slice is there."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from edgefd.devplugin.dra.kubeapi import DraApi
from edgefd.kube.client import connect
from tests.helpers import free_port, wait_until

ROOT = Path(__file__).resolve().parents[3]
DRIVER = "edgefd.io"
NAMESPACE = "edgefd-dra-test"
NODE_LABEL = "edgefd.io/test-node"
HOTPLUG_S = 1.0


def list_slices(api: Any, node: str, driver: str) -> dict[str, Any]:
    """`node`'s slices of `driver`, read once with `api`'s identity, by the query the
    publisher's list-watch uses (RBAC and the admission policy see the same request)."""
    resource, path = api.slices_query(node, driver)
    return api.request("GET", resource, path, f"list resourceslices of {node}") or {}


class DraPlugin:
    """`python -m edgefd.devplugin --api dra` on a fixture host, with its own kubelet and CDI
    directories (short paths: unix socket names are limited to 107 bytes)."""

    def __init__(
        self, host: Path, node: str, kubeconfig: str, *args: str, work: Path | None = None
    ):
        self.host = host
        self.node = node
        self.work = work or Path(tempfile.mkdtemp(prefix="dra-"))
        self.kubelet_dir = self.work / "kubelet"
        (self.kubelet_dir / "plugins_registry").mkdir(parents=True, exist_ok=True)
        self.cdi_dir = self.work / "cdi"
        self.port = free_port()
        self.log = self.work / "devplugin.log"
        self.args = [
            sys.executable,
            *("-m", "edgefd.devplugin", "--api", "dra"),
            f"--host-root={host}",
            f"--node-name={node}",
            f"--kubeconfig={kubeconfig}",
            f"--kubelet-dir={self.kubelet_dir}",
            f"--cdi-dir={self.cdi_dir}",
            f"--listen=127.0.0.1:{self.port}",
            "--rescan-interval=0.5s",
            "-v",
            *args,
        ]
        self.proc: subprocess.Popen | None = None

    def start(self) -> DraPlugin:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=fh)
        wait_until(self._metrics_up, 30, 0.1, "devplugin's /metrics")
        return self

    def _metrics_up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"devplugin exited {self.proc.returncode}:\n{self.stderr()}")
        try:
            self.metrics()
            return True
        except OSError:
            return False

    def metrics(self) -> dict[str, float]:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^(edgefd_\S+?)(\{[^}]*\})? (\S+)$", line)
            if m:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        return out

    def writes(self) -> float:
        return sum(
            v
            for k, v in self.metrics().items()
            if k.startswith("edgefd_devplugin_dra_slice_writes")
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.work, ignore_errors=True)

    def stderr(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


class Api:
    """What the tests ask the API server, as an administrator."""

    def __init__(self, kubeconfig: str) -> None:
        self.dra = connect(kubeconfig, 10.0, client_class=DraApi)

    def slices(self, node: str) -> list[dict[str, Any]]:
        return list_slices(self.dra, node, DRIVER).get("items") or []

    def devices(self, node: str) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for s in self.slices(node) for d in s["spec"].get("devices") or ()}

    def req(self, method: str, path: str, body: Any = None, ctype: str = "application/json"):
        return self.dra.request(
            method, "test", path, f"{method} {path}", body, ctype if body is not None else None
        )

    def schedulable_node(self, name: str, labels: dict[str, str] | None = None) -> None:
        """A Node the real scheduler will place pods on: room for pods, no not-ready taint."""
        with contextlib.suppress(Exception):
            self.req("DELETE", f"/api/v1/nodes/{name}")
        self.req(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels or {}},
            },
        )
        room = {"pods": "20", "cpu": "4", "memory": "8Gi"}
        self.req(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {
                "status": {
                    "capacity": room,
                    "allocatable": room,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Test"}],
                }
            },
            "application/merge-patch+json",
        )
        self.req(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"spec": {"taints": None}},
            "application/merge-patch+json",
        )

    def delete_node(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.req("DELETE", f"/api/v1/nodes/{name}")


def start(plugins: list[DraPlugin], api: Api, host: Path, node: str, work: Path | None = None):
    p = DraPlugin(host, node, api.kubeconfig, work=work)  # type: ignore[attr-defined]
    plugins.append(p)  # closed by the fixture also when it never comes up
    p.start()
    wait_until(lambda: api.slices(node), 20, 0.05, "the first ResourceSlice")
    return p


def claim(
    api: Api, name: str, selector: str | None, device_class: str = "edgetpu.edgefd.io"
) -> None:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    api.req(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "tpu", "exactly": exactly}]}},
        },
    )


def pod(api: Api, name: str, claim_name: str, node: str) -> None:
    api.req(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {NODE_LABEL: node},
                "automountServiceAccountToken": False,
                "resourceClaims": [{"name": "tpu", "resourceClaimName": claim_name}],
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "tpu"}]},
                    }
                ],
            },
        },
    )


def allocation(api: Api, name: str) -> list[dict[str, Any]] | None:
    obj = api.req("GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{name}")
    alloc = (obj.get("status") or {}).get("allocation")
    return None if alloc is None else alloc["devices"]["results"]
