"""What the checks share: the running system, what the host tree should produce (expect.py),
and small helpers to find edgefd's pod and containers and to read the device plugin's
metrics."""

from __future__ import annotations

import datetime
import re
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.peers.apiserver import KubeAPIServer

from .expect import Offer
from .kube import Api, Kubectl, NodeSampler, wait_for
from .node import Node

NAMESPACE = "edgefd"
DS_SELECTOR = "app.kubernetes.io/name=edgefd"
PART_OF = "app.kubernetes.io/part-of=edgefd"  # every pod of edgefd's (split-identity: two)
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={PART_OF}"
SPLIT_DS = "edgefd-devplugin"  # devplugin's DaemonSet with k8s/overlays/split-identity
PLUGIN_METRICS = "http://127.0.0.1:8082/metrics"  # the overlay's devplugin listener
OWNERSHIP = "edgefd.io/owned-labels"


def spec_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod spec's containers, the init containers first (devplugin is the one pod's first
    init container, a native sidecar; an ordinary container with split-identity)."""
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def spec_container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in spec_containers(spec) if c["name"] == name)


def statuses_of(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The status of each of a pod's containers, the init containers' first."""
    st = pod.get("status", {})
    return [*(st.get("initContainerStatuses") or ()), *(st.get("containerStatuses") or ())]


def keeps_running(spec: dict[str, Any], c: dict[str, Any]) -> bool:
    """A container, or a native sidecar (an init container with restartPolicy Always): not a
    one-shot init container."""
    return c.get("restartPolicy") == "Always" or c in spec.get("containers", [])


def running_ready(pod: dict[str, Any]) -> bool:
    """Every container that keeps running is ready."""
    spec = pod["spec"]
    long_running = {c["name"] for c in spec_containers(spec) if keeps_running(spec, c)}
    statuses = [s for s in statuses_of(pod) if s["name"] in long_running]
    return bool(statuses) and all(s.get("ready") for s in statuses)


def holds(pod: dict[str, Any], container: str) -> bool:
    return container in {c["name"] for c in spec_containers(pod["spec"])}


def devplugin_pods(api: Api) -> list[dict[str, Any]]:
    """edgefd's current pods that run devplugin: the one pod, or split-identity's second."""
    pods = [p for p in api.get(PODS)["items"] if not p["metadata"].get("deletionTimestamp")]
    return [p for p in pods if holds(p, "devplugin")]


def devplugin_daemonset(api: Api) -> str:
    """The API path of the DaemonSet that runs devplugin (edgefd, or split-identity's)."""
    base = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"
    split = f"{base}/{SPLIT_DS}"
    return split if api.get_or_none(split) is not None else f"{base}/edgefd"


def cri_log_text(raw: str) -> str:
    """What a container wrote, from the CRI log file the kubelet reads for `kubectl logs`
    (`<time> <stream> <P|F> <text>` a line; P: a partial line the next one continues). The
    file lives in the node's mount namespace, where crictl on the machine cannot see it."""
    out, part = [], ""
    for line in raw.splitlines():
        fields = line.split(" ", 3)
        if len(fields) < 3:
            continue
        text = fields[3] if len(fields) == 4 else ""
        if fields[2] == "P":
            part += text
            continue
        out.append(part + text)
        part = ""
    return "\n".join(out) + ("\n" if out else "")


def runtime_time(stamp: str) -> float:
    """Epoch seconds of one of the runtime's RFC 3339 times (nanoseconds, which datetime
    does not parse, kept as a fraction)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    t = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC)
    return t.timestamp() + float(f"0.{frac or 0}")


@dataclass
class Run:
    cp: KubeAPIServer
    node: Node
    api: Api
    kubectl: Kubectl
    sampler: NodeSampler
    overlay: Path
    daemonset: dict[str, Any]  # as rendered from the overlay (or the chart)
    image: str
    expected: dict[str, str]  # the labels the producers compute for the host tree
    offer: Offer  # the devices the plugin offers on the host tree
    measure_idle: bool = True  # the memory at rest (the first scenario of each way)
    dra: bool = False  # devices offered through DRA (else the device plugin)
    helm: Any = None  # install.HelmInstall when the chart installed edgefd (else kustomize)
    t_apply: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # found by one check, used by a later

    @property
    def node_name(self) -> str:
        return self.node.spec.name

    def allocatable_ok(self, allocatable: dict[str, str]) -> bool:
        """status.allocatable shows what the tree offers (a resource without a device: 0)."""
        return all(allocatable.get(r, "0") == n for r, n in self.offer.allocatable().items())

    def get_node(self) -> dict[str, Any]:
        return self.api.get(f"/api/v1/nodes/{self.node_name}")

    def edgefd_pods(self) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={DS_SELECTOR}"
        return self.api.get(path)["items"]

    def edgefd_pod(self) -> dict[str, Any]:
        """The DaemonSet's current pod (not one being deleted)."""
        pods = [p for p in self.edgefd_pods() if not p["metadata"].get("deletionTimestamp")]
        if len(pods) != 1:
            raise AssertionError(f"expected one edgefd pod, found {len(pods)}")
        return pods[0]

    def all_edgefd_pods(self) -> list[dict[str, Any]]:
        """The current pods of edgefd's DaemonSets (`edgefd`; with split-identity also
        `edgefd-devplugin`)."""
        pods = self.api.get(PODS)["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def container_log(self, container: str) -> str:
        """The default-level log of one of edgefd's long-running containers (in whichever
        DaemonSet holds it)."""
        for pod in self.all_edgefd_pods():
            found = self.containers_of(pod).get(container)
            if found is not None:
                path = self.node.runtime.inspect(found["id"])["status"]["logPath"]
                return cri_log_text(self.node.ns.outside(path).read_text(errors="replace"))
        raise AssertionError(f"no container {container} in edgefd's pods")

    def containers_of(self, pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The CRI containers of ``pod`` by container name (the latest attempt of each)."""
        found = self.node.runtime.containers(**{"io.kubernetes.pod.uid": pod["metadata"]["uid"]})
        by_name: dict[str, dict[str, Any]] = {}
        for c in sorted(found, key=lambda c: int(c["metadata"].get("attempt", 0))):
            by_name[c["metadata"]["name"]] = c
        return by_name

    def started_since(self, since: float) -> dict[str, float]:
        """Seconds from ``since`` (time.monotonic()) to when the runtime started each
        container of edgefd's pods (both with split-identity; the latest attempt of each):
        where the time to a label, a slice or a registration goes."""
        wall_since = time.time() - (time.monotonic() - since)
        out = {}
        for pod in self.all_edgefd_pods():
            for name, c in self.containers_of(pod).items():
                started = self.node.runtime.inspect(c["id"])["status"].get("startedAt")
                if started and not started.startswith("0001"):
                    out[name] = round(runtime_time(started) - wall_since, 2)
        return dict(sorted(out.items(), key=lambda kv: kv[1]))

    def running_container(self, pod_name: str, namespace: str = "default") -> dict[str, Any]:
        """The running CRI container of a one-container pod, waiting for it."""

        def find() -> dict[str, Any] | None:
            cs = self.node.runtime.containers(
                **{"io.kubernetes.pod.name": pod_name, "io.kubernetes.pod.namespace": namespace}
            )
            running = [c for c in cs if c["state"] == "CONTAINER_RUNNING"]
            if not running:  # a pod the kubelet refused (admission) never runs: say why now
                pod = self.api.get_or_none(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
                status = (pod or {}).get("status", {})
                if status.get("phase") == "Failed":
                    raise AssertionError(f"pod {pod_name} failed: {status.get('message')}")
            return running[-1] if running else None

        return wait_for(f"pod {pod_name} running", find, timeout=90, interval=0.2)[0]

    def create_pod(self, manifest: dict[str, Any]) -> None:
        ns = manifest["metadata"].get("namespace", "default")
        self.api.request("POST", f"/api/v1/namespaces/{ns}/pods", manifest)

    def delete_pod(self, name: str, namespace: str = "default", wait: bool = False) -> None:
        """Delete at once; with ``wait``, through the kubelet (the pod's own grace period)
        until the Pod is gone, so its devices are free for the next pod to be admitted."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        self.api.request("DELETE", path if wait else f"{path}?gracePeriodSeconds=0")
        if wait:
            wait_for(f"{name} gone", lambda: self.api.get_or_none(path) is None, timeout=60)


def plugin_metrics() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The device plugin's Prometheus metrics: (name, labels) -> value."""
    with urllib.request.urlopen(PLUGIN_METRICS, timeout=2) as r:
        text = r.read().decode()
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(
    metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= ls)
