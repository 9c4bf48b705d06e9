"""Checks 6k and 6o: first use works in the default install. A device that re-enumerates inside
a *running* container (a Coral loading its firmware on the first open: 1a6e:089a comes back at
the same port as 18d1:9302 with a new device number; an NCS2 booting: 03e7:2485 comes back as
03e7:f63b) is opened again there, through either API, with no container or pod restart; the
default install's device-keeper is what grants it, at the path devplugin gave (its decisions:
checks_keeper_paths.py for a PCI device's own path and a USB device's bus path), and the check
fails (does not skip) when the install has none (keeper_install.py). 6k runs on every tree;
6o (checks_keeper_opt_out.py), the opt-out, once per way of installing.

In the default install the holder's device re-enumerates ``ROUNDS`` times, the first its
firmware load. Each time, inside the running holder, the new node must open past the device
cgroup (ENXIO/ENODEV: no driver behind it here) within ``GRANT_S``, both by
``/dev/edgefd/<name>`` and by ``/dev/bus/usb/BBB/DDD`` (the read-only bind of the host's
/dev/bus/usb); the old major:minor is EPERM afterwards (mknod'ed in the container), and a
running container that was not given the device gets EPERM for both. Before that, every
other kind of USB device of the tree that has a boot state (the NCS2) boots the same way in a
running holder (the test's workload holding it, else one of its own). 6o: the one-value
opt-out (``deviceKeeper.enabled=false``, or k8s/overlays/no-device-keeper over the kustomize
install): the running holder gets EPERM for the new node, the problem the keeper solves. Then
the default again: the keeper's first look catches that missed move up (the holder opens the
new node by both paths, the old one is EPERM). The time from the re-appearance (the tree's
device and node written) to the first successful open is the latency (p50/p99 in the
figures). The keeper stays, so the checks after this one see the default install.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
from typing import Any

from . import checks_dra
from .checks_devices import ALLOWED_OPEN, probe, workload
from .context import Run
from .expect import Device, producer_labels
from .hosttree import DevNode
from .keeper_install import identity, keeper_metric, keeper_problem_settled
from .kube import wait_for

ROUNDS = 10
GRANT_S = 1.0

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


def usb_node(port: str, devnum: int) -> DevNode:
    """The node the kernel gives a USB device (usbdev: major 189, (bus-1)*128 + devnum-1)."""
    bus = int(port.split("-", 1)[0])
    return DevNode(f"bus/usb/{bus:03d}/{devnum:03d}", 189, (bus - 1) * 128 + devnum - 1)


def reenumerate(
    run: Run,
    device: Device,
    ids: tuple[str, str] | None,
    container: str = "",
    at_bus_path: bool = False,
) -> dict[str, Any]:
    """The device disconnects and, 0.8 s later, comes back at its port with a new node (and
    ``ids``). With ``container``, a watcher in it opens the new node by both paths from
    before it comes back (its container path, or with ``at_bus_path``, where a device given
    without the bus is: its new bus path); the times are from the moment it came back."""
    host = run.node.host
    old = host.unplug_usb(device.location)
    devnum = host.next_devnum(device.location)
    want = usb_node(device.location, devnum)
    alias = want.path if at_bus_path else device.container_paths[0]
    result: dict[str, Any] = {}

    def watch() -> None:
        argv = ("python3", "-c", WATCH, alias, want.path, _num(want), "6")
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


def power_cycle(run: Run, device: Device, ids: tuple[str, str]) -> dict[str, str]:
    """Put the device back in the state ``ids`` says (a Coral in its boot state again, as after
    a power cycle), then wait for the labels of the tree as it is now: those of the tree as it
    was given once every device moved by a check is back (checks_keeper_paths puts a second
    Coral back while the holder's is still in its runtime state, so the tree's labels of
    that moment, not the first ones, are what must be there). Returns those labels."""
    reenumerate(run, device, ids)
    want = tree_labels(run)
    seen: dict[str, str] = {}

    def labelled() -> bool:
        seen.clear()
        seen.update(run.get_node()["metadata"].get("labels") or {})
        return want.items() <= seen.items()

    try:
        wait_for("the tree's labels again", labelled, timeout=30, interval=0.1)
    except AssertionError as e:
        off = {k: (v, seen.get(k)) for k, v in want.items() if seen.get(k) != v}
        said = ""
        with contextlib.suppress(Exception):  # what the scanner and the sink said last
            said = "; ".join(
                f"{c}: " + " | ".join(run.container_log(c).strip().splitlines()[-12:])
                for c in ("bus-scan", "feature-sink")
            )
        raise AssertionError(
            f"{e} after {device.kind} at {device.location}: {off}; {said}"
        ) from None
    return want


def tree_labels(run: Run) -> dict[str, str]:
    """The producers' labels for the node's tree as it is now, computed (their dry runs) once
    per state of its USB devices in a scenario: a power cycle mostly puts the tree back in a
    state it had."""
    root = run.node.host.root
    state = []
    for d in sorted((root / "sys/bus/usb/devices").iterdir()):
        with contextlib.suppress(OSError):
            state.append((d.name, (d / "idVendor").read_text(), (d / "idProduct").read_text()))
    known = run.facts.setdefault("tree_labels", {})
    key = tuple(state)
    if key not in known:
        known[key] = producer_labels(root)
    return known[key]


def pctl(values: list[float], q: float) -> float:
    """The q-quantile by the nearest rank (p99 of 10 values is the largest)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def check_keeper(run: Run) -> dict[str, Any]:
    """6k. First use in the default install, in a running holder, at every path devplugin
    gives (checks_keeper_paths: a PCI device's own, a USB device's bus path)."""
    from .checks_keeper_paths import bus_path_move, pci_move

    pod, device, _ = holder(run)
    if device.bus not in ("usb", "pci"):
        return {"ok": True, "not_applicable": f"{device.dra_name} is on {device.bus}: no move"}
    missing = keeper_problem_settled(run)
    if missing:
        return {"ok": False, "problems": [missing]}
    problems: list[str] = []
    keeper_log = ""
    run.create_pod(bystander(run.image))
    other = run.running_container("bystander")["id"]
    container = run.running_container(pod)["id"]
    before = identity(run, pod)
    rounds: list[dict[str, Any]] = []
    grants, others, desc, ids = 0.0, [], {}, None
    out: dict[str, Any] = {}
    try:
        # first the other kinds, each put back before the holder's device changes: a power
        # cycle waits for every label of the tree
        others = [first_use(run, d) for d in boot_state_kinds(run, device)]
        problems += [p for o in others for p in o.pop("problems")]
        grants0 = keeper_metric("edgefd_device_keeper_grants_total")
        if device.bus == "pci":
            out["pci"] = pci_move(run, pod, device, container, other)
            problems += [f"pci: {p}" for p in out["pci"]["problems"]]
        else:
            desc = run.node.host.builder.describe_usb(device.location)
            ids = runtime_ids((desc["vendor"], desc["product"]))  # boot -> runtime, round 1
        for i in range(ROUNDS if device.bus == "usb" else 0):
            r = reenumerate(run, device, ids if i == 0 else None, container)
            rounds.append(r)
            old, new = r["old"], r["new"]
            problems += [f"round {i + 1}: {p}" for p in round_problems(r)]
            if i in (0, ROUNDS - 1):
                mine = opens(run, container, _num(old))
                theirs = opens(run, other, _num(old), _num(new))
                if mine[_num(old)] != "EPERM":
                    problems.append(f"round {i + 1}: the old node {_num(old)} opens: {mine}")
                if set(theirs.values()) != {"EPERM"}:
                    problems.append(f"round {i + 1}: the bystander opens {theirs}")
        grants = keeper_metric("edgefd_device_keeper_grants_total") - grants0
        out["bus_path"] = bus_path_move(run, device)
        problems += [f"bus path: {p}" for p in out["bus_path"].get("problems", [])]
    finally:
        if problems:  # the keeper's own account of it
            with contextlib.suppress(Exception):
                keeper_log = run.container_log("device-keeper")[:6000]
        run.delete_pod("bystander")
        if desc and power_cycle(run, device, (desc["vendor"], desc["product"])) != run.expected:
            problems.append("the tree's labels are not the ones it was given, after the check")
    if identity(run, pod) != before:
        problems.append(f"the holder was restarted: {before} -> {identity(run, pod)}")
    moves = ROUNDS if device.bus == "usb" else 1
    if grants < moves:
        problems.append(f"{grants:.0f} grants counted for {moves} moves")
    lat = [max(x.get("alias_s", 99), x.get("bus_s", 99)) for x in rounds or [out["pci"]]]
    figures = {
        "keeper_grant_p50_s": round(statistics.median(lat), 3),
        "keeper_grant_p99_s": round(pctl(lat, 0.99), 3),
        "keeper_rounds": len(lat),
    }
    run.figures.update(figures)
    if not all(x.get("started_before", True) for x in rounds):
        problems.append("a watcher started after its device came back: latency overstated")
    return {
        "ok": not problems,
        "problems": problems,
        "first_use": {"ids": ids, "round_1": _plain(rounds[0]) if rounds else None},
        "other_kinds": others,
        "rounds": [_plain(x) for x in rounds],
        **out,
        **figures,
        **({"keeper_log": keeper_log} if keeper_log else {}),
    }


def _plain(r: dict[str, Any]) -> dict[str, Any]:
    return {k: (_num(v) if isinstance(v, DevNode) else v) for k, v in r.items()}


def round_problems(r: dict[str, Any]) -> list[str]:
    """What went wrong in one re-enumeration watched from a running holder."""
    out = []
    for key in ("alias", "bus"):
        if r.get(f"{key}_open") not in ALLOWED_OPEN:
            out.append(f"{key} path never opened: {r.get('last')}")
        elif r[f"{key}_s"] > GRANT_S:
            out.append(f"{key} path opened after {r[f'{key}_s']}s")
    return out


def boot_state_kinds(run: Run, held: Device) -> list[Device]:
    """One USB device of every other kind the tree has in a boot state (an NCS2 not yet
    booted): each re-enumerates on its first use."""
    out: dict[str, Device] = {}
    for devices in run.offer.resources.values():
        for d in devices:
            if d.bus != "usb" or d.kind == held.kind or d.kind in out:
                continue
            desc = run.node.host.builder.describe_usb(d.location)
            if runtime_ids((desc["vendor"], desc["product"])):
                out[d.kind] = d
    return list(out.values())


def holder_of(run: Run, resource: str) -> str | None:
    """A running pod of the test's whose limits ask for ``resource`` (check 5 leaves one
    holding a device of another resource than the first workload's)."""
    for pod in run.api.get("/api/v1/namespaces/default/pods")["items"]:
        limits = [c.get("resources", {}).get("limits", {}) for c in pod["spec"]["containers"]]
        alive = not pod["metadata"].get("deletionTimestamp")
        running = alive and pod.get("status", {}).get("phase") == "Running"
        if running and any(resource in x for x in limits):
            return pod["metadata"]["name"]
    return None


def first_use(run: Run, device: Device) -> dict[str, Any]:
    """A running holder for ``device`` (a limit, or a claim of its class: the test's workload
    that already holds it, else one of its own), which boots once while it runs: opened again
    there, the holder not restarted; then the device back in its boot state for the checks
    after this one."""
    name = f"first-use-{device.kind}"
    running = None if run.dra else holder_of(run, device.resource)
    if run.dra:
        w = checks_dra.claim_pod(run, name, device.device_class)
        container, device = w["container"], w["device"]
    else:
        if running is None:
            run.create_pod(workload(name, run.image, device.resource, device.selector))
        name = running or name  # an earlier check's workload, still running, holds it
        container = run.running_container(name)["id"]
        got = probe(run, container, run.offer.resources[device.resource])["env"]
        device = run.offer.by_id(got.split(",")[0])
    desc = run.node.host.builder.describe_usb(device.location)
    boot = (desc["vendor"], desc["product"])
    before = identity(run, name)
    try:
        r = reenumerate(run, device, runtime_ids(boot), container)
        problems = [f"{device.kind}: {p}" for p in round_problems(r)]
        if identity(run, name) != before:
            problems.append(f"{device.kind}: its holder was restarted")
    finally:
        if running is None:
            run.delete_pod(name, wait=True)
        power_cycle(run, device, boot)
    return {
        "kind": device.kind,
        "holder": name,
        "ids": [boot, runtime_ids(boot)],
        "problems": problems,
        **_plain(r),
    }
