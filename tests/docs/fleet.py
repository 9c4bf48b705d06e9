"""The sample fleet of the scheduling guide, as Node objects on the real API server.

Each node is a fixture host generated from its description in ``tests/fixtures/nodes``. Its
labels are what the real producers write (``dt-labeller``, ``usb-scan``, ``pci-scan``, into a
features.d of its own) and what the real ``feature-sink --once`` then applies; its extended
resources are what ``devplugin --dry-run`` would advertise, counted the way the kubelet's device
manager counts them (capacity: every device ID; allocatable: the healthy ones). Only the kubelet's
own facts (architecture, CPU, memory, pod slots: ``fleet.yaml``) are written by hand. Nothing is
typed twice, so the fleet follows the tools when they change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.fixturegen import build_host

ROOT = Path(__file__).resolve().parents[2]
FLEET_FILE = Path(__file__).with_name("fleet.yaml")
PRODUCERS = ("dt_labeller", "usb_scan", "pci_scan")
EDGEFD_DOMAIN = "edgefd.io/"
SHOWN = (".present", ".driver-version", "/kernel.page-size")  # label endings the table shows


@dataclass(frozen=True)
class SampleNode:
    name: str
    host: Path  # the generated host root
    features: Path  # its features.d, written by the real producers
    arch: str
    base: dict[str, str]  # the kubelet's cpu / memory / pods

    @property
    def kubelet_labels(self) -> dict[str, str]:
        return {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": self.arch,
        }


def _env() -> dict[str, str]:
    # nothing of the caller's cluster or node may leak into the tools
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("EDGEFD_", "KUBE")) and k not in ("NODE_NAME", "POD_NAMESPACE")
    }


def run_tool(tool: str, *args: str) -> str:
    """``python -m edgefd.<tool> ARGS``: its stdout; a failure fails the test with its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", f"edgefd.{tool}", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def fleet_spec() -> dict[str, dict[str, str]]:
    return yaml.safe_load(FLEET_FILE.read_text())


def _build_one(name: str, spec: dict[str, str], workdir: Path) -> SampleNode:
    host = build_host(name, workdir / name / "root")
    features = workdir / name / "features.d"
    features.mkdir(parents=True)
    for tool in PRODUCERS:
        run_tool(tool, "--host-root", str(host), "--features-dir", str(features))
    base = {k: str(spec[k]) for k in ("cpu", "memory", "pods")}
    return SampleNode(name, host, features, str(spec["arch"]), base)


def build(workdir: Path) -> list[SampleNode]:
    """Every node of ``fleet.yaml``: host generated, producers run (in parallel)."""
    spec = fleet_spec()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(lambda n: _build_one(n, spec[n], workdir), spec))


def device_resources(node: SampleNode, config: Path | None = None) -> dict[str, tuple[int, int]]:
    """Resource -> (capacity, allocatable) as the kubelet would publish for ``devplugin``."""
    args = ["--host-root", str(node.host), "--dry-run", "--output", "json"]
    doc = json.loads(run_tool("devplugin", *args, *(["--config", str(config)] if config else [])))
    out = {}
    for res in doc["resources"]:
        ids = [(i, d["health"]) for d in res["devices"] for i in d["kubelet_ids"]]
        out[res["resource"]] = (len(ids), sum(h == "Healthy" for _, h in ids))
    return out


def device_resources_all(
    nodes: Iterable[SampleNode], config: Path | None = None
) -> dict[str, dict[str, tuple[int, int]]]:
    """:func:`device_resources` of every node (in parallel), by node name."""
    nodes = list(nodes)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        found = pool.map(lambda n: device_resources(n, config), nodes)
        return {n.name: d for n, d in zip(nodes, found, strict=True)}


def _ready(now: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def publish_status(core: Any, node: SampleNode, devices: dict[str, tuple[int, int]]) -> None:
    """The Node's status as its kubelet would report it: Ready, base resources plus devices."""
    capacity = dict(node.base) | {r: str(c) for r, (c, _) in devices.items()}
    allocatable = dict(node.base) | {r: str(a) for r, (_, a) in devices.items()}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "status": {"capacity": capacity, "allocatable": allocatable, "conditions": [_ready(now)]}
    }
    core.patch_node_status(node.name, body)


def register(api_server: Any, core: Any, node: SampleNode) -> dict[str, tuple[int, int]]:
    """Create the Node as a kubelet would, then let the real feature-sink label it; returns the
    device resources its status now shows."""
    from kubernetes import client

    meta = client.V1ObjectMeta(name=node.name, labels=node.kubelet_labels)
    core.create_node(client.V1Node(metadata=meta))
    # The API server's TaintNodesByCondition admission gives every new Node the not-ready taint,
    # which only the node-lifecycle controller (not running here) would lift once it is Ready.
    core.patch_node(node.name, {"spec": {"taints": None}})
    devices = device_resources(node)
    publish_status(core, node, devices)
    run_tool(
        "feature_sink",
        "--once",
        f"--kubeconfig={api_server.kubeconfig}",
        f"--node-name={node.name}",
        f"--features-dir={node.features}",
        "--listen=",
    )
    return devices


def register_all(
    api_server: Any, core: Any, nodes: Iterable[SampleNode]
) -> dict[str, dict[str, tuple[int, int]]]:
    """Every node registered (in parallel); node name -> its device resources."""
    nodes = list(nodes)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        found = pool.map(lambda n: register(api_server, core, n), nodes)
        return {n.name: d for n, d in zip(nodes, found, strict=True)}


def unregister(core: Any, nodes: Iterable[SampleNode]) -> None:
    from kubernetes.client.rest import ApiException

    for node in nodes:
        try:
            core.delete_node(node.name)
        except ApiException as e:
            if e.status != 404:
                raise


def others_schedulable(core: Any, nodes: Iterable[SampleNode]) -> list[str]:
    """Nodes outside the fleet that could take a pod: none may exist, or the guide's "lands on"
    would depend on what other tests of the session left behind. A Node no kubelet created is
    safe as long as it keeps the not-ready taint the API server gave it, or has no pod slots."""
    ours = {n.name for n in nodes}
    found = []
    for n in core.list_node().items:
        blocking = [t for t in n.spec.taints or () if t.effect in ("NoSchedule", "NoExecute")]
        slots = int((n.status.allocatable or {}).get("pods", "0"))
        if n.metadata.name not in ours and not blocking and not n.spec.unschedulable and slots:
            found.append(n.metadata.name)
    return found


def edgefd_view(core: Any, name: str) -> tuple[dict[str, str], dict[str, int]]:
    """What the guide's table shows of a Node: its ``edgefd.io/*.present`` labels, the facts
    recipes select on (``*.driver-version``, ``kernel.page-size``) and its non-zero
    ``edgefd.io/*`` allocatable resources."""
    n = core.read_node(name)
    labels = {
        k: v
        for k, v in (n.metadata.labels or {}).items()
        if k.startswith(EDGEFD_DOMAIN) and k.endswith(SHOWN)
    }
    res = {
        k: int(v)
        for k, v in (n.status.allocatable or {}).items()
        if k.startswith(EDGEFD_DOMAIN) and int(v) > 0
    }
    return labels, res
