"""The checks of `scripts/e2e --api dra`: edgefd's DaemonSet with the DRA component
(k8s/overlays/dra, through tests/system/overlay-dra) on the real node, where the real kubelet
registers the DRA plugin and prepares claims, and containerd resolves its CDI specs.

1-2 are the device-plugin run's (the DaemonSet as the manifest says, the Node's labels).
3. The node's ResourceSlice is what `devplugin --api dra --dry-run` says for the host tree,
   and the kubelet registered the plugin.
4. Pods with a ResourceClaimTemplate for the DeviceClass of the host tree's first device (e.g.
   `edgetpu.edgefd.io`), scheduled by the real kube-scheduler, get one device of that class each
   through CDI: its node with the host's major:minor, openable, the env var, the read-only
   `/dev/bus/usb` for a USB device; one more such pod stays Pending.
4m. The first of those pods reads its device's metadata (KEP-5304) in its container, read-only,
   at the path for a template's claim: its claim, the device allocated, the attributes the dry
   run gives that device on the host tree, and the node path the container was given.
5. A kubelet restart: the plugin registers again, the slice the starting kubelet wipes is back,
   the running pod is undisturbed, and a pod created afterwards gets a free device (of another
   class, e.g. the NCS2, when the tree has one).
6. Hot-plug while the workload runs: unplug -> the device is tainted in the slice, plug back
   (a USB device with a new devnum) -> untainted, each within a second; the pod's
   allocatedResourcesStatus and the claim's status.devices Ready condition follow (Unhealthy
   with "unplugged from ...", then Healthy); the claim's CDI spec follows and the restarted
   container gets the device's node.
6t. A device that says its temperature (a Coral PCIe) runs hot and cools down: the slice's
   taint `edgefd.io/unhealthy=overheating` comes and goes, the pod's status and the claim's
   follow (checks_thermal.py; not applicable on a tree without such a device).
7. Deleting the pod unprepares the claim: its CDI spec is removed.
7b. A non-root claim workload (uid 65532, no supplementalGroups) opens its device read-write
   (checks_nonroot.py).
7c. A pod asking `edgefd.io/coral-usb: 1` (no claim) runs on DRA with its device
   (checks_extended.py).
7d. `--evict-after 2s`: a Deployment's pod is evicted from a pulled device (checks_evict.py).
7r. A node reboot (checks_reboot.py, as in the device-plugin run).
8. Deleting the DaemonSet (no claim prepared any more) removes the slice and the sockets.
9. The figures.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.peers.processes import REPO_ROOT

from . import checks_keeper, checks_keeper_opt_out, checks_keeper_systemd, checks_pod
from .checks_devices import (
    device_problems,
    free_for_new_pod,
    mount_problems,
    nodes_of,
    probe,
    restart_and_probe,
    ungranted_node,
    unschedulable,
)
from .checks_health import (
    claim_problems,
    health_problems,
    wait_claim_ready,
    wait_pod_health,
)
from .context import NAMESPACE, SPLIT_DS, Run, metric, plugin_metrics
from .expect import Device, unplugged_reason
from .kube import KubeError, node_slices_path, wait_for

OVERLAY = REPO_ROOT / "tests" / "system" / "overlay-dra"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates"
HOTPLUG_S = 1.0
# KEP-5304's directory in the container; claim_workload's pod claim and request are both "dev"
METADATA_ROOT = "/var/run/kubernetes.io/dra-device-attributes"
METADATA_FILE = f"{METADATA_ROOT}/resourceclaimtemplates/dev/dev/edgefd.io-metadata.json"
# Run in the workload container: every metadata file it has, and the options of the mount of
# its directory (the CDI spec binds the request's directory, so a rewrite reaches a running
# container; by its real path: /var/run is a link to /run in most images, mountinfo resolves it)
READ_METADATA = r"""
import glob, json, os, sys
out = {"files": {}, "mounts": {}}
for path in glob.glob(sys.argv[1] + "/**/*-metadata.json", recursive=True):
    out["files"][path] = open(path).read()
real = {os.path.realpath(os.path.dirname(p)): p for p in out["files"]}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] in real:
        out["mounts"][real[f[4]]] = f[5]
print(json.dumps(out))
"""


def node_slices(run: Run) -> list[dict[str, Any]]:
    return run.api.get(node_slices_path(run.node_name))["items"]


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


def dry_run_slice(run: Run) -> subprocess.CompletedProcess[str]:
    """`devplugin --api dra --dry-run` on the host tree: the slice it says the node has."""
    host = run.node.spec.host_tree
    return subprocess.run(
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


def check_slice(run: Run) -> dict[str, Any]:
    """3. The slice says what the dry run on the host tree says; the kubelet registered us."""
    # when the sampler first saw it: this check runs after others that wait (1b)
    first, _ = wait_for(
        "ResourceSlice published",
        lambda: run.sampler.first(lambda s: s.slices > 0, run.t_apply),
        timeout=60,
    )
    run.figures["ds_create_to_slice_s"] = round(first.t - run.t_apply, 2)
    slices = node_slices(run)
    dry = dry_run_slice(run)
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


def allocated(run: Run, pod: str) -> Device:
    """The device the scheduler allocated to the pod's claim."""
    claim = _claim_of(run, pod) or {}
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results")
    if not results:
        raise AssertionError(f"{pod}: its claim has no allocation")
    return run.offer.by_dra_name(results[0]["device"])


def ensure_template(run: Run, device_class: str) -> str:
    """The name of a ResourceClaimTemplate for one device of ``device_class``, made if new."""
    template = device_class.split(".")[0]
    if not run.api.get_or_none(f"{TEMPLATES}/{template}"):
        run.api.request("POST", TEMPLATES, claim_template(template, device_class))
    return template


def claim_pod(run: Run, name: str, device_class: str, ungranted: str = "") -> dict[str, Any]:
    """Create a pod with a claim for one device of ``device_class``; probe what it got."""
    template = ensure_template(run, device_class)
    run.create_pod(claim_workload(name, run.image, template))
    c = run.running_container(name)
    device = allocated(run, name)
    p = probe(run, c["id"], [device], ungranted)
    uid = (_claim_of(run, name) or {}).get("metadata", {}).get("uid", "")
    return {"pod": name, "container": c["id"], "id": p["env"], "name": device.dra_name,
            "uid": uid, "probe": p, "device": device}  # fmt: skip


def check_claim_workload(run: Run) -> dict[str, Any]:
    """4. Claim workloads for the first device's class get a device of their own each; one
    more waits."""
    resource = run.offer.primary()
    if resource is None:
        return {"ok": False, "problems": ["the host tree has no device the plugin offers"]}
    device_class = run.offer.resources[resource][0].device_class
    devices = run.offer.of_class(device_class)
    ungranted = ungranted_node(run, devices)
    pods, problems = [], []
    for i in range(len(devices)):
        w = claim_pod(run, f"claim-{i + 1}", device_class, ungranted if i == 0 else "")
        name, p, device = w["pod"], w["probe"], w["device"]
        problems += [f"{name}: {x}" for x in device_problems(p, nodes_of([device]))]
        probed = ungranted if i == 0 else ""
        problems += [f"{name}: {x}" for x in mount_problems(p, device, probed)]
        if any(o["name"] == w["name"] for o in pods):
            problems.append(f"{name}: got {w['name']}, which another pod has")
        spec_file = cdi_dir(run) / f"edgefd.io-claim_{w['uid']}.json"
        if not spec_file.exists():
            problems.append(f"{name}: no CDI spec {spec_file.name} on the node")
        pods.append({**w, "spec": spec_file})
    run.facts["claim"] = pods[0]
    run.facts["fillers"] = [w["pod"] for w in pods[1:]]
    extra = "claim-pending"
    run.create_pod(claim_workload(extra, run.image, device_class.split(".")[0]))
    message = unschedulable(run, extra)
    run.delete_pod(extra)
    return {
        "ok": not problems,
        "problems": problems,
        "device_class": device_class,
        "allocated": {w["pod"]: w["name"] for w in pods},
        "probe": pods[0]["probe"],
        "pending": message,
    }


def read_metadata(run: Run, container: str) -> dict[str, Any]:
    """What a running container reads under KEP-5304's directory: its files and their mounts."""
    out = run.node.runtime.exec(container, "python3", "-c", READ_METADATA, METADATA_ROOT)
    return json.loads(out)


def metadata_document(got: dict[str, Any]) -> dict[str, Any]:
    """The first document of the claim's file (a stream, one per API version, newest first)."""
    doc, _ = json.JSONDecoder().raw_decode(got["files"].get(METADATA_FILE, ""))
    return doc


def check_metadata(run: Run) -> dict[str, Any]:
    """4m. The claim workload of check 4 reads one metadata file (KEP-5304), mounted read-only
    at the path for a template's claim: a DeviceMetadata of its claim with the device the
    scheduler allocated, whose attributes are the dry run's for that device on the host tree
    plus where the container has its node (and, on USB, its bus path)."""
    w = run.facts["claim"]
    device: Device = w["device"]
    claim = _claim_of(run, w["pod"]) or {}
    meta = claim.get("metadata") or {}
    got = read_metadata(run, w["container"])
    problems = []
    if sorted(got["files"]) != [METADATA_FILE]:
        problems.append(f"metadata files: {sorted(got['files'])}, want [{METADATA_FILE}]")
    mount = got["mounts"].get(METADATA_FILE, "")
    if mount.split(",")[0] != "ro":
        problems.append(f"{METADATA_FILE} mounted {mount!r}, want read-only")
    try:
        doc = metadata_document(got)
    except ValueError as e:
        return {"ok": False, "problems": [*problems, f"not JSON: {e}"], "files": got["files"]}
    dry = dry_run_slice(run)
    if dry.returncode != 0:
        problems.append(f"dry run: {dry.stderr.strip()}")
    spec = json.loads(dry.stdout)["spec"] if dry.returncode == 0 else {}
    slice_devices = {d["name"]: d for d in spec.get("devices") or ()}
    attributes = dict(slice_devices.get(device.dra_name, {}).get("attributes") or {})
    attributes["devicePath"] = {"string": device.container_paths[0]}
    if device.usb_bus_mount:
        attributes["busPath"] = {"string": device.node_now(run.node.spec.host_tree).path}
    want = {
        "apiVersion": "metadata.resource.k8s.io/v1alpha1",
        "kind": "DeviceMetadata",
        "name": meta.get("name"),
        "namespace": "default",
        "uid": meta.get("uid"),
        "podClaimName": "dev",
        "requests": [
            {
                "name": "dev",
                "devices": [
                    {
                        "driver": "edgefd.io",
                        "pool": run.node_name,
                        "name": device.dra_name,
                        "attributes": attributes,
                    }
                ],
            }
        ],
    }
    shown = {
        **{k: doc.get(k) for k in ("apiVersion", "kind", "podClaimName", "requests")},
        **{k: (doc.get("metadata") or {}).get(k) for k in ("name", "namespace", "uid")},
    }
    for key, value in want.items():
        if shown.get(key) != value:
            problems.append(f"{key}: {shown.get(key)!r}, want {value!r}")
    generation = (doc.get("metadata") or {}).get("generation")
    if not isinstance(generation, int) or generation < 1:
        problems.append(f"metadata.generation: {generation!r}, want a positive integer")
    return {"ok": not problems, "problems": problems, "path": METADATA_FILE, "document": doc}


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
    pod = run.api.get(f"/api/v1/namespaces/default/pods/{w['pod']}")
    status = pod["status"]["containerStatuses"][0]
    same = status["containerID"].endswith(w["container"]) and status["restartCount"] == 0
    if not (same and status["state"].get("running")):
        problems.append(f"the running workload was disturbed: {status}")
    device: Device = w["device"]
    problems += device_problems(probe(run, w["container"], [device]), nodes_of([device]))

    classes = sorted({d.device_class for d in run.offer.devices} - {device.device_class})
    device_class, free = free_for_new_pod(run, classes, device.device_class)
    new_pod = None
    if device_class is not None:
        n = claim_pod(run, "claim-after-restart", device_class)
        problems += device_problems(n["probe"], nodes_of([n["device"]]))
        new_pod = n["name"]
        run.delete_pod(n["pod"])
    figures = {
        "dra_kubelet_start_to_registered_s": round(t_reg - t0, 2),
        "dra_kubelet_start_to_slice_s": round(t_slice - t0, 2),
    }
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        **figures,
        "free_device": free,
        "new_pod_device": new_pod,
    }


def _taints(run: Run, name: str) -> list[dict[str, Any]] | None:
    d = node_devices(run).get(name)
    return None if d is None else d.get("taints") or []


def check_hotplug(run: Run) -> dict[str, Any]:
    """6. Unplug and re-plug the workload's device at its place while the workload runs: the
    slice follows within a second each way; the CDI spec names the device's node; a restarted
    container gets it."""
    w = run.facts["claim"]
    device: Device = w["device"]
    name = device.dra_name
    claim = _claim_of(run, w["pod"]) or {}
    old = run.node.host.unplug(device.bus, device.location)
    t0 = time.monotonic()
    wait_for("device tainted", lambda: _taints(run, name), timeout=10, interval=0.02)
    t_taint = time.monotonic() - t0
    down = wait_pod_health(run, w["pod"], "Unhealthy", t0)  # from our DRAResourceHealth
    gone = wait_claim_ready(run, claim, "False")
    host = run.node.spec.host_tree
    stays = run.facts["unplugged_reason"] = unplugged_reason(host, run.node_name, device)
    new = run.node.host.plug(device.bus, device.location)
    t1 = time.monotonic()
    wait_for("device untainted", lambda: _taints(run, name) == [], timeout=10, interval=0.02)
    t_back = time.monotonic() - t1
    up = wait_pod_health(run, w["pod"], "Healthy", t1)
    back = wait_claim_ready(run, claim, "True")
    # the message says where: "unplugged from port 2-1", "re-enumerating at port 2-1" (a Coral
    # in its boot state, within the hold), "gone from PCI address ..."; or, for a device that
    # stays without its node (a platform NPU whose driver went), why, as the tools say it
    problems = health_problems(down, "Unhealthy", stays or device.location)
    problems += health_problems(up, "Healthy")
    problems += claim_problems(gone, back, device.location, "unusable" if stays else "absent")
    for what, t in (("unplug", t_taint), ("plug", t_back)):
        if t > HOTPLUG_S:
            problems.append(f"{what} reached the slice after {t:.2f}s")

    def spec_follows() -> bool:
        spec = json.loads(Path(w["spec"]).read_text())
        nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
        return nodes[0]["hostPath"] == new.path

    wait_for("CDI spec names the device's node", spec_follows, timeout=10, interval=0.05)
    live = _metadata_follows(run, w["container"], device, new) if device.usb_bus_mount else {}
    problems += live.get("problems", [])
    p = restart_and_probe(run, w["pod"], w["container"], [device], old, new)
    problems += device_problems(p, {i: new for i in nodes_of([device])})
    figures = {
        "dra_unplug_to_slice_s": round(t_taint, 3),
        "dra_plug_to_slice_s": round(t_back, 3),
        "dra_unplug_to_pod_unhealthy_s": down["after_s"],
        "dra_plug_to_pod_healthy_s": up["after_s"],
    }
    run.figures.update(figures)
    shown = {"pod_status_unplugged": down["shown"], "claim_status_back": back}
    return {"ok": not problems, "problems": problems, **figures, **shown, **live}


def _metadata_follows(run: Run, container: str, device: Device, new: Any) -> dict[str, Any]:
    """The running container's metadata file (KEP-5304) names the device's new bus node after
    the re-plug, with its generation raised: the spec binds the file's directory, so the
    rewrite reaches a container that is not created again."""
    first: dict[str, Any] = {}

    def bus_path() -> str | None:
        try:
            doc = metadata_document(read_metadata(run, container))
        except ValueError:
            return None
        attrs = doc["requests"][0]["devices"][0]["attributes"]
        path = (attrs.get("busPath") or {}).get("string")
        first["seen"] = path, doc["metadata"].get("generation")
        return path if path == new.path else None

    try:
        _, waited = wait_for("the running container's metadata follows", bus_path, 10, 0.2)
    except AssertionError:
        return {"problems": [f"{device.dra_name}: metadata in the running container still"
                             f" says {first.get('seen')}, want busPath {new.path}"]}  # fmt: skip
    return {"metadata_follows_s": round(waited, 2), "metadata_generation": first["seen"][1]}


def check_nonroot(run: Run) -> dict[str, Any]:
    """7b. After check 7 freed the devices: a non-root claim workload (uid 65532) with no
    supplementalGroups opens its device read-write, by its CDI node and by /dev/bus/usb, on a
    stock containerd: the claim's spec gives the node's group (checks_nonroot.py)."""
    from .checks_nonroot import nonroot, probe_nonroot

    device: Device = run.facts["claim"]["device"]
    template = device.device_class.split(".")[0]
    name = "claim-nonroot"
    run.create_pod(nonroot(claim_workload(name, run.image, template), groups=False))
    try:
        run.running_container(name)
        got = allocated(run, name)
        return probe_nonroot(run, name, got, got.dra_name)
    finally:
        run.delete_pod(name, wait=True)


def check_hotplug_logged(run: Run) -> dict[str, Any]:
    """6b. The unplug of check 6 is in bus-scan's and devplugin's default-level logs."""
    return checks_pod.check_device_change_logged(run, run.facts["claim"]["device"].dra_name)


def check_unprepare(run: Run) -> dict[str, Any]:
    """7. Deleting the pods unprepares their claims: the CDI specs go."""
    spec = Path(run.facts["claim"]["spec"])
    t0 = time.monotonic()
    run.delete_pod(run.facts["claim"]["pod"])
    wait_for("CDI spec removed", lambda: not spec.exists(), timeout=60, interval=0.1)
    t_first = time.monotonic() - t0

    def specs() -> list[str]:
        return sorted(p.name for p in cdi_dir(run).glob("edgefd.io-*.json"))

    for name in run.facts["fillers"]:
        run.delete_pod(name)
    with contextlib.suppress(TimeoutError):
        wait_for("every CDI spec removed", lambda: not specs(), timeout=60, interval=0.1)
    left = specs()
    return {
        "ok": not left,
        "problems": [f"CDI specs left: {left}"] if left else [],
        "delete_to_unprepared_s": round(t_first, 2),
    }


def check_evict(run: Run) -> dict[str, Any]:
    from .checks_evict import check_evict as run_it  # it builds on this module

    return run_it(run)


def check_delete(run: Run) -> dict[str, Any]:
    """8. Deleting the DaemonSets (no claim prepared): the slice and the sockets go."""
    for ds in ("edgefd", SPLIT_DS):  # split-identity's too, when it is there
        path = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{ds}"
        if ds == "edgefd" or run.api.get_or_none(path) is not None:
            run.api.request("DELETE", path)
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
    for d in ("plugins_registry", "plugins/edgefd.io"):  # under the kubelet's --root-dir
        socks += [s for s in run.node.plugin_sockets(d) if s.endswith(".sock")]
    if socks:
        problems.append(f"sockets left: {socks}")
    return {"ok": not problems, "problems": problems}


def check_figures(run: Run) -> dict[str, Any]:
    """9. The figures of the DRA run; a check only in that each must have been measured."""
    want = (
        "ds_create_to_labels_s",
        "ds_create_to_slice_s",
        *(("memory_mib", "memory_peak_mib") if run.measure_idle else ()),
        "image_archive_bytes",
    )
    missing = [k for k in want if not run.figures.get(k)]
    return {"ok": not missing, "missing": missing, **{k: run.figures.get(k) for k in want}}


def _check_extended_resource(run: Run) -> dict[str, Any]:
    """7c. checks_extended.py (which builds on this module's pods)."""
    from .checks_extended import check_extended_resource

    return check_extended_resource(run)


def _check_overheating(run: Run) -> dict[str, Any]:
    """6t. checks_thermal.py (both APIs; it builds on this module's slices and claims)."""
    from .checks_thermal import check_overheating

    return check_overheating(run)


def _check_node_reboot(run: Run) -> dict[str, Any]:
    """7r. checks_reboot.py (both APIs)."""
    from .checks_reboot import check_node_reboot

    return check_node_reboot(run)


CHECKS = [
    ("1_daemonset", checks_pod.check_daemonset, ()),
    ("1b_no_warnings", checks_pod.check_no_warning_events, ("1_daemonset",)),
    ("1c_startup_logs", checks_pod.check_startup_logs, ("1_daemonset",)),
    ("2_labels", checks_pod.check_labels, ("1_daemonset",)),
    ("3_slice", check_slice, ("1_daemonset",)),
    ("4_workload", check_claim_workload, ("3_slice",)),
    ("4m_metadata", check_metadata, ("4_workload",)),
    ("5_kubelet_restart", check_kubelet_restart, ("4_workload",)),
    ("6_hotplug", check_hotplug, ("4_workload",)),
    ("6b_hotplug_logged", check_hotplug_logged, ("6_hotplug",)),
    ("6t_overheating", _check_overheating, ("4_workload",)),
    ("6k_keeper", checks_keeper.check_keeper, ("4_workload",)),
    ("6s_keeper_systemd", checks_keeper_systemd.check_keeper_systemd, ("4_workload",)),
    ("6o_keeper_opt_out", checks_keeper_opt_out.check_keeper_opt_out, ("4_workload",)),
    ("7_unprepare", check_unprepare, ("4_workload",)),
    ("7b_nonroot", check_nonroot, ("7_unprepare",)),
    ("7c_extended_resource", _check_extended_resource, ("7_unprepare",)),
    ("7d_evict", check_evict, ("3_slice",)),
    ("7r_node_reboot", _check_node_reboot, ("3_slice",)),
    ("8_delete", check_delete, ("1_daemonset",)),
    ("9_figures", check_figures, ()),
]
