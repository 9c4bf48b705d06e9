"""Checks 4-6: a workload scheduled by the real kube-scheduler gets the Coral through the
plugin's device link; a kubelet restart and a re-plug do not lose it.

This machine's kernel has no USB driver, so opening the Coral's node (major 189) gives ENXIO
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

from .context import RESOURCES, Run, metric, plugin_metrics
from .kube import wait_for

CORAL, NCS2 = RESOURCES
# Run in the workload container: the allocated device as the container sees it.
PROBE = r"""
import errno, json, os, stat, sys
res_env, other = sys.argv[1], sys.argv[2]
ids = os.environ.get(res_env, "")
out = {"env": ids, "devices": {}}
for dev_id in filter(None, ids.split(",")):
    path = "/dev/edgefd/" + dev_id
    try:
        st = os.stat(path)
        d = {"char": stat.S_ISCHR(st.st_mode), "dev": [os.major(st.st_rdev), os.minor(st.st_rdev)]}
        try:
            os.close(os.open(path, os.O_RDWR))
            d["open"] = "ok"
        except OSError as e:
            d["open"] = errno.errorcode.get(e.errno, str(e.errno))
    except OSError as e:
        d = {"error": str(e)}
    out["devices"][dev_id] = d
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] == "/dev/bus/usb":
        out["usb_bus_mount"] = f[5]
try:
    os.close(os.open(other, os.O_RDWR))
    out["ungranted_open"] = "ok"
except OSError as e:
    out["ungranted_open"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""
ALLOWED_OPEN = {"ok", errno.errorcode[errno.ENXIO], errno.errorcode[errno.ENODEV]}


# The capability label each resource's workloads select on (tools' accelerator catalogue).
SELECTOR = {CORAL: "edgefd.io/edgetpu.present", NCS2: "edgefd.io/myriadx.present"}


def workload(name: str, image: str, resource: str) -> dict[str, Any]:
    """A pod as a user would write it: a node selector on the capability label and a limit."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hostNetwork": True,
            "nodeSelector": {SELECTOR[resource]: "true"},
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


def env_name(resource: str) -> str:
    return "EDGEFD_" + resource.split("/", 1)[1].upper().replace("-", "_") + "_DEVICES"


def probe(run: Run, container_id: str, resource: str, ungranted: str) -> dict[str, Any]:
    out = run.node.runtime.exec(container_id, "python3", "-c", PROBE, env_name(resource), ungranted)
    return json.loads(out)


def _device_ok(p: dict[str, Any], node: tuple[int, int]) -> list[str]:
    problems = []
    if len(p["devices"]) != 1:
        return [f"expected one device in {env_name(CORAL)}, got {p['env']!r}"]
    (d,) = p["devices"].values()
    if not d.get("char") or tuple(d.get("dev", ())) != node:
        problems.append(f"/dev/edgefd/<id> is {d}, want a char device {node[0]}:{node[1]}")
    if d.get("open") not in ALLOWED_OPEN:
        problems.append(f"open of the granted device: {d.get('open')}")
    return problems


def restart_and_probe(run: Run, pod: str, container: str, old: Any, new: Any) -> dict[str, Any]:
    """After a re-plug (`old` node gone, `new` there): stop the pod's Coral container, probe the
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
    p = probe(run, restarted["id"], CORAL, "/dev/null")
    run.facts["coral_devname"] = new.devname
    run.node.device_nodes = [n for n in run.node.device_nodes if n != old] + [new]
    return p


def check_workload(run: Run) -> dict[str, Any]:
    """4. The kube-scheduler places a Coral workload; it gets the device, the env var and the
    read-only /dev/bus/usb; a second Coral workload stays Pending."""
    coral = next(n for n in run.node.device_nodes if n.devname == run.facts["coral_devname"])
    ncs2 = run.facts["ncs2_path"]
    run.create_pod(workload("coral-workload", run.image, CORAL))
    c = run.running_container("coral-workload")
    p = probe(run, c["id"], CORAL, ncs2)
    problems = _device_ok(p, (coral.major, coral.minor))
    if p.get("usb_bus_mount", "").split(",")[0] != "ro":
        problems.append(f"/dev/bus/usb mount: {p.get('usb_bus_mount')!r}, want read-only")
    if p["ungranted_open"] != "EPERM":
        problems.append(f"an ungranted device opened with {p['ungranted_open']}, want EPERM")
    run.facts["workload"] = {"container": c["id"], "id": p["env"]}

    run.create_pod(workload("coral-workload-2", run.image, CORAL))

    def unschedulable() -> str | None:
        pod = run.api.get("/api/v1/namespaces/default/pods/coral-workload-2")
        for cond in pod["status"].get("conditions", []):
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return cond.get("message", "")
        return None

    message, _ = wait_for("second workload Unschedulable", unschedulable, timeout=30)
    phase = run.api.get("/api/v1/namespaces/default/pods/coral-workload-2")["status"]["phase"]
    if phase != "Pending" or f"Insufficient {CORAL}" not in message:
        problems.append(f"the second Coral workload is {phase}: {message}")
    run.delete_pod("coral-workload-2")
    return {"ok": not problems, "problems": problems, "probe": p, "second_pod": message}


def check_kubelet_restart(run: Run) -> dict[str, Any]:
    """5. After a kubelet restart the plugin re-registers, allocatable is back within 5 s, a
    new pod gets its device, and the running workload is not disturbed."""
    sock = run.node.ns.dir / "var-lib/kubelet/device-plugins/kubelet.sock"
    # (inode, ctime): a recreated file may get the freed inode number back
    before = (sock.stat().st_ino, sock.stat().st_ctime_ns)
    regs = {
        r: metric(plugin_metrics(), "edgefd_devplugin_registrations_total", resource=r)
        for r in RESOURCES
    }
    t_start = run.node.restart_kubelet()
    new_beat = math.ceil(time.time())  # the old kubelet is gone: later heartbeats are new

    def new_socket() -> bool:
        try:
            st = sock.stat()
        except FileNotFoundError:
            return False
        return (st.st_ino, st.st_ctime_ns) != before

    wait_for("kubelet.sock recreated", new_socket, timeout=60, interval=0.05)
    t_sock = time.monotonic()

    def registered() -> bool:
        m = plugin_metrics()
        return all(
            metric(m, "edgefd_devplugin_registrations_total", resource=r) > regs[r]
            for r in RESOURCES
        )

    wait_for("plugin re-registered", registered, timeout=30, interval=0.05)
    t_reg = time.monotonic()
    # a status the restarted kubelet wrote (heartbeats have whole seconds), not the old one
    sample, _ = wait_for(
        "allocatable after restart",
        lambda: run.sampler.first(
            lambda s: (
                s.heartbeat >= new_beat and all(s.allocatable.get(r) == "1" for r in RESOURCES)
            ),
            since=t_reg,
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

    run.create_pod(workload("ncs2-workload", run.image, NCS2))
    c = run.running_container("ncs2-workload")
    ncs2 = next(n for n in run.node.device_nodes if n.path == run.facts["ncs2_path"])
    p_new = probe(run, c["id"], NCS2, "/dev/null")
    problems += _device_ok(p_new, (ncs2.major, ncs2.minor))

    w = run.facts["workload"]
    pod = run.api.get("/api/v1/namespaces/default/pods/coral-workload")
    status = pod["status"]["containerStatuses"][0]
    same = status["containerID"].endswith(w["container"]) and status["restartCount"] == 0
    if not (same and status["state"].get("running")):
        problems.append(f"the running workload was disturbed: {status}")
    coral = next(n for n in run.node.device_nodes if n.devname == run.facts["coral_devname"])
    problems += _device_ok(
        probe(run, w["container"], CORAL, "/dev/null"), (coral.major, coral.minor)
    )
    run.figures.update(figures)
    return {"ok": not problems, "problems": problems, **figures, "new_pod_device": p_new["env"]}


def check_replug(run: Run) -> dict[str, Any]:
    """6. Unplug the Coral and plug it back at the same port with a new devnum while the
    workload runs: same ID, Unhealthy then Healthy, and the restarted container gets the new
    node through the plugin's link."""
    dev_id = run.facts["workload"]["id"]
    port = run.facts["coral_port"]
    link = (
        run.node.ns.dir
        / "var-lib/kubelet/device-plugins/edgefd-links"
        / CORAL.replace("/", "_")
        / dev_id
    )
    t0 = time.monotonic()
    old = run.node.host.unplug_usb(port)

    def health(h: str) -> bool:
        return metric(plugin_metrics(), "edgefd_devplugin_devices", resource=CORAL, health=h) == 1

    wait_for("Coral Unhealthy", lambda: health("Unhealthy"), timeout=10, interval=0.05)
    t_unhealthy = time.monotonic() - t0
    devnum = int(old.devname.rsplit("/", 1)[1]) + 10
    new = run.node.host.plug_usb(port, devnum)
    t1 = time.monotonic()
    wait_for("Coral Healthy", lambda: health("Healthy"), timeout=10, interval=0.05)
    t_healthy = time.monotonic() - t1
    target = os.readlink(next(link.iterdir())) if link.is_dir() else None
    problems = []
    if dev_id != "coral-usb-" + port.replace(".", "-"):
        problems.append(f"the Coral at port {port} is named {dev_id}")
    if target != new.path:
        problems.append(f"device link {link.name}/… points to {target}, want {new.path}")

    p = restart_and_probe(run, "coral-workload", run.facts["workload"]["container"], old, new)
    if p["env"] != dev_id:
        problems.append(f"the device ID changed: {dev_id} -> {p['env']}")
    problems += _device_ok(p, (new.major, new.minor))
    figures = {
        "unplug_to_unhealthy_s": round(t_unhealthy, 2),
        "plug_to_healthy_s": round(t_healthy, 2),
    }
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        "id": dev_id,
        "old_node": f"{old.path} {old.major}:{old.minor}",
        "new_node": f"{new.path} {new.major}:{new.minor}",
        **figures,
    }
