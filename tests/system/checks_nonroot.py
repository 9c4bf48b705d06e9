"""Check 6c (both APIs): a workload running as a non-root user opens the device it was given,
read-write, by both paths an application uses: the node the plugin hands out (`/dev/edgefd/
<name>` for a USB device, the device's own node for PCI) and, for USB, the device's node under
the read-only `/dev/bus/usb`, which is what libusb opens (issue 25 item 3).

The mechanism, as docs/scheduling.md describes it for real nodes: containerd's
`device_ownership_from_security_context` makes the handed-out node the container's user's
(runtime.py sets it on this node), and the host gives the accelerators' `/dev/bus/usb` nodes a
group, as the vendors' udev rules do (`GROUP="plugdev"`: hosttree.py), which the pod joins with
`supplementalGroups`. Opening a node of this machine's tree gives ENXIO or ENODEV once the
permission checks passed (there is no driver); EACCES means the user was refused.
"""

from __future__ import annotations

import json
from typing import Any

from .checks_devices import ALLOWED_OPEN, TRY_OPEN, workload
from .context import Run
from .expect import Device
from .hosttree import PLUGDEV_GID

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


def nonroot(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with its container running as the image's non-root user, in the devices' group."""
    for c in pod["spec"]["containers"]:
        c["securityContext"] = {k: v for k, v in NONROOT.items() if k != "supplementalGroups"}
    pod["spec"]["securityContext"] = {"supplementalGroups": NONROOT["supplementalGroups"]}
    return pod


def paths_of(run: Run, device: Device, name: str) -> list[str]:
    """The paths the container should open: the handed-out node and the /dev/bus/usb one (where
    the device is now, after check 6's re-plug)."""
    paths = [device.container_paths[0] if device.bus == "pci" else f"/dev/edgefd/{name}"]
    if device.usb_bus_mount:
        paths.append(device.node_now(run.node.host.root).path)
    return paths


def probe_nonroot(run: Run, pod: str, device: Device, name: str) -> dict[str, Any]:
    c = run.running_container(pod)
    paths = paths_of(run, device, name)
    out = json.loads(run.node.runtime.exec(c["id"], "python3", "-c", PROBE, json.dumps(paths)))
    problems = []
    if out["uid"] != NONROOT["runAsUser"]:
        problems.append(f"runs as uid {out['uid']}")
    problems += [f"open {p}: {r}" for p, r in out["opens"].items() if r not in ALLOWED_OPEN]
    # the handed-out node is the container user's own (containerd's
    # device_ownership_from_security_context), whatever group the host gave it; the
    # /dev/bus/usb one is the host's, opened through the group
    handed = out["owners"].get(paths[0])
    want = [NONROOT["runAsUser"], NONROOT["runAsGroup"]]
    if not isinstance(handed, list) or handed[:2] != want:
        problems.append(f"{paths[0]} is owned by {handed}, want uid:gid {want}")
    return {"ok": not problems, "problems": problems, "device": name, **out}


def check_nonroot(run: Run) -> dict[str, Any]:
    """6c. A non-root workload (uid 65532) opens its device read-write, by the node the plugin
    hands out and by /dev/bus/usb. The first workload makes room."""
    w = run.facts["workload"]
    device = run.offer.by_id(w["id"])
    run.delete_pod(w["pod"], wait=True)
    name = "nonroot"
    run.create_pod(nonroot(workload(name, run.image, w["resource"], device.selector)))
    try:
        return probe_nonroot(run, name, device, w["id"])
    finally:
        run.delete_pod(name, wait=True)
