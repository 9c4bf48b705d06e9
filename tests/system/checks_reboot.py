"""Check 7r, for both APIs: a node reboot. A Deployment's pod and a bare pod (no controller)
hold a device each; then the power goes (node.py ``power_cut``: every process, mount and the
volatile state gone, the disk kept) and the node boots (containerd, then the kubelet). What is
measured, from the kubelet's start: when edgefd's plugin container started and when the kubelet
had its plugin registered, when the Deployment's pod runs again with its device (the
container's start as the runtime reports it; its device node present and opening), and what
became of the bare pod (its phase and reason: a device-plugin pod admitted before the plugin
registers fails with UnexpectedAdmissionError, and nothing re-creates it).

Afterwards the workloads are deleted (and, with DRA, their claims unprepared), so check 8 finds
the node as it expects.
"""

from __future__ import annotations

import time
import urllib.error
from typing import Any

from . import checks_dra
from .checks_devices import device_problems, probe, workload
from .context import NAMESPACE, Run, metric, plugin_metrics, runtime_time
from .kube import wait_for
from .session import Session

APP, BARE = "reboot-app", "reboot-bare"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
PODS = "/api/v1/namespaces/default/pods"
TIMEOUT_S = 180.0
BARE_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": BARE}}


def _dra(run: Run) -> bool:
    return run.dra


def _pod_spec(run: Run, name: str, resource: str) -> dict[str, Any]:
    """A user's pod for one device of ``resource``: its limit, or a claim of its class."""
    if not _dra(run):
        device = run.offer.resources[resource][0]
        return workload(name, run.image, resource, device.selector)["spec"]
    template = checks_dra.ensure_template(run, run.offer.resources[resource][0].device_class)
    return checks_dra.claim_workload(name, run.image, template)["spec"]


def _deployment(spec: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": APP}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _registered(run: Run, resource: str) -> bool:
    """The kubelet accepted edgefd's registration (the restarted plugin's own counter)."""
    try:
        m = plugin_metrics()
    except (urllib.error.URLError, OSError):
        return False  # not serving yet
    if _dra(run):
        return metric(m, "edgefd_devplugin_dra_registrations_total", result="ok") > 0
    return metric(m, "edgefd_devplugin_registrations_total", resource=resource, result="ok") > 0


def _containers(pod: dict[str, Any]) -> set[str]:
    """The IDs of the pod's running containers, as its status says."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return {s.get("containerID", "") for s in statuses if "running" in s.get("state", {})}


def _started(run: Run, **labels: str) -> float | None:
    """When the runtime started the running container with these labels (epoch seconds)."""
    found = [c for c in run.node.runtime.containers(**labels) if c["state"] == "CONTAINER_RUNNING"]
    if not found:
        return None
    return runtime_time(run.node.runtime.inspect(found[-1]["id"])["status"]["startedAt"])


def _device_check(run: Run, pod: str, resource: str) -> tuple[dict[str, Any], list[str]]:
    """Probe the pod's running container: exactly one device of ``resource``, its node now."""
    c = run.running_container(pod)
    if _dra(run):
        devices = [checks_dra.allocated(run, pod)]
        want = {d.dra_name: d.node_now(run.node.host.root) for d in devices}
    else:
        devices = run.offer.resources[resource]
        want = {i: d.node_now(run.node.host.root) for d in devices for i in d.kubelet_ids}
    p = probe(run, c["id"], devices)
    return p, [f"{pod}: {x}" for x in device_problems(p, want)]


def _clear(run: Run) -> None:
    """No workload and, with DRA, no claim prepared: the node as the next check expects."""
    Session.delete_workloads(run.api)
    if _dra(run):
        specs = checks_dra.cdi_dir(run)
        wait_for(
            "claims unprepared",
            lambda: not list(specs.glob("edgefd.io-*.json")),
            timeout=60,
            interval=0.2,
        )


class Watch:
    """What happens after the boot, polled every 0.1 s: registration, the Deployment's pods,
    the bare pod. Times are time.monotonic()."""

    def __init__(
        self, run: Run, resource: str, bare: bool, old: frozenset[str] = frozenset()
    ) -> None:
        self.run, self.resource, self.bare = run, resource, bare
        self.old = old  # the containers before the cut: a status naming one is stale
        self.seen: set[str] = set()
        self.registered: float | None = None
        self.app: str | None = None  # the Deployment's pod that runs again
        self.app_seen: float | None = None
        self.bare_status: dict[str, Any] | None = None
        self.failed: list[dict[str, Any]] = []  # the Deployment's pods that failed

    def poll(self) -> bool:
        now = time.monotonic()
        if self.registered is None and _registered(self.run, self.resource):
            self.registered = now
        pods = self.run.api.get(PODS)["items"]
        apps = [p for p in pods if p["metadata"].get("labels", {}).get("app") == APP]
        self.failed = [_fate(p) for p in apps if p["status"].get("phase") == "Failed"]
        live = [p for p in apps if self._running(p) and not p["metadata"].get("deletionTimestamp")]
        if self.app is None and live:
            self.app, self.app_seen = live[0]["metadata"]["name"], now
        bare = next((p for p in pods if p["metadata"]["name"] == BARE), None)
        if bare and (bare["status"].get("phase") == "Failed" or self._running(bare)):
            self.bare_status = _fate(bare)
        settled = self.bare_status is not None or not self.bare
        return bool(self.registered and self.app and settled)

    def _running(self, pod: dict[str, Any]) -> bool:
        """Running in a container started since the cut."""
        new = _containers(pod) - self.old
        self.seen |= _containers(pod)
        return pod["status"].get("phase") == "Running" and bool(new)


def _fate(pod: dict[str, Any]) -> dict[str, Any]:
    st = pod["status"]
    return {
        "pod": pod["metadata"]["name"],
        "phase": st.get("phase"),
        "reason": st.get("reason"),
        "message": (st.get("message") or "")[:300],
    }


def check_node_reboot(run: Run) -> dict[str, Any]:
    """7r. Power cut and boot: the Deployment's pod runs again with its device; the bare pod's
    fate; when edgefd registered, all from the kubelet's start."""
    resource = run.offer.primary()
    if resource is None:
        return {"ok": False, "problems": ["the host tree has no device the plugin offers"]}
    others = run.offer.others(resource)  # the bare pod's: both hold a device at the cut
    _clear(run)
    try:
        return _reboot(run, resource, others[0] if others else None)
    finally:
        _clear(run)


def _reboot(run: Run, resource: str, other: str | None) -> dict[str, Any]:
    run.api.request("POST", DEPLOYMENTS, _deployment(_pod_spec(run, APP, resource)))
    if other:
        spec = _pod_spec(run, BARE, other)
        run.create_pod(BARE_POD | {"spec": spec})
    watch = Watch(run, resource, bool(other))
    wait_for("workloads running before the cut", watch.poll, timeout=90, interval=0.2)
    before = watch.app

    run.node.power_cut()
    t_kubelet = run.node.boot()
    wall_kubelet = time.time() - (time.monotonic() - t_kubelet)
    watch = Watch(run, resource, bool(other), frozenset(watch.seen))
    wait_for("the node back after the boot", watch.poll, timeout=TIMEOUT_S, interval=0.1)

    problems: list[str] = []
    assert watch.app is not None and watch.registered is not None
    p, found = _device_check(run, watch.app, resource)
    problems += found
    app_started = _started(run, **{"io.kubernetes.pod.name": watch.app})
    plugin = {"io.kubernetes.pod.namespace": NAMESPACE, "io.kubernetes.container.name": "devplugin"}
    plugin_started = _started(run, **plugin)
    bare = watch.bare_status
    if bare and other and bare["phase"] == "Running":
        _, found = _device_check(run, BARE, other)
        problems += found

    def since_kubelet(wall: float | None) -> float | None:
        return None if wall is None else round(wall - wall_kubelet, 2)

    figures = {
        "reboot_kubelet_to_plugin_started_s": since_kubelet(plugin_started),
        "reboot_kubelet_to_registered_s": round(watch.registered - t_kubelet, 2),
        "reboot_kubelet_to_workload_running_s": since_kubelet(app_started),
        "reboot_workload_pods_failed": len(watch.failed),
        "reboot_bare_pod": bare and " ".join(filter(None, (bare["phase"], bare["reason"]))),
        # where the seconds to the plugin go: each of edgefd's containers, in the order run
        "reboot_kubelet_to_container_started_s": run.started_since(t_kubelet),
    }
    if plugin_started is not None:
        registered_wall = wall_kubelet + (watch.registered - t_kubelet)
        figures["reboot_plugin_started_to_registered_s"] = round(
            registered_wall - plugin_started, 2
        )
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        **figures,
        "workload_before": before,
        "workload_after": watch.app,
        "workload_failed": watch.failed,
        "bare": bare,
        "probe": p,
    }
