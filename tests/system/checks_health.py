"""Device health where users look (KEP-4680, on by default since 1.36): the pod's
`status.containerStatuses[].allocatedResourcesStatus`, filled by the real kubelet from the
device plugin's ListAndWatch health (`--api device-plugin`) and from the DRA plugin's
DRAResourceHealth stream (`--api dra`); and, for DRA, the claim's `status.devices` (KEP-4817).
The hot-plug checks (checks_devices.check_replug, checks_dra.check_hotplug) call these while
the workload's device is unplugged and when it is back."""

from __future__ import annotations

import time
from typing import Any

from .context import Run
from .kube import wait_for

POD_STATUS_S = 10.0  # the longest a health change may take to show in the pod's status


def resource_health(run: Run, pod: str) -> list[dict[str, Any]]:
    """Every (resource name, resource ID, health, message) the pod's status shows."""
    p = run.api.get(f"/api/v1/namespaces/default/pods/{pod}")
    out = []
    for cs in p.get("status", {}).get("containerStatuses") or ():
        for r in cs.get("allocatedResourcesStatus") or ():
            for h in r.get("resources") or ():
                out.append(
                    {
                        "name": r.get("name"),
                        "id": h.get("resourceID"),
                        "health": h.get("health"),
                        "message": h.get("message"),
                    }
                )
    return out


def wait_pod_health(run: Run, pod: str, health: str, since: float) -> dict[str, Any]:
    """Wait until the pod's status shows every allocated resource `health`; how long after
    `since` (monotonic) and what it showed."""
    shown, _ = wait_for(
        f"{pod}: allocatedResourcesStatus {health}",
        lambda: (
            [r for r in resource_health(run, pod) if r["health"] == health]
            if all(r["health"] == health for r in resource_health(run, pod))
            else None
        ),
        timeout=POD_STATUS_S + 20,
        interval=0.05,
    )
    return {"after_s": round(time.monotonic() - since, 2), "shown": shown}


def claim_status(run: Run, claim: dict[str, Any]) -> list[dict[str, Any]]:
    """edgefd's entries of the claim's status.devices."""
    meta = claim["metadata"]
    got = run.api.get(
        f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"
    )
    return [d for d in got.get("status", {}).get("devices") or () if d["driver"] == "edgefd.io"]


def ready_of(entry: dict[str, Any]) -> str | None:
    return next((c["status"] for c in entry.get("conditions") or () if c["type"] == "Ready"), None)


def wait_claim_ready(run: Run, claim: dict[str, Any], ready: str) -> list[dict[str, Any]]:
    entries, _ = wait_for(
        f"claim status.devices Ready={ready}",
        lambda: (e := claim_status(run, claim)) and all(ready_of(x) == ready for x in e) and e,
        timeout=POD_STATUS_S + 20,
        interval=0.05,
    )
    return entries


def health_problems(step: dict[str, Any], health: str, message: str = "") -> list[str]:
    problems = []
    if step["after_s"] > POD_STATUS_S:
        problems.append(f"{health} reached the pod's status after {step['after_s']}s")
    if message and not any(message in (r.get("message") or "") for r in step["shown"]):
        problems.append(f"no resource says {message!r}: {step['shown']}")
    return problems


def claim_problems(
    gone: list[dict[str, Any]], back: list[dict[str, Any]], where: str, away: str = "absent"
) -> list[str]:
    """The claim's entry while the device is away (``away``: "absent", or "unusable" for one
    that stays without its node) and once it is back: the data says where it is and in what
    state, and its device paths (but not while it has no node); Ready follows."""
    problems = []
    for entries, state in ((gone, away), (back, "present")):
        for e in entries:
            data = e.get("data") or {}
            if data.get("state") != state:
                problems.append(f"claim status data.state {data.get('state')!r}, want {state}")
            if where not in (data.get("port"), data.get("pciAddress"), data.get("platformDevice")):
                problems.append(f"claim status data does not say {where}: {data}")
            if not data.get("devicePaths") and state != "unusable":
                problems.append(f"claim status data has no device path: {data}")
    return problems
