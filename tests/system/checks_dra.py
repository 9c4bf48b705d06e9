"""The checks of `scripts/e2e --api dra`: edgefd's DaemonSet with the DRA component
(k8s/overlays/dra, through tests/system/overlay-dra) on the real node, where the real kubelet
registers the DRA plugin and prepares claims, and containerd resolves its CDI specs.

1-2 are the device-plugin run's (the DaemonSet as the manifest says, the Node's labels).
3. The node's ResourceSlice is what `devplugin --api dra --dry-run` says for the host tree,
   and the kubelet registered the plugin.
4. A pod with a ResourceClaimTemplate for `edgetpu.edgefd.io`, scheduled by the real
   kube-scheduler, gets the Coral through CDI: `/dev/edgefd/<id>` with the host node's
   major:minor, openable, the env var, the read-only `/dev/bus/usb`; a second such pod stays
   Pending (one Coral).
5. A kubelet restart: the plugin registers again, the slice the starting kubelet wipes is back,
   the running pod is undisturbed, and a pod created afterwards gets the NCS2.
6. Hot-plug while the workload runs: unplug -> the device is tainted in the slice, plug back
   with a new devnum -> untainted, each within a second; the claim's CDI spec follows and the
   restarted container gets the new node.
7. Deleting the pod unprepares the claim: its CDI spec is removed.
8. Deleting the DaemonSet (no claim prepared any more) removes the slice and the sockets.
9. The figures.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.peers.processes import REPO_ROOT

from . import checks_pod
from .checks_devices import NCS2, _device_ok, probe, restart_and_probe
from .context import NAMESPACE, RESOURCES, Run, metric, plugin_metrics
from .kube import KubeError, wait_for

OVERLAY = REPO_ROOT / "tests" / "system" / "overlay-dra"
CORAL = RESOURCES[0]
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
HOTPLUG_S = 1.0
PROBE_USB_BUS = "/dev/bus/usb"


def node_slices(run: Run) -> list[dict[str, Any]]:
    path = f"{SLICES}?fieldSelector=spec.nodeName%3D{run.node_name},spec.driver%3Dedgefd.io"
    return run.api.get(path)["items"]


def node_devices(run: Run) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in node_slices(run) for d in s["spec"].get("devices") or ()}


def cdi_dir(run: Run) -> Path:
    """The node's /var/run/cdi (/run is scratch in its mount namespace)."""
    return run.node.ns.dir / "run" / "cdi"


def claim_template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "dev", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def claim_workload(name: str, image: str, template: str) -> dict[str, Any]:
    """A pod as a user would write it in DRA: a claim from a template, no node selector."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "app",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "securityContext": {"runAsUser": 0},
                    "resources": {"claims": [{"name": "dev"}]},
                }
            ],
        },
    }


def _claim_of(run: Run, pod: str) -> dict[str, Any] | None:
    p = run.api.get(f"/api/v1/namespaces/default/pods/{pod}")
    for st in p.get("status", {}).get("resourceClaimStatuses") or ():
        if st.get("resourceClaimName"):
            return run.api.get_or_none(
                f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{st['resourceClaimName']}"
            )
    return None


def _registrations(run: Run) -> float:
    return metric(plugin_metrics(), "edgefd_devplugin_dra_registrations_total", result="ok")


def check_slice(run: Run) -> dict[str, Any]:
    """3. The slice says what the dry run on the host tree says; the kubelet registered us."""
    slices, _ = wait_for("ResourceSlice published", lambda: node_slices(run), timeout=60)
    run.figures["ds_create_to_slice_s"] = round(time.monotonic() - run.t_apply, 2)
    host = run.node.spec.host_tree
    dry = subprocess.run(
        [
            "devplugin",
            "--api=dra",
            "--dry-run",
            f"--host-root={host}",
            f"--node-name={run.node_name}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [] if dry.returncode == 0 else [f"dry run: {dry.stderr.strip()}"]
    want = json.loads(dry.stdout)["spec"] if dry.returncode == 0 else {}
    [got] = slices
    spec = got["spec"]
    if spec.get("devices") != want.get("devices"):
        problems.append(f"devices differ from the dry run: {spec.get('devices')}")
    if spec["pool"].get("name") != run.node_name or spec.get("nodeName") != run.node_name:
        problems.append(f"pool/nodeName: {spec['pool']}, {spec.get('nodeName')}")
    _, waited = wait_for("kubelet registered the plugin", lambda: _registrations(run), 60)
    return {
        "ok": not problems,
        "problems": problems,
        "devices": sorted(d["name"] for d in spec.get("devices") or ()),
        "generation": spec["pool"].get("generation"),
        "registered_after_slice_s": round(waited, 2),
    }


def check_claim_workload(run: Run) -> dict[str, Any]:
    """4. A ResourceClaimTemplate workload gets the Coral through CDI; a second one waits."""
    run.api.request(
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates",
        claim_template("coral", "edgetpu.edgefd.io"),
    )
    run.create_pod(claim_workload("coral-claim", run.image, "coral"))
    c = run.running_container("coral-claim")
    coral = next(n for n in run.node.device_nodes if n.devname == run.facts["coral_devname"])
    p = probe(run, c["id"], CORAL, run.facts["ncs2_path"])
    problems = _device_ok(p, (coral.major, coral.minor))
    if p.get("usb_bus_mount", "").split(",")[0] != "ro":
        problems.append(f"{PROBE_USB_BUS} mount: {p.get('usb_bus_mount')!r}, want read-only")
    if p["ungranted_open"] != "EPERM":
        problems.append(f"an ungranted device opened with {p['ungranted_open']}, want EPERM")
    claim = _claim_of(run, "coral-claim") or {}
    uid = claim.get("metadata", {}).get("uid", "")
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    spec_file = cdi_dir(run) / f"edgefd.io-{uid}.json"
    if not spec_file.exists():
        problems.append(f"no CDI spec {spec_file.name} on the node")
    run.facts["claim"] = {"container": c["id"], "id": p["env"], "uid": uid, "spec": spec_file}

    run.create_pod(claim_workload("coral-claim-2", run.image, "coral"))

    def unschedulable() -> str | None:
        pod = run.api.get("/api/v1/namespaces/default/pods/coral-claim-2")
        for cond in pod["status"].get("conditions", []):
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return cond.get("message", "")
        return None

    message, _ = wait_for("second claim workload Unschedulable", unschedulable, timeout=30)
    run.delete_pod("coral-claim-2")
    return {
        "ok": not problems,
        "problems": problems,
        "probe": p,
        "allocated": [(r["pool"], r["device"]) for r in results],
        "second_pod": message,
    }


def check_kubelet_restart(run: Run) -> dict[str, Any]:
    """5. Kubelet restart: registered again, the slice back, the running pod undisturbed, a
    new pod prepared."""
    before = _registrations(run)
    t0 = run.node.restart_kubelet()
    wait_for("plugin registered again", lambda: _registrations(run) > before, 60, 0.05)
    t_reg = time.monotonic()
    wait_for("ResourceSlice present", lambda: node_slices(run), 30, 0.05)
    t_slice = time.monotonic()
    problems = []
    w = run.facts["claim"]
    pod = run.api.get("/api/v1/namespaces/default/pods/coral-claim")
    status = pod["status"]["containerStatuses"][0]
    same = status["containerID"].endswith(w["container"]) and status["restartCount"] == 0
    if not (same and status["state"].get("running")):
        problems.append(f"the running workload was disturbed: {status}")
    coral = next(n for n in run.node.device_nodes if n.devname == run.facts["coral_devname"])
    problems += _device_ok(
        probe(run, w["container"], CORAL, "/dev/null"), (coral.major, coral.minor)
    )

    run.api.request(
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates",
        claim_template("ncs2", "myriadx.edgefd.io"),
    )
    run.create_pod(claim_workload("ncs2-claim", run.image, "ncs2"))
    c = run.running_container("ncs2-claim")
    ncs2 = next(n for n in run.node.device_nodes if n.path == run.facts["ncs2_path"])
    p_new = probe(run, c["id"], NCS2, "/dev/null")
    problems += _device_ok(p_new, (ncs2.major, ncs2.minor))
    run.delete_pod("ncs2-claim")
    figures = {
        "dra_kubelet_start_to_registered_s": round(t_reg - t0, 2),
        "dra_kubelet_start_to_slice_s": round(t_slice - t0, 2),
    }
    run.figures.update(figures)
    return {"ok": not problems, "problems": problems, **figures, "new_pod_device": p_new["env"]}


def _taints(run: Run, name: str) -> list[dict[str, Any]] | None:
    d = node_devices(run).get(name)
    return None if d is None else d.get("taints") or []


def check_hotplug(run: Run) -> dict[str, Any]:
    """6. Unplug and re-plug the Coral at its port while the workload runs: the slice follows
    within a second each way; the CDI spec names the new node; a restarted container gets it."""
    w = run.facts["claim"]
    dev_id = w["id"]
    name = dev_id.replace(".", "-")
    port = dev_id.removeprefix("usb-")
    old = run.node.host.unplug_usb(port)
    t0 = time.monotonic()
    wait_for("device tainted", lambda: _taints(run, name), timeout=10, interval=0.02)
    t_taint = time.monotonic() - t0
    new = run.node.host.plug_usb(port, int(old.devname.rsplit("/", 1)[1]) + 10)
    t1 = time.monotonic()
    wait_for("device untainted", lambda: _taints(run, name) == [], timeout=10, interval=0.02)
    t_back = time.monotonic() - t1
    problems = []
    for what, t in (("unplug", t_taint), ("plug", t_back)):
        if t > HOTPLUG_S:
            problems.append(f"{what} reached the slice after {t:.2f}s")

    def spec_follows() -> bool:
        spec = json.loads(Path(w["spec"]).read_text())
        nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
        return nodes[0]["hostPath"] == new.path

    wait_for("CDI spec names the new node", spec_follows, timeout=10, interval=0.05)
    p = restart_and_probe(run, "coral-claim", w["container"], old, new)
    problems += _device_ok(p, (new.major, new.minor))
    figures = {
        "dra_unplug_to_slice_s": round(t_taint, 3),
        "dra_plug_to_slice_s": round(t_back, 3),
    }
    run.figures.update(figures)
    return {"ok": not problems, "problems": problems, **figures}


def check_unprepare(run: Run) -> dict[str, Any]:
    """7. Deleting the pod unprepares its claim: the CDI spec goes."""
    spec = Path(run.facts["claim"]["spec"])
    t0 = time.monotonic()
    run.delete_pod("coral-claim")
    wait_for("CDI spec removed", lambda: not spec.exists(), timeout=60, interval=0.1)
    left = sorted(p.name for p in cdi_dir(run).glob("edgefd.io-*.json"))
    return {
        "ok": not left,
        "problems": [f"CDI specs left: {left}"] if left else [],
        "delete_to_unprepared_s": round(time.monotonic() - t0, 2),
    }


def check_delete(run: Run) -> dict[str, Any]:
    """8. Deleting the DaemonSets (no claim prepared): the slice and the sockets go."""
    for ds in ("edgefd", "edgefd-devplugin"):  # devplugin runs in a DaemonSet of its own
        run.api.request("DELETE", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{ds}")
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app.kubernetes.io/part-of=edgefd"
    wait_for("edgefd pods gone", lambda: not run.api.get(pods)["items"], timeout=90, interval=0.2)
    problems = []
    try:
        left = node_slices(run)
    except KubeError as e:
        left = [str(e)]
    if left:
        problems.append(f"ResourceSlices left: {[s['metadata']['name'] for s in left]}")
    socks = []
    for d in ("var-lib/kubelet/plugins_registry", "var-lib/kubelet/plugins/edgefd.io"):
        base = run.node.ns.dir / d
        socks += [p.name for p in base.glob("*.sock")] if base.is_dir() else []
    if socks:
        problems.append(f"sockets left: {socks}")
    return {"ok": not problems, "problems": problems}


def check_figures(run: Run) -> dict[str, Any]:
    """9. The figures of the DRA run; a check only in that each must have been measured."""
    want = ("ds_create_to_labels_s", "ds_create_to_slice_s", "memory_mib", "image_archive_bytes")
    missing = [k for k in want if not run.figures.get(k)]
    return {"ok": not missing, "missing": missing, **{k: run.figures.get(k) for k in want}}


CHECKS = [
    ("1_daemonset", checks_pod.check_daemonset, ()),
    ("2_labels", checks_pod.check_labels, ("1_daemonset",)),
    ("3_slice", check_slice, ("1_daemonset",)),
    ("4_workload", check_claim_workload, ("3_slice",)),
    ("5_kubelet_restart", check_kubelet_restart, ("4_workload",)),
    ("6_hotplug", check_hotplug, ("4_workload",)),
    ("7_unprepare", check_unprepare, ("4_workload",)),
    ("8_delete", check_delete, ("1_daemonset",)),
    ("9_figures", check_figures, ()),
]
