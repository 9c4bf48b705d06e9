"""device-keeper in the install check 6k runs on (checks_keeper.py): whether the default install
has it, turning it off and on again the way an operator does (one value), and whether a running
workload was restarted meanwhile.

Since issue 34 item 3 the keeper is in the default install (the chart's
``deviceKeeper.enabled``, true by default; device-keeper in the kustomize base), and
``deviceKeeper.enabled=false`` or the component ``k8s/overlays/no-device-keeper`` is the
opt-out. The check must fail, not skip, when the default install has no keeper.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from tests.peers.processes import REPO_ROOT

from .context import Run, devplugin_pods, holds, running_ready
from .install import CHART, RELEASE, kustomization
from .kube import wait_for

KEEPER = "device-keeper"
KEEPER_METRICS = "http://127.0.0.1:8084/metrics"  # the keeper's listener (hostNetwork)
NO_KEEPER = REPO_ROOT / "k8s" / "overlays" / "no-device-keeper"


def keeper_metric(name: str) -> float:
    with urllib.request.urlopen(KEEPER_METRICS, timeout=2) as r:
        text = r.read().decode()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name))


def keeper_problem(pods: list[dict[str, Any]]) -> str | None:
    """Why edgefd's running pods give a re-enumerated device to no running container (no
    device-keeper container, or not ready); None when one is there and ready."""
    for pod in pods:
        if KEEPER in {c["name"] for c in pod["spec"].get("containers", [])}:
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if any(s["name"] == KEEPER and s.get("ready") for s in statuses):
                return None
            return f"{KEEPER} in pod {pod['metadata']['name']} is not ready"
    return (
        f"no {KEEPER} in the install: a device that re-enumerates (a Coral's firmware load)"
        " gives EPERM in the running container that holds it"
    )


def keeper_problem_settled(run: Run, timeout: float = 30.0) -> str | None:
    """keeper_problem once a not-ready keeper had a readiness period to become ready: after a
    kubelet restart (check 5) the kubelet reports each container not ready until that
    container's next readiness probe, up to its period (10 s) later."""
    deadline = time.monotonic() + timeout
    while True:
        problem = keeper_problem(run.all_edgefd_pods())
        if problem is None or "not ready" not in problem or time.monotonic() > deadline:
            return problem
        time.sleep(0.2)


def identity(run: Run, pod: str) -> tuple[str, str, int]:
    """(pod UID, container ID, restart count) of a one-container pod: what changes when the
    pod or its container is restarted."""
    p = run.api.get(f"/api/v1/namespaces/default/pods/{pod}")
    (status,) = p.get("status", {}).get("containerStatuses") or [{}]
    return p["metadata"]["uid"], status.get("containerID", ""), int(status.get("restartCount", 0))


def set_keeper(run: Run, on: bool) -> None:
    """The install with its keeper (the default) or with the one-value opt-out, as the
    install was made (the chart's value; the overlay plus k8s/overlays/no-device-keeper);
    wait for the pod running devplugin, of that shape, to run, and with the keeper for its
    metrics."""
    if run.helm is not None:
        off = [] if on else ["--set", "deviceKeeper.enabled=false"]
        run.helm("upgrade", RELEASE, str(CHART), "--namespace=default", *run.helm.values, *off)
    else:
        overlay = run.overlay
        if not on:
            dest = run.node.dir / f"{run.overlay.name}-no-keeper"
            overlay = kustomization(dest, run.overlay, [NO_KEEPER])
        run.kubectl("apply", "--server-side", "-k", str(overlay))

    def shaped() -> bool:
        pods = devplugin_pods(run.api)
        if len(pods) != 1:
            return False
        return holds(pods[0], KEEPER) == on and running_ready(pods[0])

    wait_for(f"devplugin pod {'with' if on else 'without'} the keeper", shaped, timeout=120)
    if on:
        wait_for("keeper metrics", lambda: keeper_metric("edgefd_device_keeper_moves_total") >= 0,
                 timeout=30, interval=0.2)  # fmt: skip
