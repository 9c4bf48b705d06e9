"""Check 6k: a device that re-enumerates inside a *running* container (a Coral loading its
firmware: 1a6e:089a comes back at the same port as 18d1:9302 with a new device number), with
and without the device-keeper component (k8s/overlays/device-keeper), through either API.

Without it (the base), the running holder gets EPERM for the new node: the problem. Then the
component is applied (tests/system/overlay-keeper, overlay-dra-keeper: the e2e overlay plus the
component, nothing else): its first look catches that missed move up (the holder opens the new
node by both paths, the old one is EPERM). Then the device re-enumerates ``ROUNDS`` times.
Each time, inside the running holder, the new node must open past the device cgroup
(ENXIO/ENODEV: no driver behind it here) within ``GRANT_S``, both by ``/dev/edgefd/<name>``
and by ``/dev/bus/usb/BBB/DDD`` (the read-only bind of the host's /dev/bus/usb); the old
major:minor is EPERM afterwards (mknod'ed in the container), and a running container that was
not given the device gets EPERM for both. The time from the re-appearance (the tree's device
and node written) to the first successful open is the latency (p50/p99 in the figures). The
component is removed again at the end, so the checks after this one see the base.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
import urllib.request
from typing import Any

from tests.peers.processes import REPO_ROOT

from .checks_devices import ALLOWED_OPEN, workload
from .context import Run
from .expect import Device
from .hosttree import DevNode
from .kube import wait_for

ROUNDS = 10
GRANT_S = 1.0
KEEPER_METRICS = "http://127.0.0.1:8084/metrics"  # the component's listener (hostNetwork)
OVERLAYS = {False: "overlay-keeper", True: "overlay-dra-keeper"}

# Run in the holder before the device comes back: open the device's node by both paths until
# each passes the device cgroup; print when (wall clock, the node's and the test's).
WATCH = r"""
import errno, json, os, sys, time
alias, bus_path, want, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
major, minor = map(int, want.split(":"))
got, last, started = {}, {}, time.time()
deadline = started + limit
while time.time() < deadline and len(got) < 2:
    for key, path in (("alias", alias), ("bus", bus_path)):
        if key in got:
            continue
        try:
            st = os.stat(path)
            if (os.major(st.st_rdev), os.minor(st.st_rdev)) != (major, minor):
                last[key] = "names %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
                continue
            os.close(os.open(path, os.O_RDWR))
            got[key] = [time.time(), "ok"]
        except OSError as e:
            name = errno.errorcode.get(e.errno, str(e.errno))
            last[key] = name
            if name in ("ENXIO", "ENODEV"):
                got[key] = [time.time(), name]
    time.sleep(0.002)
print(json.dumps({"got": got, "last": last, "started": started}))
"""

# Run in a container: whether nodes of these numbers open there (made with mknod in /tmp).
OPENS = r"""
import errno, json, os, stat, sys
out = {}
for spec in sys.argv[1:]:
    major, minor = map(int, spec.split(":"))
    node = "/tmp/keeper-probe-%d" % os.getpid()
    try:
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
        try:
            os.close(os.open(node, os.O_RDWR))
            out[spec] = "ok"
        except OSError as e:
            out[spec] = errno.errorcode.get(e.errno, str(e.errno))
        os.unlink(node)
    except OSError as e:
        out[spec] = "mknod " + errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


def _num(n: DevNode) -> str:
    return f"{n.major}:{n.minor}"


def bystander(image: str) -> dict[str, Any]:
    """A running pod like the workloads, that was given no device."""
    pod = workload("bystander", image, "none", {})
    del pod["spec"]["nodeSelector"], pod["spec"]["containers"][0]["resources"]
    return pod


def opens(run: Run, container: str, *numbers: str) -> dict[str, str]:
    return json.loads(run.node.runtime.exec(container, "python3", "-c", OPENS, *numbers))


def runtime_ids(ids: tuple[str, str]) -> tuple[str, str] | None:
    """The IDs a device in its boot state comes back with (the catalogue's runtime state)."""
    from edgefd.bus.catalogue import load_catalogue

    for acc in load_catalogue().accelerators:
        states = {(u.vendor, u.product): u.state for u in acc.usb}
        if states.get(ids) == "boot":
            return next(((u.vendor, u.product) for u in acc.usb if u.state == "runtime"), None)
    return None


def holder(run: Run) -> tuple[str, Device, list[Device]]:
    """The first workload (device plugin) or claim pod (DRA), its device, what to probe."""
    if "claim" in run.facts:
        w = run.facts["claim"]
        return w["pod"], w["device"], [w["device"]]
    w = run.facts["workload"]
    device = run.offer.by_id(w["id"])
    return w["pod"], device, run.offer.resources[device.resource]


def keeper_metric(name: str) -> float:
    with urllib.request.urlopen(KEEPER_METRICS, timeout=2) as r:
        text = r.read().decode()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name))


def set_keeper(run: Run, on: bool) -> None:
    """Apply the e2e overlay with (or without) the component; wait for the devplugin pod of
    that shape to run, and with the keeper for its /readyz."""
    dra = "claim" in run.facts
    overlay = REPO_ROOT / "tests" / "system" / OVERLAYS[dra] if on else run.overlay
    run.kubectl("apply", "--server-side", "-k", str(overlay))

    def shaped() -> bool:
        path = (
            "/api/v1/namespaces/edgefd/pods?labelSelector=app.kubernetes.io/name%3Dedgefd-devplugin"
        )
        pods = [p for p in run.api.get(path)["items"] if not p["metadata"].get("deletionTimestamp")]
        if len(pods) != 1:
            return False
        names = {c["name"] for c in pods[0]["spec"]["containers"]}
        statuses = pods[0].get("status", {}).get("containerStatuses") or []
        ready = statuses and all(s.get("ready") for s in statuses)
        return ("device-keeper" in names) == on and bool(ready)

    wait_for(f"devplugin pod {'with' if on else 'without'} the keeper", shaped, timeout=120)
    if on:
        wait_for("keeper metrics", lambda: keeper_metric("edgefd_device_keeper_moves_total") >= 0,
                 timeout=30, interval=0.2)  # fmt: skip


def prepare_node(run: Run) -> None:
    """What the keeper's mounts need on this node: the tree's sys/ holds the mount point of
    the host cgroup filesystem (the keeper mounts it under its read-only /host/sys, as on a
    real host). The runtime's socket is already where the node's distribution puts it
    (layouts.py), which is where the install's profile must point the keeper."""
    (run.node.spec.host_tree / "sys" / "fs" / "cgroup").mkdir(parents=True, exist_ok=True)


def usb_node(port: str, devnum: int) -> DevNode:
    """The node the kernel gives a USB device (usbdev: major 189, (bus-1)*128 + devnum-1)."""
    bus = int(port.split("-", 1)[0])
    return DevNode(f"bus/usb/{bus:03d}/{devnum:03d}", 189, (bus - 1) * 128 + devnum - 1)


def reenumerate(
    run: Run, device: Device, ids: tuple[str, str] | None, container: str = ""
) -> dict[str, Any]:
    """The device disconnects and, 0.8 s later, comes back at its port with a new node (and
    ``ids``). With ``container``, a watcher in it opens the new node by both paths from
    before it comes back; the times are from the moment it came back."""
    host = run.node.host
    old = host.unplug_usb(device.location)
    devnum = host.next_devnum(device.location)
    want = usb_node(device.location, devnum)
    result: dict[str, Any] = {}

    def watch() -> None:
        argv = ("python3", "-c", WATCH, device.container_paths[0], want.path, _num(want), "6")
        result.update(json.loads(run.node.runtime.exec(container, *argv, timeout=30)))

    th = threading.Thread(target=watch, daemon=True)
    if container:
        th.start()
    time.sleep(0.8 if container else 0.3)
    t = time.time()
    new = host.replug_usb(device.location, devnum, ids)
    run.node.device_nodes = [n for n in run.node.device_nodes if n != old] + [new]
    out: dict[str, Any] = {"old": old, "new": new}
    if not container:
        return out
    th.join(timeout=40)
    got = result.get("got", {})
    out["started_before"] = result.get("started", t) < t
    out["last"] = result.get("last")
    for key in ("alias", "bus"):
        if key in got:
            out[f"{key}_s"] = round(got[key][0] - t, 3)
            out[f"{key}_open"] = got[key][1]
    return out


def power_cycle(run: Run, device: Device, ids: tuple[str, str]) -> None:
    """Put the device back as the tree had it (a Coral in its boot state again, as after a
    power cycle), so the checks after this one find the labels they expect."""
    reenumerate(run, device, ids)

    def labelled() -> bool:
        labels = run.get_node()["metadata"].get("labels") or {}
        return run.expected.items() <= labels.items()

    wait_for("the tree's labels again", labelled, timeout=30, interval=0.1)


def pctl(values: list[float], q: float) -> float:
    """The q-quantile by the nearest rank (p99 of 10 values is the largest)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def check_keeper(run: Run) -> dict[str, Any]:
    """6k. The running holder and the new node, without and with the device-keeper."""
    pod, device, _ = holder(run)
    if device.bus != "usb":
        return {
            "ok": True,
            "not_applicable": f"{device.dra_name} is on {device.bus}: no re-enumeration",
        }
    problems: list[str] = []
    keeper_log = ""
    run.create_pod(bystander(run.image))
    other = run.running_container("bystander")["id"]
    container = run.running_container(pod)["id"]
    desc = run.node.host.builder.describe_usb(device.location)
    ids = runtime_ids((desc["vendor"], desc["product"]))  # boot -> runtime, in the 1st round

    # without the keeper: the problem
    r = reenumerate(run, device, None)
    old, new = r["old"], r["new"]
    time.sleep(GRANT_S)
    without = opens(run, container, _num(new))[_num(new)]
    if without != "EPERM":
        problems.append(f"without the keeper the holder opened the new node: {without}")
    # the keeper comes: its first look catches the move it missed up, in the running holder
    prepare_node(run)
    set_keeper(run, True)
    argv = ("python3", "-c", WATCH, device.container_paths[0], new.path, _num(new), "5")
    caught = json.loads(run.node.runtime.exec(container, *argv, timeout=30))
    if {v[1] for v in caught["got"].values()} - ALLOWED_OPEN or len(caught["got"]) != 2:
        problems.append(f"the move missed before the keeper came was not caught up: {caught}")
    elif opens(run, container, _num(old))[_num(old)] != "EPERM":
        problems.append(f"after the catch-up the old node {_num(old)} still opens")
    grants0 = keeper_metric("edgefd_device_keeper_grants_total")
    rounds = []
    try:
        for i in range(ROUNDS):
            r = reenumerate(run, device, ids if i == 0 else None, container)
            rounds.append(r)
            old, new = r["old"], r["new"]
            for key in ("alias", "bus"):
                if r.get(f"{key}_open") not in ALLOWED_OPEN:
                    problems.append(f"round {i + 1}: {key} path never opened: {r.get('last')}")
                elif r[f"{key}_s"] > GRANT_S:
                    problems.append(f"round {i + 1}: {key} path opened after {r[f'{key}_s']}s")
            if i in (0, ROUNDS - 1):
                mine = opens(run, container, _num(old))
                theirs = opens(run, other, _num(old), _num(new))
                if mine[_num(old)] != "EPERM":
                    problems.append(f"round {i + 1}: the old node {_num(old)} opens: {mine}")
                if set(theirs.values()) != {"EPERM"}:
                    problems.append(f"round {i + 1}: the bystander opens {theirs}")
        grants = keeper_metric("edgefd_device_keeper_grants_total") - grants0
    finally:
        if problems:  # the keeper's own account of it, before its container goes
            with contextlib.suppress(Exception):
                keeper_log = run.container_log("device-keeper")[:6000]
        set_keeper(run, False)
        run.delete_pod("bystander")
        power_cycle(run, device, (desc["vendor"], desc["product"]))
    if grants < ROUNDS:
        problems.append(f"{grants:.0f} grants counted for {ROUNDS} re-enumerations")
    lat = [max(x.get("alias_s", 99), x.get("bus_s", 99)) for x in rounds]
    figures = {
        "keeper_grant_p50_s": round(statistics.median(lat), 3),
        "keeper_grant_p99_s": round(pctl(lat, 0.99), 3),
        "keeper_rounds": len(lat),
    }
    run.figures.update(figures)
    if not all(x.get("started_before") for x in rounds):
        problems.append("a watcher started after its device came back: latency overstated")
    return {
        "ok": not problems,
        "problems": problems,
        "without_keeper": without,
        "caught_up": caught.get("got"),
        "rounds": [
            {k: (_num(v) if isinstance(v, DevNode) else v) for k, v in x.items()} for x in rounds
        ],
        **figures,
        **({"keeper_log": keeper_log} if keeper_log else {}),
    }
