"""A cluster for kubectl-edgefd's tests: a real etcd + kube-apiserver + kube-scheduler of its
own (tests/peers/apiserver.py), with kube-controller-manager's resourceclaim controller (it
makes a template's claims), and the objects edgefd's tools would put there.

Nodes are made as a kubelet and feature-sink would leave them: labels from the real
producers' dry runs on a fixture host, capacity and allocatable from `devplugin --dry-run`
counted as the kubelet counts them, ResourceSlices from `devplugin --api dra --dry-run`
(renamed for the test's node). Pods are created unbound and the real scheduler places them,
or leaves them Pending with its own reason. Every object a test made is removed after it
(`Cluster.clear`): each test starts from an empty cluster.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

from edgefd.kube.client import connect
from edgefd.kube.errors import ApiConflict, ApiNotFound
from tests.fixturegen import build_host

ROOT = Path(__file__).resolve().parents[2]
NS = "why-test"
EDGEFD_NS = "edgefd"
DRA = "/apis/resource.k8s.io/v1"
MERGE = "application/merge-patch+json"
IMAGE = "ghcr.io/edgefd/edgefd:0.1.0"
CONTROLLERS = ["resourceclaim-controller"]


def tool(name: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", f"edgefd.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{name} {args}: {proc.stderr}"
    return proc.stdout


@cache
def host(fixture: str, workdir: str) -> Path:
    return build_host(fixture, Path(workdir) / fixture)


def labels_of(root: Path) -> dict[str, str]:
    """What the producers would write for the host (feature-sink applies it as is)."""
    out: dict[str, str] = {}
    for scanner in ("usb_scan", "pci_scan"):
        for line in tool(scanner, "--dry-run", "--host-root", str(root)).splitlines():
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
    return out


def resources_of(root: Path) -> dict[str, tuple[int, int]]:
    """resource -> (capacity, allocatable) as the kubelet counts devplugin's devices."""
    doc = json.loads(tool("devplugin", "--dry-run", "--output", "json", "--host-root", str(root)))
    out = {}
    for r in doc["resources"]:
        ids = [(i, d["health"]) for d in r["devices"] for i in d["kubelet_ids"]]
        if ids:
            out[r["resource"]] = (len(ids), sum(h == "Healthy" for _, h in ids))
    return out


def slice_devices(root: Path) -> list[dict[str, Any]]:
    """The devices `devplugin --api dra` publishes for the host."""
    out = tool(
        "devplugin",
        "--api",
        "dra",
        "--dry-run",
        "--output",
        "json",
        "--host-root",
        str(root),
        "--node-name",
        "x",
    )
    return json.loads(out)["spec"].get("devices") or []


class Cluster:
    def __init__(self, server: Any) -> None:
        self.server = server
        self.kubeconfig = server.kubeconfig
        self.api = connect(server.kubeconfig, 10.0)

    def req(self, method: str, path: str, body: Any = None, ctype: str = "application/json"):
        return self.api.request(
            method, "test", path, f"{method} {path}", body, ctype if body is not None else None
        )

    def namespace(self, name: str) -> None:
        with contextlib.suppress(ApiConflict):
            self.req("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        with contextlib.suppress(ApiConflict):  # no serviceaccount controller here
            self.req(
                "POST",
                f"/api/v1/namespaces/{name}/serviceaccounts",
                {"metadata": {"name": "default"}},
            )

    # -- nodes, as the kubelet and edgefd's tools leave them

    def node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        resources: dict[str, tuple[int, int]] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> None:
        self.req(
            "POST",
            "/api/v1/nodes",
            {
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                }
            },
        )
        room = {"pods": "20", "cpu": "4", "memory": "8Gi"}
        capacity = room | {r: str(c) for r, (c, _) in (resources or {}).items()}
        allocatable = room | {r: str(a) for r, (_, a) in (resources or {}).items()}
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        self.req(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"capacity": capacity, "allocatable": allocatable, "conditions": [ready]}},
            MERGE,
        )
        # the API server gives a new Node the not-ready taint; no node-lifecycle controller
        # runs here to lift it
        self.req("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints}}, MERGE)

    def slice(self, node: str, devices: list[dict[str, Any]]) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-edgefd.io-0"},
            "spec": {
                "driver": "edgefd.io",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
        self.req("POST", f"{DRA}/resourceslices", body)

    def device_classes(self) -> None:
        """edgefd's DeviceClasses by kind (not those with an extendedResourceName: with them
        the scheduler serves `edgefd.io/<model>` through DRA on a node that lacks it)."""
        import yaml

        docs = yaml.safe_load_all((ROOT / "k8s" / "dra" / "deviceclasses.yaml").read_text())
        for doc in docs:
            if not doc["spec"].get("extendedResourceName"):
                with contextlib.suppress(ApiConflict):
                    self.req("POST", f"{DRA}/deviceclasses", doc)

    # -- pods and claims

    def create(self, path: str, body: dict[str, Any], ns: str = NS) -> dict[str, Any]:
        return self.req(
            "POST", f"/api/v1/namespaces/{ns}/{path}" if "/" not in path else path, body
        )

    def pod(self, name: str, spec: dict[str, Any], ns: str = NS, **meta: Any) -> None:
        spec = {"terminationGracePeriodSeconds": 0, **spec}
        spec.setdefault("containers", [{"name": "app", "image": "registry.example.com/app:1"}])
        self.req(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            {"metadata": {"name": name, **meta}, "spec": spec},
        )

    def claim(self, name: str, spec: dict[str, Any], ns: str = NS) -> None:
        self.req(
            "POST",
            f"{DRA}/namespaces/{ns}/resourceclaims",
            {"metadata": {"name": name}, "spec": spec},
        )

    def template(self, name: str, spec: dict[str, Any], ns: str = NS) -> None:
        body = {"metadata": {"name": name}, "spec": {"spec": spec}}
        self.req("POST", f"{DRA}/namespaces/{ns}/resourceclaimtemplates", body)

    def get_pod(self, name: str, ns: str = NS) -> dict[str, Any]:
        return self.req("GET", f"/api/v1/namespaces/{ns}/pods/{name}")

    def wait_placed(self, name: str, ns: str = NS, timeout: float = 60.0) -> str | None:
        """The node the scheduler bound the pod to, or None once it gave up on it for now
        (PodScheduled False: unschedulable, or an error such as a selector's)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self.get_pod(name, ns)
            if pod["spec"].get("nodeName"):
                return pod["spec"]["nodeName"]
            for c in (pod.get("status") or {}).get("conditions") or ():
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    return None
            time.sleep(0.05)
        raise AssertionError(f"pod {ns}/{name} neither bound nor unschedulable in {timeout}s")

    def set_phase(self, name: str, phase: str, ns: str = NS) -> None:
        self.req(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}/status",
            {"status": {"phase": phase}},
            MERGE,
        )

    # -- the command under test

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "edgefd.kubectl_edgefd",
                *args,
                f"--kubeconfig={self.kubeconfig}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def why(self, pod: str, ns: str = NS) -> dict[str, Any]:
        proc = self.run("why", pod, "-n", ns, "-o", "json")
        assert proc.returncode == 0, proc.stderr
        assert not proc.stderr, proc.stderr
        import os

        if os.environ.get("WHY_PRINT"):
            print("\n" + json.loads(proc.stdout)["paragraph"])
        return json.loads(proc.stdout)

    # -- cleaning up after each test

    def clear(self) -> None:
        for ns in (NS, EDGEFD_NS):
            with contextlib.suppress(ApiNotFound):
                self.req("DELETE", f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
            for plural in ("resourceclaims", "resourceclaimtemplates"):
                items = (self.req("GET", f"{DRA}/namespaces/{ns}/{plural}") or {}).get(
                    "items"
                ) or []
                for c in items:
                    path = f"{DRA}/namespaces/{ns}/{plural}/{c['metadata']['name']}"
                    with contextlib.suppress(ApiNotFound):
                        self.req("DELETE", path)
                    with contextlib.suppress(ApiNotFound):  # the scheduler's finalizer
                        self.req("PATCH", path, {"metadata": {"finalizers": None}}, MERGE)
        for s in (self.req("GET", f"{DRA}/resourceslices") or {}).get("items") or []:
            self.req("DELETE", f"{DRA}/resourceslices/{s['metadata']['name']}")
        for n in (self.req("GET", "/api/v1/nodes") or {}).get("items") or []:
            self.req("DELETE", f"/api/v1/nodes/{n['metadata']['name']}")
        deadline = time.monotonic() + 30
        while any(
            (self.req("GET", f"/api/v1/namespaces/{ns}/pods") or {}).get("items")
            for ns in (NS, EDGEFD_NS)
        ):
            assert time.monotonic() < deadline, "pods still there after 30 s"
            time.sleep(0.05)
