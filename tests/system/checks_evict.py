"""`--evict-after` on the real node (DRA): devplugin's DaemonSet gets `--evict-after=2s`; a
Deployment's pod holding the first device class's device is evicted once the device has been
unplugged for the hold plus 2 s (the kube-controller-manager's device-taint-eviction-controller
acting on the slice's NoExecute taint), its replacement waits, and runs once the device is back.
A device that stays when "unplugged", unusable without its node (a platform NPU whose driver
went: the tools still list it), is tainted NoSchedule only: its pod is not evicted.
Runs after checks_dra's 7 (the claim pods are gone, so the devices are free)."""

from __future__ import annotations

import time
from typing import Any

from .checks_dra import cdi_dir, claim_workload, ensure_template, node_slices
from .context import (
    Run,
    devplugin_daemonset,
    devplugin_pods,
    metric,
    plugin_metrics,
    spec_container,
)
from .expect import unplugged_reason
from .kube import wait_for

EVICT_AFTER_S = 2.0
HOLD_S = 3.0  # the inventory's re-enumeration hold (edgefd.inventory.inventory.DEFAULT_HOLD)
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
PODS = "/api/v1/namespaces/default/pods"


def _registrations() -> float:
    try:
        return metric(plugin_metrics(), "edgefd_devplugin_dra_registrations_total", result="ok")
    except OSError:
        return -1.0


def with_evict_after(run: Run, pods: int = 1) -> float:
    """Roll the DaemonSet running devplugin with `--evict-after`; seconds until it registered
    again (``pods``: one per node of the run; the first node's registration is waited for,
    every node's slice by the caller)."""
    path = devplugin_daemonset(run.api)
    ds = run.api.get(path)
    c = spec_container(ds["spec"]["template"]["spec"], "devplugin")
    c["command"] = [a for a in c["command"] if not a.startswith("--evict-after")]
    c["command"].append(f"--evict-after={EVICT_AFTER_S:g}s")
    t0 = time.monotonic()
    run.api.request("PUT", path, ds)

    def command(pod: dict[str, Any]) -> list[str]:
        return spec_container(pod["spec"], "devplugin")["command"]

    def rolled() -> bool:
        now = devplugin_pods(run.api)
        flagged = [
            p
            for p in now
            if any("--evict-after" in a for a in command(p))
            and any(
                cond["type"] == "Ready" and cond["status"] == "True"
                for cond in p.get("status", {}).get("conditions") or ()
            )
        ]
        return len(flagged) == pods and len(now) == pods

    wait_for("devplugin rolled with --evict-after", rolled, timeout=120, interval=0.2)
    wait_for("plugin registered", lambda: _registrations() > 0, timeout=60, interval=0.1)
    wait_for("slice present", lambda: node_slices(run), timeout=30, interval=0.1)
    return time.monotonic() - t0


def deployment(name: str, image: str, template: str) -> dict[str, Any]:
    pod = claim_workload(name, image, template)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


def _pods(run: Run, app: str) -> list[dict[str, Any]]:
    return run.api.get(f"{PODS}?labelSelector=app%3D{app}")["items"]


def _running(run: Run, app: str, not_named: str = "") -> dict[str, Any] | None:
    for p in _pods(run, app):
        if p["metadata"]["name"] == not_named or p["metadata"].get("deletionTimestamp"):
            continue
        if p.get("status", {}).get("phase") == "Running":
            return p
    return None


def check_evict(run: Run) -> dict[str, Any]:
    """7d. With --evict-after 2s: the Deployment's pod is evicted after the hold + 2 s of
    absence; the replacement runs when the device returns."""
    resource = run.offer.primary()
    device = run.offer.resources[resource][0] if resource else None
    if device is None:
        return {"ok": False, "problems": ["the host tree has no device the plugin offers"]}
    rolled = with_evict_after(run)
    template = ensure_template(run, device.device_class)
    app = "evictee"
    run.api.request("POST", DEPLOYMENTS, deployment(app, run.image, template))
    problems: list[str] = []
    stays = ""
    try:
        first, _ = wait_for("the Deployment's pod running", lambda: _running(run, app), 120, 0.2)
        name = first["metadata"]["name"]
        held = [
            d
            for d in run.offer.of_class(device.device_class)
            if d.dra_name in _claim_devices(run, first)
        ]
        target = held[0] if held else device
        run.node.host.unplug(target.bus, target.location)
        t0 = time.monotonic()

        def evicted() -> bool:
            p = run.api.get_or_none(f"{PODS}/{name}")
            return p is None or bool(p["metadata"].get("deletionTimestamp"))

        want = HOLD_S + EVICT_AFTER_S
        stays = unplugged_reason(run.node.spec.host_tree, run.node_name, target)
        if stays:  # present without its node (a platform NPU's driver gone): never evicted
            return _not_evicted(run, rolled, target.dra_name, evicted, t0 + want + 2.0, stays)
        wait_for("the pod evicted", evicted, timeout=HOLD_S + EVICT_AFTER_S + 30, interval=0.05)
        t_evict = time.monotonic() - t0
        if not want - 1.0 <= t_evict <= want + 3.0:
            problems.append(f"evicted {t_evict:.2f}s after the unplug, want about {want:g}s")
        others = [d for d in run.offer.of_class(device.device_class) if d is not target]
        if not others:  # nowhere else to go: the replacement waits for the device
            time.sleep(1.0)
            if _running(run, app, not_named=name):
                problems.append("a replacement ran without a device to run with")
        run.node.host.plug(target.bus, target.location)
        t1 = time.monotonic()
        wait_for("the replacement running", lambda: _running(run, app, not_named=name), 120, 0.1)
        t_back = time.monotonic() - t1
    finally:
        if stays:  # back for the checks after this one
            run.node.host.plug(target.bus, target.location)
        # foreground: the ReplicaSet cannot make another pod meanwhile; then every claim
        # unprepared, so that deleting the DaemonSet later may remove the slices
        run.api.request("DELETE", f"{DEPLOYMENTS}/{app}", {"propagationPolicy": "Foreground"})
        wait_for("the Deployment's pods gone", lambda: not _pods(run, app), 90, 0.2)
        wait_for("its claims unprepared", lambda: not _claim_specs(run), 60, 0.2)
    figures = {
        "dra_unplug_to_evicted_s": round(t_evict, 2),
        "dra_plug_to_replacement_running_s": round(t_back, 2),
    }
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        "evict_after_s": EVICT_AFTER_S,
        "rollout_s": round(rolled, 2),
        **figures,
    }


def _not_evicted(
    run: Run, rolled: float, name: str, evicted: Any, until: float, reason: str
) -> dict[str, Any]:
    """A device that stays, unusable, is tainted NoSchedule only: its pod keeps running past
    the hold plus --evict-after (and a margin)."""
    problems = []
    while time.monotonic() < until and not evicted():
        time.sleep(0.2)
    if evicted():
        problems.append(f"the pod was evicted from a device that stayed ({reason})")
    taints = [t for s in node_slices(run) for d in s["spec"].get("devices") or ()
              if d["name"] == name for t in d.get("taints") or ()]  # fmt: skip
    if [t.get("effect") for t in taints] != ["NoSchedule"]:
        problems.append(f"{name}'s taints while it stays: {taints}, want one NoSchedule")
    return {"ok": not problems, "problems": problems, "evict_after_s": EVICT_AFTER_S,
            "rollout_s": round(rolled, 2), "device_stays": f"{name}: {reason}",
            "taints": taints}  # fmt: skip


def _claim_specs(run: Run) -> list[str]:
    return [p.name for p in cdi_dir(run).glob("edgefd.io-*.json")]


def _claim_devices(run: Run, pod: dict[str, Any]) -> set[str]:
    out = set()
    for st in pod.get("status", {}).get("resourceClaimStatuses") or ():
        claim = run.api.get_or_none(
            f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{st['resourceClaimName']}"
        )
        for r in (claim or {}).get("status", {}).get("allocation", {}).get("devices", {}).get(
            "results"
        ) or ():
            out.add(r["device"])
    return out
