"""Checks 7-9: a rolling update loses no label and no resource beyond the restart; deleting
edgefd leaves its labels (and the documented command removes them) and no plugin socket; the
figures of the run."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from .context import NAMESPACE, OWNERSHIP, Run, running_ready, spec_containers
from .kube import Sample, wait_for

# How a user removes edgefd's labels once edgefd is gone (they stay on purpose: a deleted
# DaemonSet must not make every workload unschedulable at once): the README's command.
REMOVE_LABELS = ("feature-sink", "--prune", "--kubeconfig", "KUBECONFIG", "--node-name", "NODE")
SLACK_S = 2.0  # the kubelet's status update period (1 s) plus sampling


def zero_windows(samples: list[Sample], resource: str) -> list[tuple[float, float]]:
    """(start, end) of each run of samples without ``resource`` allocatable."""
    windows, start = [], None
    for s in samples:
        zero = s.allocatable.get(resource, "0") == "0"
        if zero and start is None:
            start = s.t
        elif not zero and start is not None:
            windows.append((start, s.t))
            start = None
    if start is not None:
        windows.append((start, samples[-1].t))
    return windows


def check_rolling_update(run: Run) -> dict[str, Any]:
    """7. A new image tag rolls out: no label ever leaves the Node (sampled every 100 ms),
    no resource is at 0 allocatable for longer than the pod's restart."""
    new_image = run.image + "-rollout"
    run.node.runtime.tag(run.image, new_image)
    old_pod = run.edgefd_pod()["metadata"]["name"]
    t0 = time.monotonic()
    run.kubectl("-n", NAMESPACE, "set", "image", "daemonset/edgefd", f"*={new_image}")
    t_old_gone = None

    def rolled() -> bool:
        nonlocal t_old_gone
        pods = run.edgefd_pods()
        if t_old_gone is None and any(
            p["metadata"]["name"] == old_pod and p["metadata"].get("deletionTimestamp")
            for p in pods
        ):
            t_old_gone = time.monotonic()
        new = [p for p in pods if p["metadata"]["name"] != old_pod]
        if len(pods) != 1 or len(new) != 1:
            return False
        # the runtime may report either tag of the one image, so the spec says which it runs
        images = {c["image"] for c in spec_containers(new[0]["spec"])}
        return images == {new_image} and running_ready(new[0])

    wait_for("rollout", rolled, timeout=90, interval=0.1)
    t_ready = time.monotonic()
    wait_for(
        "allocatable after rollout",
        lambda: run.sampler.first(lambda s: run.allocatable_ok(s.allocatable), t_ready),
        timeout=30,
    )
    samples = [s for s in run.sampler.samples if s.t >= t0]
    lost = sorted({k for s in samples for k in run.expected if s.labels.get(k) != run.expected[k]})
    restart_s = t_ready - (t_old_gone or t0)
    offered = [r for r, n in run.offer.allocatable().items() if n != "0"]
    windows = {r: [round(b - a, 2) for a, b in zero_windows(samples, r)] for r in offered}
    problems = [f"labels missing at some point: {lost}"] if lost else []
    for r, ws in windows.items():
        if ws and max(ws) > restart_s + SLACK_S:
            problems.append(f"{r} at 0 for {max(ws)}s, the restart took {restart_s:.1f}s")
    run.figures["rollout_s"] = round(t_ready - t0, 2)
    return {
        "ok": not problems,
        "problems": problems,
        "samples": len(samples),
        "rollout_s": round(t_ready - t0, 2),
        "restart_s": round(restart_s, 2),
        "zero_allocatable_s": windows,
    }


def check_delete(run: Run) -> dict[str, Any]:
    """8. Deleting the DaemonSet and its namespace leaves the labels and no plugin socket; the
    documented command then removes the labels."""
    run.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s", timeout=150)
    problems = []
    labels = run.get_node()["metadata"].get("labels", {})
    gone = sorted(k for k in run.expected if k not in labels)
    if gone:
        problems.append(f"labels removed with edgefd: {gone}")
    sockets = run.node.plugin_sockets()
    if sockets != ["kubelet.sock"]:
        problems.append(f"sockets left in the device-plugins dir: {sockets}")
    kubeconfig = run.kubectl.argv[1].split("=", 1)[1]
    argv = [{"NODE": run.node_name, "KUBECONFIG": kubeconfig}.get(a, a) for a in REMOVE_LABELS[1:]]
    r = subprocess.run(
        [sys.executable, "-m", "edgefd.feature_sink", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    meta = run.get_node()["metadata"]
    left = sorted(k for k in run.expected if k in meta.get("labels", {}))
    if r.returncode != 0 or left or OWNERSHIP in meta.get("annotations", {}):
        problems.append(f"the documented removal left {left} ({r.stderr.strip()[-300:]})")
    return {
        "ok": not problems,
        "problems": problems,
        "sockets": sockets,
        "removed": len(run.expected) - len(left),
    }


def check_figures(run: Run) -> dict[str, Any]:
    """9. The figures: DaemonSet create -> labels, -> allocatable; every container's memory
    after 30 s idle and its peak during the checks, with their sums (in the first scenario of
    each device API: the same pod after that); image size. A check only
    in that each must have been measured."""
    want = (
        "ds_create_to_labels_s",
        "ds_create_to_allocatable_s",
        *(("memory_mib", "memory_peak_mib") if run.measure_idle else ()),
        "image_archive_bytes",
    )
    missing = [k for k in want if not run.figures.get(k)]
    return {"ok": not missing, "missing": missing, **{k: run.figures.get(k) for k in want}}
