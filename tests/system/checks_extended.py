"""DRA behind the extended resource (`scripts/e2e --api dra`, after the claim workloads are
gone): a pod written for the device plugin, `edgefd.io/coral-usb: 1` in its limits and no
claim, runs on DRA. The scheduler allocates it a device of the DeviceClass that carries the
resource's name (a claim of its own, named in the pod's `status.extendedResourceClaimStatus`),
the kubelet has edgefd's DRA plugin prepare it, and the container gets that device exactly as a
claim's pod does; deleting the pod unprepares it.
"""

from __future__ import annotations

import time
from typing import Any

from .checks_devices import device_problems, probe
from .checks_dra import cdi_dir, claim_workload
from .context import Run
from .kube import wait_for

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def extended_workload(name: str, image: str, resource: str) -> dict[str, Any]:
    """The device plugin's kind of pod: a count in the limits, no claim, no node selector."""
    pod = claim_workload(name, image, "")
    spec = pod["spec"]
    del spec["resourceClaims"]
    spec["containers"][0]["resources"] = {"limits": {resource: "1"}}
    return pod


def _own_claim(run: Run, pod: str) -> dict[str, Any]:
    p = run.api.get(f"/api/v1/namespaces/default/pods/{pod}")
    status = (p.get("status") or {}).get("extendedResourceClaimStatus") or {}
    name = status.get("resourceClaimName")
    return (name and run.api.get_or_none(f"{CLAIMS}/{name}")) or {}


def check_extended_resource(run: Run) -> dict[str, Any]:
    """7c. A pod asking for the first resource by its extended name runs with a device."""
    resource = run.offer.primary()
    if resource is None:
        return {"ok": False, "problems": ["the host tree has no device the plugin offers"]}
    name = "extended-1"
    t0 = time.monotonic()
    run.create_pod(extended_workload(name, run.image, resource))
    c = run.running_container(name)
    t_run = time.monotonic() - t0
    claim = _own_claim(run, name)
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or []
    if not results:
        run.delete_pod(name)
        return {"ok": False, "problems": [f"{name}: no claim of its own allocated ({claim})"]}
    device = run.offer.by_dra_name(results[0]["device"])
    problems = []
    if device.resource != resource:
        problems.append(f"{name}: got {device.dra_name} of {device.resource}, not {resource}")
    p = probe(run, c["id"], [device])
    # its node now: checks 6 and 6k re-plugged and re-enumerated it
    want = dict.fromkeys(device.kubelet_ids, device.node_now(run.node.host.root))
    problems += [f"{name}: {x}" for x in device_problems(p, want)]
    spec = cdi_dir(run) / f"edgefd.io-claim_{claim['metadata']['uid']}.json"
    if not spec.exists():
        problems.append(f"{name}: no CDI spec {spec.name} on the node")
    run.delete_pod(name)
    wait_for("its CDI spec removed", lambda: not spec.exists(), timeout=60, interval=0.1)
    figures = {"dra_extended_create_to_running_s": round(t_run, 2)}
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        "resource": resource,
        "claim": claim["metadata"]["name"],
        "device": device.dra_name,
        "probe": p,
        **figures,
    }
