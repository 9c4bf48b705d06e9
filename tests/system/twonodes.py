"""Two real nodes (``scripts/e2e --nodes 2``, the scenario ``two-nodes``): one control plane
(API server, controller-manager with its device-taint-eviction controller, scheduler) and two
kubelets, each its own Node with its own runtime, kubelet root, plugin sockets, host tree, mount
and network namespaces (node.py ``private_net``: both nodes' pods hold the same loopback
ports). edgefd is installed once, in DRA mode with ``--evict-after 2s``; it runs one pod per
node.

What a fleet of Pis with a Coral each must show when one Coral fails:

* ``2n_per_node``: on both nodes edgefd's pod is Ready, the Node carries the labels the
  producers compute for its own tree, its ResourceSlices list its own tree's devices, and a
  pod pinned to the node opens its device there (first use);
* ``2n_follow``: a Deployment of one replica with a ResourceClaimTemplate for a Coral runs on
  one node; its Coral is pulled; the pod is evicted and its replacement is scheduled to the
  other node and opens that node's Coral. Five trials, the workload moving back and forth
  (each trial pulls the Coral its pod holds, the previous trial's Coral is back by then):
  unplug -> the replacement running and its device opened, median and worst. After the
  Coral comes back, nothing moves back, and the node's device is untainted again;
* ``2n_extended``: the same for a pod that asks for ``edgefd.io/coral-usb: 1`` through the DRA
  extended resource (KEP-5004): what happens is recorded (kubernetes#141290: a NoExecute
  device taint does not evict such pods) and the check holds edgefd to what it documents
  (docs/devices.md) either way;
* ``2n_recipes``: the scheduling guide's recipes that choose between nodes (recipe 2's OR
  across the Coral's two USB identities, recipe 8's firstAvailable alternatives), taken from
  docs/scheduling.md and placed by the real scheduler on the two nodes;
* ``2n_alert``: a real Prometheus scrapes the first node's pod with edgefd's alerting rules;
  that node's NCS2, which no other check uses, is pulled right after ``2n_per_node`` and
  ``EdgefdDeviceUnavailable`` must be firing once ``2n_recipes`` is done (its ``for: 1m``
  passes while the checks between run);
* ``2n_device_plugin``: the same fleet reinstalled in device-plugin mode: a pulled Coral's pod
  stays where it is, Unhealthy.
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from edgefd.core.duration import parse_duration
from tests.alerts.rules import alerts

from .checks_devices import device_problems, probe
from .checks_dra import claim_workload, ensure_template, node_slices
from .checks_evict import DEPLOYMENTS, EVICT_AFTER_S, HOLD_S, deployment, with_evict_after
from .checks_extended import extended_workload
from .checks_health import wait_pod_health
from .context import Run
from .expect import Device, plugin_offer, producer_labels
from .kube import NodeSampler, wait_for
from .node import Node
from .prometheus import Prometheus
from .session import NAMESPACE as NAMESPACE_EDGEFD

log = logging.getLogger("e2e.two-nodes")
PODS = "/api/v1/namespaces/default/pods"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
TRIALS = 5
FOLLOW_GOAL_S = 10.0  # unplug -> replacement running with its device, hold and delay included
PENDING_GRACE = 1.5  # s: a pod that must stay Pending is looked at again after a retry


def node_run(base: Run, node: Node) -> Run:
    """The run's context for one node: its own tree's labels and offer."""
    tree = node.spec.host_tree
    return Run(
        cp=base.cp,
        node=node,
        api=base.api,
        kubectl=base.kubectl,
        sampler=NodeSampler(base.api, node.spec.name, slices=True),
        overlay=base.overlay,
        dra=True,
        daemonset=base.daemonset,
        image=base.image,
        expected=producer_labels(tree),
        offer=plugin_offer(tree, node.spec.name),
        measure_idle=False,
    )


def _ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _coral(run: Run) -> Device:
    resource = run.offer.primary()
    if resource is None or not run.offer.resources[resource]:
        raise AssertionError(f"{run.node_name}: its tree has no device the plugin offers")
    return run.offer.resources[resource][0]


def pinned(pod: dict[str, Any], node: str) -> dict[str, Any]:
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def check_per_node(runs: list[Run]) -> dict[str, Any]:
    """2n_per_node. Every per-node fact holds on both nodes."""
    problems: list[str] = []
    out: dict[str, Any] = {}
    for run in runs:
        name = run.node_name
        _, waited = wait_for(
            f"edgefd's pod Ready on {name}", lambda run=run: _edgefd_ready(run), 180, 0.5
        )
        wait_for(f"{name}'s labels", lambda run=run: _labelled(run), 90, 0.5)
        listed, _ = wait_for(f"{name}'s slices", lambda run=run: _listed(run), 90, 0.5)
        device = _coral(run)
        template = ensure_template(run, device.device_class)
        pod = f"first-use-{name}"
        run.create_pod(pinned(claim_workload(pod, run.image, template), name))
        c = run.running_container(pod)
        p = probe(run, c["id"], [device])
        want_node = device.node_now(run.node.host.root)
        problems += [
            f"{name}: {x}" for x in device_problems(p, dict.fromkeys(device.kubelet_ids, want_node))
        ]
        run.delete_pod(pod, wait=True)
        out[name] = {
            "pod_ready_s": round(waited, 2),
            "labels": len(run.expected),
            "slice_devices": sorted(listed),
            "first_use": p["env"],
        }
    a, b = runs
    if a.expected == b.expected:
        problems.append("both trees give the same labels: the check cannot tell the nodes apart")
    return {"ok": not problems, "problems": problems, "nodes": out}


def _edgefd_ready(run: Run) -> bool:
    return any(p["spec"].get("nodeName") == run.node_name and _ready(p) for p in run.edgefd_pods())


def _labelled(run: Run) -> bool:
    got = run.get_node()["metadata"].get("labels") or {}
    return all(got.get(k) == v for k, v in run.expected.items())


def _listed(run: Run) -> list[str]:
    """The devices the node's slices list, once they include every device of its tree."""
    names = {d["name"] for s in node_slices(run) for d in s["spec"].get("devices") or ()}
    return sorted(names) if names >= {d.dra_name for d in run.offer.devices} else []


def _replacement(run: Run, app: str, old: str) -> dict[str, Any] | None:
    for p in _live(run, app):
        if p["metadata"]["name"] != old and p["status"].get("phase") == "Running":
            return p
    return None


def _one_running(run: Run, app: str) -> list[dict[str, Any]]:
    ps = [p for p in _live(run, app) if p["status"].get("phase") == "Running"]
    return ps if len(ps) == 1 else []


def _live(run: Run, app: str) -> list[dict[str, Any]]:
    items = run.api.get(f"{PODS}?labelSelector=app%3D{app}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _held(run: Run, pod: str) -> Device:
    """The device the pod's claim (its own, or its extended resource's) was allocated."""
    p = run.api.get(f"{PODS}/{pod}")
    status = p.get("status") or {}
    names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()]
    names.append((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))
    for name in filter(None, names):
        claim = run.api.get_or_none(f"{CLAIMS}/{name}") or {}
        alloc = (claim.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or ():
            return run.offer.by_dra_name(r["device"])
    raise AssertionError(f"{pod}: no allocated claim")


def _untainted(run: Run, device: Device) -> bool:
    for s in node_slices(run):
        for d in s["spec"].get("devices") or ():
            if d["name"] == device.dra_name:
                return not d.get("taints")
    return False


def follow(runs: list[Run], app: str, trials: int) -> dict[str, Any]:
    """Pull the device of the app's one pod, ``trials`` times; each time the replacement must
    run on the other node and open its device there."""
    by_node = {r.node_name: r for r in runs}
    times: list[float] = []
    problems: list[str] = []
    moves: list[str] = []
    for i in range(trials):
        (pod,), _ = wait_for(f"{app}: one pod running", lambda: _one_running(runs[0], app), 120)
        old, here = pod["metadata"]["name"], pod["spec"]["nodeName"]
        src = by_node[here]
        dst = next(r for r in runs if r is not src)
        device = _held(src, old)
        src.node.host.unplug(device.bus, device.location)
        t0 = time.monotonic()
        try:
            new, _ = wait_for(
                f"trial {i + 1}: {old}'s replacement running",
                lambda src=src, old=old: _replacement(src, app, old),
                timeout=HOLD_S + EVICT_AFTER_S + 60,
                interval=0.05,
            )
            name, there = new["metadata"]["name"], new["spec"]["nodeName"]
            if there != dst.node_name:
                problems.append(f"trial {i + 1}: the replacement ran on {there}, not the other")
                continue
            c = dst.running_container(name)
            got = _held(dst, name)
            p = probe(dst, c["id"], [got])
            want = got.node_now(dst.node.host.root)
            bad = device_problems(p, dict.fromkeys(got.kubelet_ids, want))
            t = time.monotonic() - t0
            problems += [f"trial {i + 1}: {x}" for x in bad]
            times.append(round(t, 2))
            moves.append(f"{here}->{there}")
        finally:
            src.node.host.plug(device.bus, device.location)
        wait_for(
            f"{here}'s {device.dra_name} untainted again",
            lambda src=src, device=device: _untainted(src, device),
            timeout=60,
            interval=0.1,
        )
    # back on its node, the device stays free: nothing moves back to it
    time.sleep(3.0)
    pods = _live(runs[0], app)
    if len(pods) != 1 or pods[0]["metadata"]["name"] != name:
        problems.append(f"after the last re-plug the workload moved again: {_names(pods)}")
    return {"times": times, "moves": moves, "problems": problems}


def _names(pods: list[dict[str, Any]]) -> list[str]:
    return [f"{p['metadata']['name']}@{p['spec'].get('nodeName')}" for p in pods]


def check_follow(runs: list[Run]) -> dict[str, Any]:
    """2n_follow. A claim's Deployment follows its Coral from node to node."""
    device = _coral(runs[0])
    template = ensure_template(runs[0], device.device_class)
    app = "follower"
    runs[0].api.request("POST", DEPLOYMENTS, deployment(app, runs[0].image, template))
    try:
        r = follow(runs, app, TRIALS)
    finally:
        _delete_deployment(runs[0], app)
    times = r["times"]
    figures = {
        "follow_s": times,
        "follow_median_s": statistics.median(times) if times else None,
        "follow_worst_s": max(times) if times else None,
    }
    problems = list(r["problems"])
    if len(times) < TRIALS:
        problems.append(f"{len(times)} of {TRIALS} trials moved the workload")
    # the goal is a figure, not a verdict: a loaded machine starts containers slower, and a
    # timed assertion would fail there for no fault of edgefd's (the JSON line says it)
    figures["follow_goal_s"] = FOLLOW_GOAL_S
    figures["follow_within_goal"] = bool(times) and max(times) < FOLLOW_GOAL_S
    return {"ok": not problems, "problems": problems, "moves": r["moves"], **figures}


def _delete_deployment(run: Run, app: str) -> None:
    run.api.request("DELETE", f"{DEPLOYMENTS}/{app}", {"propagationPolicy": "Foreground"})
    wait_for(f"{app}'s pods gone", lambda: not _live(run, app), 90, 0.2)


def check_extended(runs: list[Run]) -> dict[str, Any]:
    """2n_extended. A Deployment whose pod asks for the Coral by its extended resource name,
    through DRA: its Coral is pulled; what happens within the hold + --evict-after + 20 s."""
    run = runs[0]
    device = _coral(run)
    app = "extended-follower"
    pod = extended_workload(app, run.image, device.resource)
    body = deployment(app, run.image, "")
    body["spec"]["template"]["spec"] = pod["spec"]
    run.api.request("POST", DEPLOYMENTS, body)
    problems: list[str] = []
    try:
        (first,), _ = wait_for(f"{app}: its pod running", lambda: _one_running(run, app), 120)
        old, here = first["metadata"]["name"], first["spec"]["nodeName"]
        src = next(r for r in runs if r.node_name == here)
        held = _held(src, old)
        src.node.host.unplug(held.bus, held.location)
        t0 = time.monotonic()
        try:
            deadline = t0 + HOLD_S + EVICT_AFTER_S + 20
            evicted_s = moved_s = None
            where = ""
            while time.monotonic() < deadline and moved_s is None:
                now = run.api.get_or_none(f"{PODS}/{old}")
                if evicted_s is None and (now is None or now["metadata"].get("deletionTimestamp")):
                    evicted_s = round(time.monotonic() - t0, 2)
                new = _replacement(run, app, old)
                if new is not None:
                    moved_s, where = round(time.monotonic() - t0, 2), new["spec"]["nodeName"]
                time.sleep(0.1)
            tainted = not _untainted(src, held)
        finally:
            src.node.host.plug(held.bus, held.location)
    finally:
        _delete_deployment(run, app)
    behaviour = (
        f"evicted after {evicted_s}s, replacement running on {where} after {moved_s}s"
        if moved_s is not None
        else f"evicted after {evicted_s}s, no replacement running"
        if evicted_s is not None
        else "not evicted: the pod stays on the node whose device is gone (kubernetes#141290)"
    )
    if not tainted:
        problems.append(f"{held.dra_name} was not tainted while absent")
    if moved_s is None:  # the harness's Kubernetes (1.37) evicts them: PodClaims names it
        problems.append(f"the extended-resource pod did not follow: {behaviour}")
    documented = _documented_extended()
    if documented is None:
        problems.append("docs/devices.md does not say what a DRA extended-resource pod does")
    return {
        "ok": not problems,
        "problems": problems,
        "pulled": held.dra_name,
        "node": here,
        "evicted_s": evicted_s,
        "moved_s": moved_s,
        "moved_to": where or None,
        "behaviour": behaviour,
    }


def _documented_extended() -> str | None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "devices.md"
    text = docs.read_text()
    return "141290" if "kubernetes#141290" in text or "issues/141290" in text else None


def guide_objects(*pods: str) -> dict[str, list[dict[str, Any]]]:
    """The manifests of the scheduling guide's blocks whose pods are named (the claim with it),
    as a reader copies them: each pod made runnable on this node (our image, sleeping, the host
    network, the not-ready toleration of this control plane), nothing else changed."""
    from tests.docs.guide import load

    scenarios, _ = load()
    out: dict[str, list[dict[str, Any]]] = {}
    for block in (b for sc in scenarios for b in sc.blocks):
        if block.pod_name in pods:
            out[block.pod_name] = [copy.deepcopy(o) for o in block.objects]
    missing = set(pods) - set(out)
    if missing:
        raise AssertionError(f"docs/scheduling.md has no block of pod(s) {sorted(missing)}")
    return out


def runnable(obj: dict[str, Any], image: str) -> dict[str, Any]:
    if obj.get("kind") != "Pod":
        obj.setdefault("metadata", {})["namespace"] = "default"
        return obj
    obj["metadata"]["namespace"] = "default"
    spec = obj["spec"]
    spec.update(hostNetwork=True, terminationGracePeriodSeconds=1)
    spec.setdefault("tolerations", []).append(
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    )
    for c in spec["containers"]:
        c.update(image=image, imagePullPolicy="Never", command=["sleep", "infinity"])
    return obj


def _create(run: Run, obj: dict[str, Any]) -> None:
    kind = obj["kind"]
    path = PODS if kind == "Pod" else CLAIMS if kind == "ResourceClaim" else None
    if path is None:
        raise AssertionError(f"a {kind} in a guide block: not placed by this check")
    run.api.request("POST", path, obj)


def _placed(run: Run, pod: str) -> dict[str, Any] | None:
    """The pod once the scheduler decided: bound (its node) or unschedulable (its message)."""
    p = run.api.get_or_none(f"{PODS}/{pod}") or {}
    node = p.get("spec", {}).get("nodeName")
    if node:
        return {"node": node}
    for c in p.get("status", {}).get("conditions") or ():
        if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
            return {"node": None, "message": c.get("message", "")}
    return None


def _bound(run: Run, pod: str) -> dict[str, Any] | None:
    got = _placed(run, pod)
    return got if got and got["node"] else None


def _subrequest(run: Run, claim: str) -> str | None:
    got = run.api.get_or_none(f"{CLAIMS}/{claim}") or {}
    results = ((got.get("status") or {}).get("allocation") or {}).get("devices", {})
    for r in results.get("results") or ():
        return r["request"]
    return None


def check_recipes(runs: list[Run]) -> dict[str, Any]:
    """2n_recipes. The scheduling guide's recipes that choose between nodes, placed by the
    real scheduler on the two real nodes: recipe 2's OR of the Coral's two USB identities
    (``nodeSelectorTerms``: the first node's Coral is in its boot state, the second's in its
    runtime state; the pod, pinned to each node in turn, binds on both, and each term alone
    only where its identity is), and the firstAvailable claims of recipe 8 ("Four alternatives,
    best first"): the first takes a Coral USB, the second the other node's (the first node's
    is taken), the third stays Pending (nothing else it accepts: an NCS2 is not an
    alternative)."""
    from tests.docs.placement import pinned as pinned_to

    base = runs[0]
    names = [r.node_name for r in runs]
    problems: list[str] = []
    placed: dict[str, Any] = {}
    objs = guide_objects("coral-usb-by-nfd-label", *(f"dra-accelerator-{i}" for i in (1, 2, 3)))
    (or_pod,) = objs["coral-usb-by-nfd-label"]
    made: list[str] = []
    claims: list[str] = []
    try:
        terms = or_pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        variants = {"both": terms, "boot": terms[:1], "runtime": terms[1:]}
        for variant, kept in variants.items():
            for node in names:
                pod = copy.deepcopy(or_pod)
                pod["spec"]["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]["nodeSelectorTerms"] = copy.deepcopy(kept)
                pod = runnable(pinned_to(pod, node), base.image)
                pod["metadata"]["name"] = f"or-{variant}-on-{node}"
                _create(base, pod)
                made.append(pod["metadata"]["name"])
        for name in made:
            got, _ = wait_for(f"{name} placed", lambda n=name: _placed(base, n), 60, 0.2)
            placed[name] = got["node"]
        by_run = {r.node_name: r for r in runs}
        for name in made:
            variant, node = name.removeprefix("or-").split("-on-")
            labels = by_run[node].expected
            fits = {
                "both": True,
                "boot": labels.get("feature.node.kubernetes.io/usb-fe_1a6e_089a.present") == "true",
                "runtime": labels.get("feature.node.kubernetes.io/usb-ff_18d1_9302.present")
                == "true",
            }[variant]
            if (placed[name] == node) != fits:
                want = "bound" if fits else "Pending"
                problems.append(f"{name}: {placed[name] or 'Pending'}, want {want}")
        for i in (1, 2, 3):
            for obj in objs[f"dra-accelerator-{i}"]:
                _create(base, runnable(obj, base.image))
                if obj["kind"] == "ResourceClaim":
                    claims.append(obj["metadata"]["name"])
                else:
                    made.append(obj["metadata"]["name"])
            name = f"dra-accelerator-{i}"
            if i < 3:  # an Unschedulable verdict may be a stale one: the scheduler retries
                try:
                    got, _ = wait_for(f"{name} bound", lambda n=name: _bound(base, n), 60, 0.2)
                except AssertionError:
                    got = _placed(base, name) or {"node": None}
            else:
                got, _ = wait_for(f"{name} placed", lambda n=name: _placed(base, n), 60, 0.2)
                time.sleep(PENDING_GRACE)
                got = _placed(base, name) or got
            placed[name] = got["node"] or f"Pending: {got.get('message', '')}"
            placed[f"accelerator-{i}"] = _subrequest(base, f"accelerator-{i}")
        nodes = [placed[f"dra-accelerator-{i}"] for i in (1, 2, 3)]
        first, second, third = (n if n in names else None for n in nodes)
        if not first or not second or first == second:
            problems.append(f"accelerator 1 and 2: {nodes[:2]}: want one on each node")
        for i in (1, 2):
            if first and second and placed[f"accelerator-{i}"] != "accelerator/coral-usb":
                problems.append(f"accelerator-{i}: {placed[f'accelerator-{i}']}, want coral-usb")
        if third:
            problems.append(f"dra-accelerator-3 bound to {third}: every Coral USB is taken")
        operator, found = operator_view(
            base, names, holders=["dra-accelerator-1", "dra-accelerator-2"]
        )
        problems += found
    finally:
        for name in made:
            base.api.request("DELETE", f"{PODS}/{name}?gracePeriodSeconds=0")
        wait_for("the recipes' pods gone", lambda: not any(
            base.api.get_or_none(f"{PODS}/{n}") for n in made), 90, 0.2)  # fmt: skip
        for claim in claims:
            base.api.request("DELETE", f"{CLAIMS}/{claim}")
    return {"ok": not problems, "problems": problems, "placed": placed, **operator}


def operator_view(
    run: Run, names: list[str], holders: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """What `kubectl edgefd nodes` and `kubectl edgefd why` tell an operator about this fleet
    while every Coral is held and a third pod waits: a row per node, and a reason naming the
    pods that hold the Corals."""
    problems: list[str] = []
    nodes = run.kubectl.plugin("edgefd", "nodes")
    why = run.kubectl.plugin("edgefd", "why", "dra-accelerator-3", "-n", "default")
    for what, r in (("nodes", nodes), ("why", why)):
        if r.returncode != 0:
            problems.append(f"kubectl edgefd {what}: exit {r.returncode}: {r.stderr.strip()}")
    rows = {ln.split()[0]: ln.split() for ln in nodes.stdout.splitlines()[1:] if ln.strip()}
    for name in names:
        row = rows.get(name)
        if row is None or "dra" not in row:
            problems.append(f"kubectl edgefd nodes: no DRA row for {name}: {nodes.stdout!r}")
    missing = [h for h in holders if h not in why.stdout]
    if missing:
        problems.append(f"kubectl edgefd why names no holder {missing}: {why.stdout!r}")
    view = {"kubectl_edgefd_nodes": nodes.stdout, "kubectl_edgefd_why": why.stdout}
    return view, problems


def switch_to_device_plugin(runs: list[Run], overlay: Path) -> float:
    """edgefd's DRA install deleted (its slices and files on both nodes gone) and the device
    plugin's overlay applied; seconds until both nodes show the Coral allocatable."""
    from .scenario import namespace_ready
    from .session import NAMESPACE, SLICES, node_state

    base = runs[0]
    t0 = time.monotonic()
    base.kubectl(
        "delete", "-k", str(base.overlay), "--ignore-not-found", "--wait=true",
        "--timeout=150s", timeout=180,
    )  # fmt: skip
    wait_for(
        "edgefd's namespace gone",
        lambda: base.api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None,
        150,
        0.5,
    )
    for run in runs:
        base.api.request("DELETE", f"{SLICES}?fieldSelector=spec.nodeName%3D{run.node_name}")
        run.node.ns.run(["sh", "-c", node_state(run.node.layout)])
    namespace_ready(base.api)
    base.kubectl("apply", "--server-side", "-k", str(overlay))
    for run in runs:
        resource = _coral(run).resource
        wait_for(
            f"{run.node_name}: {resource} allocatable",
            lambda run=run, r=resource: (
                run.get_node()["status"].get("allocatable", {}).get(r, "0") != "0"
            ),
            180,
            0.5,
        )
    return time.monotonic() - t0


def check_device_plugin(runs: list[Run], overlay: Path) -> dict[str, Any]:
    """2n_device_plugin. The same fleet in device-plugin mode: a Deployment's pod holding a
    Coral through the device plugin, its Coral pulled. The kubelet has no way to move it:
    the device turns Unhealthy in the pod's status and the node's allocatable, the pod stays
    where it is, Running, and no replacement is made."""
    switched = switch_to_device_plugin(runs, overlay)
    run = runs[0]
    resource = _coral(run).resource
    app = "plugin-holder"
    body = deployment(app, run.image, "")
    # on the first node: its Coral is the one pulled
    spec = extended_workload(app, run.image, resource)["spec"]
    body["spec"]["template"]["spec"] = pinned({"spec": spec}, run.node_name)["spec"]
    run.api.request("POST", DEPLOYMENTS, body)
    problems: list[str] = []
    try:
        (pod,), _ = wait_for(f"{app}: its pod running", lambda: _one_running(run, app), 120)
        name, here = pod["metadata"]["name"], pod["spec"]["nodeName"]
        src = next(r for r in runs if r.node_name == here)
        device = _coral(src)
        src.node.host.unplug(device.bus, device.location)
        t0 = time.monotonic()
        try:
            shown = wait_pod_health(src, name, "Unhealthy", t0)
            wait_for(
                f"{here}: {resource} allocatable 0",
                lambda: src.get_node()["status"].get("allocatable", {}).get(resource) == "0",
                30,
                0.1,
            )
            t_alloc = round(time.monotonic() - t0, 2)
            time.sleep(max(0.0, t0 + HOLD_S + EVICT_AFTER_S + 5 - time.monotonic()))
            now = _live(run, app)
            if [p["metadata"]["name"] for p in now] != [name]:
                problems.append(f"the pod moved or was replaced: {_names(now)}")
            elif now[0]["status"].get("phase") != "Running":
                problems.append(f"{name} is {now[0]['status'].get('phase')}, not Running")
        finally:
            src.node.host.plug(device.bus, device.location)
        back = wait_pod_health(src, name, "Healthy", time.monotonic())
    finally:
        _delete_deployment(run, app)
    return {
        "ok": not problems,
        "problems": problems,
        "switch_s": round(switched, 2),
        "node": here,
        "pod": name,
        "unplug_to_pod_unhealthy_s": shown["after_s"],
        "unplug_to_allocatable_0_s": t_alloc,
        "stayed": not problems,
        "replug_to_pod_healthy_s": back["after_s"],
    }


ALERT = "EdgefdDeviceUnavailable"
PLUGIN_PORTS = (8081, 8082, 8083, 8084)  # the overlay's listeners (hostNetwork: loopback)


def scraping(run: Run) -> Prometheus:
    """A real Prometheus scraping the first node's edgefd pod, with edgefd's rules."""
    pod = next(p for p in run.edgefd_pods() if p["spec"].get("nodeName") == run.node_name)
    labels = {"namespace": NAMESPACE_EDGEFD, "pod": pod["metadata"]["name"], "node": run.node_name}
    targets = [f"127.0.0.1:{port}" for port in PLUGIN_PORTS]
    prom = Prometheus(run.node.dir.parent / "prometheus", targets, labels).start()
    wait_for("every target up", lambda: sum(prom.up().values()) == len(targets), 30, 0.5)
    return prom


class AlertWatch:
    """``2n_alert``: a real Prometheus scrapes the first node's edgefd pod with edgefd's own
    rules while a device of that node that no other check uses (the rpi4-coral tree's NCS2)
    is pulled; ``EdgefdDeviceUnavailable`` (its DRA arm: the inventory's absent devices,
    with no device-plugin series) must fire. Started after ``2n_per_node`` and judged after
    ``2n_recipes``, so the alert's ``for: 1m`` passes while those checks run instead of
    being waited out on its own (about a minute of the e2e's time)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        coral = _coral(run)
        spare = [d for ds in run.offer.resources.values() for d in ds if d.kind != coral.kind]
        self.device: Device | None = spare[0] if spare else None
        self.prom: Prometheus | None = None
        self.t0 = 0.0
        self.error = ""

    def start(self) -> None:
        if self.device is None:
            return
        try:
            self.prom = scraping(self.run)
            self.run.node.host.unplug(self.device.bus, self.device.location)
            self.t0 = time.time()
        except Exception as e:  # said by the check; the checks between go on
            self.error = f"{type(e).__name__}: {e}"
            self.stop()

    def check(self) -> dict[str, Any]:
        if self.device is None:
            return {"ok": True, "not_applicable": "no device of a second kind on the first node"}
        try:
            if self.error or self.prom is None:
                return {"ok": False, "problems": [f"could not start: {self.error}"]}
            fired = alert_fires(self.prom, ALERT, self.t0)
            problems = fired.pop("problems")
            return {"ok": not problems, "problems": problems, "device": self.device.dra_name,
                    **fired}  # fmt: skip
        finally:
            self.stop()

    def stop(self) -> None:
        if self.t0 and self.device is not None:
            self.run.node.host.plug(self.device.bus, self.device.location)
            self.t0 = 0.0
        if self.prom is not None:
            self.prom.stop()
            self.prom = None


def alert_fires(prom: Prometheus, alert: str, since: float) -> dict[str, Any]:
    """Wait for ``alert`` to fire, at most its ``for`` plus 30 s after ``since`` (wall clock:
    the device pulled). The times from ``since``: when Prometheus made it pending (its
    ``activeAt``; firing follows ``for`` later) and when it was seen firing (later than it
    fired when the checks before this one took longer than ``for``)."""
    from datetime import datetime

    rule = alerts()[alert]
    hold = parse_duration(rule.get("for", "0s"))  # the rules' `for` is one unit: 1m, 5m
    left = max(1.0, since + hold + 30 - time.time())
    try:
        shown, _ = wait_for(f"{alert} firing", lambda: prom.firing(alert), left, 0.5)
    except AssertionError:
        states = [(a["labels"]["alertname"], a["state"]) for a in prom.alerts()]
        return {"problems": [f"{alert} did not fire within {hold + 30:g}s: {states}"]}
    active = datetime.fromisoformat(shown[0]["activeAt"].replace("Z", "+00:00")).timestamp()
    return {
        "problems": [],
        "alert": alert,
        "alert_for_s": hold,
        "unplug_to_alert_pending_s": round(active - since, 2),
        "unplug_to_alert_seen_firing_s": round(time.time() - since, 2),
        "alert_labels": shown[0]["labels"],
    }


CHECKS = [
    ("2n_per_node", check_per_node, ()),
    ("2n_follow", check_follow, ("2n_per_node",)),
    ("2n_extended", check_extended, ("2n_per_node",)),
    ("2n_recipes", check_recipes, ("2n_per_node",)),
]


def run_two_nodes(runs: list[Run], result: dict[str, Any], plugin_overlay: Path | None) -> None:
    """Roll devplugin with --evict-after on both nodes, then the checks in order; last, with
    ``plugin_overlay`` (kustomize installs), the device plugin's check."""
    t = time.monotonic()
    rolled = with_evict_after(runs[0], pods=len(runs))
    for run in runs:
        wait_for(f"{run.node_name}'s slice", lambda run=run: node_slices(run), 60, 0.2)
    result["timings"]["evict_after_rollout_s"] = round(time.monotonic() - t, 2)
    log.info("devplugin rolled with --evict-after on both nodes (%.1fs)", rolled)
    from .scenario import run_one

    alert = AlertWatch(runs[0])
    try:
        for key, check, needs in CHECKS:
            run_one(result, key, needs, lambda check=check: check(runs))
            if key == "2n_per_node":
                alert.start()
        run_one(result, "2n_alert", ("2n_per_node",), alert.check)
    finally:
        alert.stop()
    if plugin_overlay is not None:
        run_one(result, "2n_device_plugin", (), lambda: check_device_plugin(runs, plugin_overlay))
