"""Checks 6c and 6n (device plugin), 7b (DRA): a workload running as a non-root user opens the
device it was given, read-write, by both paths an application uses: the node the plugin hands
out (`/dev/edgefd/<name>` for a USB device, its own node for PCI and platform) and, for USB, the
device's node under the read-only `/dev/bus/usb`, which is what libusb opens (issue 25 item 3).
The node's containerd has a stock config (no `device_ownership_from_security_context`:
runtime.py), as a distribution's is until someone edits it.

The mechanisms, as docs/scheduling.md describes them for real nodes. The host gives the
accelerators' nodes a group, as the vendors' udev rules do (`GROUP="plugdev"`: hosttree.py).
* 6c, device specs (the device plugin's default): the handed-out node keeps the host's owner
  and mode, as `/dev/bus/usb` does; the pod joins the group with `supplementalGroups`.
* 6n, the device plugin's CDI devices (`--cdi-spec-dir`, applied over the install), and 7b,
  DRA: no `supplementalGroups`. The CDI spec carries the node's group (`additionalGids`,
  edgefd's cdi.py), which the process joins; the CDI library makes the node it creates the
  container user's (uid and gid of the process).
Opening a node of this machine's tree gives ENXIO or ENODEV once the permission checks passed
(there is no driver); EACCES means the user was refused.
"""

from __future__ import annotations

import json
from typing import Any

from tests.peers.processes import REPO_ROOT

from .checks_devices import ALLOWED_OPEN, TRY_OPEN, workload
from .context import Run, devplugin_pods, running_ready, spec_container
from .expect import Device
from .hosttree import PLUGDEV_GID
from .install import kustomization
from .kube import wait_for

CDI_OVERLAY = REPO_ROOT / "tests" / "system" / "overlay-cdi"

NONROOT = {"runAsUser": 65532, "runAsGroup": 65532, "supplementalGroups": [PLUGDEV_GID],
           "runAsNonRoot": True}  # fmt: skip

PROBE = (
    TRY_OPEN
    + r"""
paths = json.loads(sys.argv[1])
def owner(p):
    try:
        st = os.stat(p)
        return [st.st_uid, st.st_gid, "%o" % (st.st_mode & 0o777)]
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({"uid": os.getuid(), "groups": sorted(os.getgroups()),
                  "opens": {p: try_open(p) for p in paths},
                  "owners": {p: owner(p) for p in paths}}))
"""
)


def nonroot(pod: dict[str, Any], groups: bool = True) -> dict[str, Any]:
    """`pod` with its container running as the image's non-root user; with `groups`, in the
    devices' group by `supplementalGroups` (without, only a CDI spec can give it)."""
    for c in pod["spec"]["containers"]:
        c["securityContext"] = {k: v for k, v in NONROOT.items() if k != "supplementalGroups"}
    if groups:
        pod["spec"]["securityContext"] = {"supplementalGroups": NONROOT["supplementalGroups"]}
    return pod


def paths_of(run: Run, device: Device, name: str) -> list[str]:
    """The paths the container should open: the handed-out node (a USB device's alias, a PCI
    or platform device's own node) and the /dev/bus/usb one (where the device is now, after
    check 6's re-plug)."""
    paths = [f"/dev/edgefd/{name}" if device.bus == "usb" else device.container_paths[0]]
    if device.usb_bus_mount:
        paths.append(device.node_now(run.node.host.root).path)
    return paths


def probe_nonroot(
    run: Run, pod: str, device: Device, name: str, user_owns_node: bool = True
) -> dict[str, Any]:
    """What the non-root container opens. The handed-out node is the container user's when a
    CDI spec gave it (the CDI library's doing) or containerd has
    device_ownership_from_security_context; else it keeps the host node's owner. The process
    is in the nodes' group either way (supplementalGroups or the spec's additionalGids)."""
    c = run.running_container(pod)
    paths = paths_of(run, device, name)
    out = json.loads(run.node.runtime.exec(c["id"], "python3", "-c", PROBE, json.dumps(paths)))
    problems = []
    if out["uid"] != NONROOT["runAsUser"]:
        problems.append(f"runs as uid {out['uid']}")
    if PLUGDEV_GID not in out["groups"]:
        problems.append(f"not in the nodes' group {PLUGDEV_GID}: groups {out['groups']}")
    problems += [f"open {p}: {r}" for p, r in out["opens"].items() if r not in ALLOWED_OPEN]
    handed = out["owners"].get(paths[0])
    # the host's: root, and the group the tree's nodes have (hosttree.mknod_commands)
    want = [NONROOT["runAsUser"], NONROOT["runAsGroup"]] if user_owns_node else [0, PLUGDEV_GID]
    if not isinstance(handed, list) or handed[:2] != want:
        problems.append(f"{paths[0]} is owned by {handed}, want uid:gid {want}")
    return {"ok": not problems, "problems": problems, "device": name, **out}


def check_nonroot(run: Run) -> dict[str, Any]:
    """6c. A non-root workload (uid 65532) in the nodes' group (supplementalGroups) opens its
    device read-write, by the node the plugin hands out and by /dev/bus/usb, on a stock
    containerd. The first workload makes room."""
    w = run.facts["workload"]
    device = run.offer.by_id(w["id"])
    run.delete_pod(w["pod"], wait=True)
    name = "nonroot"
    run.create_pod(nonroot(workload(name, run.image, w["resource"], device.selector)))
    try:
        got, given = handed_out(run, name, device)
        return probe_nonroot(run, name, got, given, run.node.runtime.device_ownership)
    finally:
        run.delete_pod(name, wait=True)


def handed_out(run: Run, pod: str, like: Device) -> tuple[Device, str]:
    """The device the kubelet gave the pod's container: the one its resource's environment
    variable names. On a tree with two devices of the resource it may be either: which ones
    are free when the pod is admitted decides (the previous checks' holders may still be
    going), not the device the first workload had."""
    c = run.running_container(pod)
    ids = run.node.runtime.exec(c["id"], "printenv", like.env).strip().split(",")
    return run.offer.by_id(ids[0]), ids[0]


def set_cdi(run: Run, on: bool) -> None:
    """Apply the e2e overlay with (or without) the device plugin's CDI devices; wait for the
    devplugin pod of that shape to be ready and its resources allocatable again."""
    overlay = run.overlay  # the layout's: its distribution's paths stay as installed
    if on:
        overlay = kustomization(run.node.dir / f"{run.overlay.name}-cdi", overlay, [CDI_OVERLAY])
    run.kubectl("apply", "--server-side", "-k", str(overlay))

    def shaped() -> bool:
        pods = devplugin_pods(run.api)
        if len(pods) != 1:
            return False
        c = spec_container(pods[0]["spec"], "devplugin")
        has = any(e["name"] == "EDGEFD_CDI_SPEC_DIR" for e in c.get("env", ()))
        return has == on and running_ready(pods[0])

    wait_for(f"devplugin pod {'with' if on else 'without'} CDI devices", shaped, timeout=120)
    wait_for("allocatable", lambda: run.allocatable_ok(run.get_node()["status"]["allocatable"]),
             timeout=60, interval=0.5)  # fmt: skip


def check_nonroot_cdi(run: Run) -> dict[str, Any]:
    """6n. The device plugin's CDI devices (--cdi-spec-dir, applied over the install): a
    non-root workload with no supplementalGroups opens its device read-write by both paths,
    on a stock containerd: the spec gives the node's group. The CDI setting is removed again
    at the end (and its spec file: the node as the base leaves it)."""
    w = run.facts["workload"]
    device = run.offer.by_id(w["id"])
    spec_file = run.node.ns.dir / "run" / "cdi" / f"edgefd.io-{w['resource'].split('/')[1]}.json"
    set_cdi(run, True)
    name = "nonroot-cdi"
    try:
        spec = json.loads(spec_file.read_text())
        run.create_pod(nonroot(workload(name, run.image, w["resource"], device.selector), False))
        got, given = handed_out(run, name, device)
        out = probe_nonroot(run, name, got, given)
        out["cdi_version"] = spec["cdiVersion"]
        if spec["cdiVersion"] != "0.7.0":
            out["problems"].append(f"{spec_file.name}: cdiVersion {spec['cdiVersion']}")
            out["ok"] = False
        return out
    finally:
        run.delete_pod(name, wait=True)
        set_cdi(run, False)
        spec_file.unlink(missing_ok=True)
