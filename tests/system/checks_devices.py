"""Checks 4-6: workloads scheduled by the real kube-scheduler get the host tree's devices through
the plugin's device links; a kubelet restart and a re-plug do not lose them.

Which resource, how many devices, which device node each has and what a re-plug does all come
from the host tree (``run.offer``, expect.py). The workload checks use the first resource the
tree has a device of: one workload per device, each must get another device, one more waits.

This machine's kernel has no USB or apex driver, so opening a device node gives ENXIO or ENODEV
once the device cgroup has let the open through; a node the container was not granted gives
EPERM. The probe below tells the two apart: that is how "can open it" is checked here.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from typing import Any

from .checks_health import health_problems, wait_pod_health
from .checks_pod import check_device_change_logged
from .context import Run, metric, plugin_metrics
from .expect import Device, unplugged_reason
from .hosttree import DevNode
from .kube import wait_for
from .mountns import MountNamespaceError

# Run in the workload container: the devices named by the env var, as the container sees them,
# and whether a node the container was not granted opens (made here with mknod: the device
# cgroup, not the visibility of a path, must refuse it).
# read-write, as libusb opens a device; the errno's name otherwise
TRY_OPEN = r"""
import errno, json, os, stat, sys
def try_open(path):
    try:
        os.close(os.open(path, os.O_RDWR))
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
"""
PROBE = (
    TRY_OPEN
    + r"""
env, paths, ungranted = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
ids = os.environ.get(env, "")
out = {"env": ids, "devices": {}}
for dev_id in filter(None, ids.split(",")):
    path = paths.get(dev_id, "/dev/edgefd/" + dev_id)
    try:
        st = os.stat(path)
        out["devices"][dev_id] = {"path": path, "char": stat.S_ISCHR(st.st_mode),
            "dev": [os.major(st.st_rdev), os.minor(st.st_rdev)], "open": try_open(path)}
    except OSError as e:
        out["devices"][dev_id] = {"path": path, "error": str(e)}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] == "/dev/bus/usb":
        out["usb_bus_mount"] = f[5]
if ungranted:
    node = "/tmp/ungranted-%d" % os.getpid()
    major, minor = map(int, ungranted.split(":"))
    try:
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
        out["ungranted_open"] = try_open(node)
        os.unlink(node)
    except OSError as e:
        out["ungranted_open"] = "mknod " + errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""
)
ALLOWED_OPEN = {"ok", errno.errorcode[errno.ENXIO], errno.errorcode[errno.ENODEV]}


def short(resource: str) -> str:
    return resource.split("/", 1)[1]


def workload(name: str, image: str, resource: str, selector: dict[str, str]) -> dict[str, Any]:
    """A pod as a user would write it: a node selector on the capability label and a limit."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hostNetwork": True,
            "nodeSelector": selector,
            "terminationGracePeriodSeconds": 1,
            # This control plane runs no node-lifecycle controller, which is what removes the
            # not-ready taint the kubelet registers its Node with.
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "app",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    # root opens the node read-write, as libusb does (the node is 0664 root)
                    "securityContext": {"runAsUser": 0},
                    "resources": {"limits": {resource: 1}},
                }
            ],
        },
    }


def probe(run: Run, container_id: str, devices: list[Device], ungranted: str = "") -> dict:
    """What the container sees of the devices of the resource (or DRA class) it asked for."""
    paths = {i: d.container_paths[0] for d in devices for i in (*d.kubelet_ids, d.dra_name)}
    (env,) = {d.env for d in devices}
    out = run.node.runtime.exec(
        container_id, "python3", "-c", PROBE, env, json.dumps(paths), ungranted
    )
    return json.loads(out)


def ungranted_node(run: Run, granted: list[Device]) -> str:
    """MAJOR:MINOR of a device node of the tree that none of ``granted`` has."""
    mine = {(d.node.major, d.node.minor) for d in granted}
    others = [n for n in run.node.device_nodes if (n.major, n.minor) not in mine]
    # another accelerator's node if there is one: the device a neighbour's workload has
    accel = {(d.node.major, d.node.minor) for d in run.offer.devices}
    others.sort(key=lambda n: (n.major, n.minor) not in accel)
    return f"{others[0].major}:{others[0].minor}" if others else ""


def device_problems(p: dict[str, Any], want: dict[str, DevNode]) -> list[str]:
    """The container got exactly one device, one of ``want`` (ID -> node), with that node."""
    if len(p["devices"]) != 1:
        return [f"expected one device, got {p['env']!r}"]
    ((dev_id, d),) = p["devices"].items()
    node = want.get(dev_id)
    if node is None:
        return [f"got {dev_id}, not one of {sorted(want)}"]
    problems = []
    if not d.get("char") or tuple(d.get("dev", ())) != (node.major, node.minor):
        problems.append(f"{d.get('path')} is {d}, want a char device {node.major}:{node.minor}")
    if d.get("open") not in ALLOWED_OPEN:
        problems.append(f"open of the granted device: {d.get('open')}")
    return problems


def mount_problems(p: dict[str, Any], device: Device, ungranted: str) -> list[str]:
    problems = []
    mount = p.get("usb_bus_mount", "").split(",")[0]
    if device.usb_bus_mount and mount != "ro":
        problems.append(f"/dev/bus/usb mount: {p.get('usb_bus_mount')!r}, want read-only")
    if not device.usb_bus_mount and mount:
        problems.append(f"/dev/bus/usb mounted ({mount}) for a device not on USB")
    if ungranted and p.get("ungranted_open") != "EPERM":
        problems.append(f"an ungranted device opened with {p.get('ungranted_open')}, want EPERM")
    return problems


def nodes_of(devices: list[Device], ids: str = "kubelet") -> dict[str, DevNode]:
    return {
        i: d.node for d in devices for i in (d.kubelet_ids if ids == "kubelet" else (d.dra_name,))
    }


def restart_and_probe(
    run: Run, pod: str, container: str, devices: list[Device], old: DevNode, new: DevNode
) -> dict[str, Any]:
    """After a re-plug (``old`` node gone, ``new`` there): stop the pod's container, probe the
    one the kubelet starts instead, and record the node's new device node."""
    run.node.runtime.crictl("stop", "--timeout", "1", container)
    restarted = wait_for(
        "workload container restarted",
        lambda: next(
            (
                c
                for c in run.node.runtime.containers(**{"io.kubernetes.pod.name": pod})
                if c["state"] == "CONTAINER_RUNNING" and c["id"] != container
            ),
            None,
        ),
        timeout=60,
        interval=0.2,
    )[0]
    p = probe(run, restarted["id"], devices)
    run.node.device_nodes = [n for n in run.node.device_nodes if n != old] + [new]
    return p


def fill(run: Run, resource: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One workload per kubelet ID of ``resource``; each must get another device."""
    devices = run.offer.resources[resource]
    want = nodes_of(devices)
    first = devices[0]
    ungranted = ungranted_node(run, devices)
    pods, problems, seen = [], [], set()
    for i in range(len(want)):
        name = f"{short(resource)}-{i + 1}"
        run.create_pod(workload(name, run.image, resource, first.selector))
        c = run.running_container(name)
        p = probe(run, c["id"], devices, ungranted if i == 0 else "")
        problems += [f"{name}: {x}" for x in device_problems(p, want)]
        if p["env"] in seen:
            problems.append(f"{name}: got {p['env']}, which another workload has")
        seen.add(p["env"])
        if p["env"] in want:
            device = run.offer.by_id(p["env"])
            probed = ungranted if i == 0 else ""
            problems += [f"{name}: {x}" for x in mount_problems(p, device, probed)]
        pods.append({"pod": name, "container": c["id"], "id": p["env"], "probe": p})
    return pods, problems


def unschedulable(run: Run, name: str) -> str:
    def why() -> str | None:
        pod = run.api.get(f"/api/v1/namespaces/default/pods/{name}")
        for cond in pod["status"].get("conditions", []):
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return cond.get("message", "")
        return None

    return wait_for(f"{name} Unschedulable", why, timeout=30)[0]


def check_workload(run: Run) -> dict[str, Any]:
    """4. The kube-scheduler places one workload per device of the first resource the tree
    offers; each gets a device of its own (its node with the host's major:minor, the env var,
    a read-only /dev/bus/usb for a USB device, EPERM for any other node); one more stays
    Pending."""
    resource = run.offer.primary()
    if resource is None:
        return {"ok": False, "problems": ["the host tree has no device the plugin offers"]}
    pods, problems = fill(run, resource)
    run.facts["workload"] = {**pods[0], "resource": resource}
    run.facts["fillers"] = [p["pod"] for p in pods[1:]]
    extra = f"{short(resource)}-pending"
    run.create_pod(workload(extra, run.image, resource, run.offer.resources[resource][0].selector))
    message = unschedulable(run, extra)
    phase = run.api.get(f"/api/v1/namespaces/default/pods/{extra}")["status"]["phase"]
    if phase != "Pending" or f"Insufficient {resource}" not in message:
        problems.append(f"workload {len(pods) + 1} of {resource} is {phase}: {message}")
    run.delete_pod(extra)
    return {
        "ok": not problems,
        "problems": problems,
        "resource": resource,
        "got": {p["pod"]: p["id"] for p in pods},
        "probe": pods[0]["probe"],
        "pending": message,
    }


def free_for_new_pod(run: Run, others: list[str], same: str) -> tuple[str | None, str]:
    """What a new pod can get while the first workload runs: a device of another resource (or
    DRA class), else one of ``same`` once a filler workload is deleted; (None, why) if none."""
    if others:
        return others[0], f"a device of {others[0]}"
    if run.facts["fillers"]:
        name = run.facts["fillers"].pop()
        run.delete_pod(name, wait=True)
        return same, f"the device {name} had"
    return None, f"none: the first workload holds the tree's only device of {same}"


def check_kubelet_restart(run: Run) -> dict[str, Any]:
    """5. After a kubelet restart the plugin re-registers, allocatable is back within 5 s, a
    new pod gets a free device, and the running workload is not disturbed."""
    w = run.facts["workload"]
    sock = f"{run.node.layout.device_plugin_dir}/kubelet.sock"
    before = run.node.file_identity(sock)
    m = plugin_metrics()
    regs = {
        r: metric(m, "edgefd_devplugin_registrations_total", resource=r)
        for r in run.offer.resources
    }
    resources = [r for r, n in regs.items() if n]  # every one registered must register again
    t_start = run.node.restart_kubelet()
    new_beat = math.ceil(time.time())  # the old kubelet is gone: later heartbeats are new

    def new_socket() -> bool:
        try:  # (inode, ctime): a recreated file may get the freed inode number back
            return run.node.file_identity(sock) != before
        except MountNamespaceError:  # not there (yet)
            return False

    wait_for("kubelet.sock recreated", new_socket, timeout=60, interval=0.05)
    t_sock = time.monotonic()

    def registered() -> bool:
        m = plugin_metrics()
        return all(
            metric(m, "edgefd_devplugin_registrations_total", resource=r) > regs[r]
            for r in resources
        )

    wait_for("plugin re-registered", registered, timeout=30, interval=0.05)
    t_reg = time.monotonic()
    # a status the restarted kubelet wrote (heartbeats have whole seconds), not the old one
    sample, _ = wait_for(
        "allocatable after restart",
        lambda: run.sampler.first(
            lambda s: s.heartbeat >= new_beat and run.allocatable_ok(s.allocatable), since=t_reg
        ),
        timeout=30,
    )
    back = sample.t - t_sock
    figures = {
        "kubelet_start_to_socket_s": round(t_sock - t_start, 2),
        "socket_to_registered_s": round(t_reg - t_sock, 2),
        "socket_to_allocatable_s": round(back, 2),
    }
    problems = [] if back <= 5.0 else [f"allocatable back {back:.1f}s after the kubelet"]

    other, free = free_for_new_pod(run, run.offer.others(w["resource"]), w["resource"])
    new_pod = None
    if other is not None:
        devices = run.offer.resources[other]
        name = f"{short(other)}-after-restart"
        run.create_pod(workload(name, run.image, other, devices[0].selector))
        c = run.running_container(name)
        p_new = probe(run, c["id"], devices)
        problems += [f"{name}: {x}" for x in device_problems(p_new, nodes_of(devices))]
        new_pod = p_new["env"]

    pod = run.api.get(f"/api/v1/namespaces/default/pods/{w['pod']}")
    status = pod["status"]["containerStatuses"][0]
    same = status["containerID"].endswith(w["container"]) and status["restartCount"] == 0
    if not (same and status["state"].get("running")):
        problems.append(f"the running workload was disturbed: {status}")
    devices = run.offer.resources[w["resource"]]
    want = {w["id"]: run.offer.by_id(w["id"]).node_now(run.node.host.root)}
    problems += device_problems(probe(run, w["container"], devices), want)
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        **figures,
        "free_device": free,
        "new_pod_device": new_pod,
    }


def check_replug_logged(run: Run) -> dict[str, Any]:
    """6b. The unplug of check 6 is in bus-scan's and devplugin's default-level logs."""
    return check_device_change_logged(run, run.facts["workload"]["id"])


def check_replug(run: Run) -> dict[str, Any]:
    """6. Unplug the workload's device and plug it back at the same place while the workload
    runs (a USB device comes back with a new devnum, so a new node; a PCI function at its
    address with the same node): same ID, Unhealthy then Healthy, the plugin's link follows,
    and the restarted container gets the node the device has now."""
    w = run.facts["workload"]
    device = run.offer.by_id(w["id"])
    resource = device.resource
    total = len(nodes_of(run.offer.resources[resource]))

    def health(h: str, n: int) -> bool:
        m = plugin_metrics()
        return metric(m, "edgefd_devplugin_devices", resource=resource, health=h) == n

    t0 = time.monotonic()
    old = run.node.host.unplug(device.bus, device.location)
    wait_for("device Unhealthy", lambda: health("Unhealthy", 1), timeout=10, interval=0.05)
    t_unhealthy = time.monotonic() - t0
    pod_down = wait_pod_health(run, w["pod"], "Unhealthy", t0)  # KEP-4680, from ListAndWatch
    # what check 6b finds logged: that it went, or why it is unusable while it stays
    host = run.node.spec.host_tree
    run.facts["unplugged_reason"] = unplugged_reason(host, run.node_name, device)
    new = run.node.host.plug(device.bus, device.location)
    t1 = time.monotonic()
    wait_for("device Healthy", lambda: health("Healthy", total), timeout=10, interval=0.05)
    t_healthy = time.monotonic() - t1
    pod_up = wait_pod_health(run, w["pod"], "Healthy", t1)
    problems = health_problems(pod_down, "Unhealthy") + health_problems(pod_up, "Healthy")
    if device.bus == "usb" and new.path == old.path:
        problems.append(f"the re-plugged USB device kept its node {old.path}")
    link = run.node.ns.outside(device.host_paths[0])
    target = os.readlink(link) if link.is_symlink() else None
    if target != new.path:
        problems.append(f"the plugin's link {link.name} points to {target}, want {new.path}")

    p = restart_and_probe(run, w["pod"], w["container"], run.offer.resources[resource], old, new)
    if p["env"] != w["id"]:
        problems.append(f"the device ID changed: {w['id']} -> {p['env']}")
    problems += device_problems(p, {w["id"]: new})
    figures = {
        "unplug_to_unhealthy_s": round(t_unhealthy, 2),
        "plug_to_healthy_s": round(t_healthy, 2),
        "unplug_to_pod_unhealthy_s": pod_down["after_s"],
        "plug_to_pod_healthy_s": pod_up["after_s"],
    }
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        "id": w["id"],
        "old_node": f"{old.path} {old.major}:{old.minor}",
        "new_node": f"{new.path} {new.major}:{new.minor}",
        "pod_status_unplugged": pod_down["shown"],
        **figures,
    }
