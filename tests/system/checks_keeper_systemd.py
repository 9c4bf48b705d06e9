"""Check 6s: under the systemd cgroup driver (kubeadm's and k3s's: layouts.py), a grant holds.

The node's init is a real systemd (systemd.py); the kubelet and runc ask it for each
container's scope, whose device rules it re-applies from the scope's `DeviceAllow=` on every
`systemctl daemon-reload` and on any property change of the scope (what the kubelet's CPU
manager, or an operator's `set-property`, does). So, with the holder of check 4 running:

* the keeper's first line says the driver it found and the systemd it reached;
* the holder's device re-enumerates; the new node opens in the running holder, and the scope's
  `DeviceAllow=` lists it and no longer the old one;
* after a `daemon-reload`, and after a `set-property --runtime <scope> CPUWeight=…`, the new
  node still opens there and the old one is still EPERM;
* the contrast, measured in the same run: a node allowed only in the scope's cgroup (as a
  keeper without systemd would) opens, and after the next `daemon-reload` is EPERM again.

On a node of the cgroupfs driver it is not applicable (there is no scope); 6k is the grant's
check on every node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .checks_devices import ALLOWED_OPEN
from .checks_keeper import _num, holder, opens, reenumerate, round_problems
from .context import Run

# a number no device of any tree has: the contrast's node
CONTRAST = "189:250"


def scope_unit(container_id: str) -> str:
    """containerd's scope of a container under the systemd driver (runc's `cri-containerd`
    prefix from the kubelet's `slice:cri-containerd:<id>` cgroupsPath)."""
    return f"cri-containerd-{container_id}.scope"


def device_allow(run: Run, unit: str) -> list[str]:
    out = run.node.systemctl("show", "-p", "DeviceAllow", "--value", unit).strip()
    # systemctl joins the entries with spaces: "/dev/char/189:5 rw /dev/null rwm ..."
    words = out.split()
    return [f"{p} {a}" for p, a in zip(words[::2], words[1::2], strict=False)]


def scope_dir(run: Run, unit: str) -> Path | None:
    """The scope's v1 devices cgroup on the machine (None when the devices controller is
    v2's: the contrast is then not made, 6s still checks the grant)."""
    for d in run.node.cgroups.dirs():
        if d.parent.name == "devices":
            return next(iter(d.rglob(unit)), None)
    return None


def check_keeper_systemd(run: Run) -> dict[str, Any]:
    """6s. A grant under the systemd cgroup driver survives daemon-reload and property
    changes of the scope; one made only in the cgroup does not."""
    if not run.node.systemd:
        return {"ok": True, "not_applicable": "the cgroupfs driver: containers are no scopes"}
    pod, device, _ = holder(run)
    if device.bus != "usb":
        return {"ok": True, "not_applicable": f"{device.dra_name} is on {device.bus}"}
    problems: list[str] = []
    first = run.container_log("device-keeper").splitlines()[:1]
    line = first[0] if first else ""
    if "cgroup-driver=systemd" not in line or "systemd=2" not in line:
        problems.append(f"the keeper's first line names no systemd driver and systemd: {line}")
    container = run.running_container(pod)["id"]
    unit = scope_unit(container)
    given = device_allow(run, unit)
    r = reenumerate(run, device, None, container)
    new, old = _num(r["new"]), _num(r["old"])
    problems += round_problems(r)
    after = device_allow(run, unit)
    if f"/dev/char/{new} rw" not in after:
        problems.append(f"{unit}: DeviceAllow= lacks the new node {new}: {after}")
    if any(e.startswith(f"/dev/char/{old} ") for e in after):
        problems.append(f"{unit}: DeviceAllow= still lists the old node {old}: {after}")
    seen: dict[str, dict[str, str]] = {}

    def still(step: str) -> None:
        got = opens(run, container, new, old)
        seen[step] = got
        if got[new] not in ALLOWED_OPEN or got[old] != "EPERM":
            problems.append(f"after {step}: {got} (want {new} open, {old} EPERM)")

    run.node.systemctl("daemon-reload")
    still("daemon-reload")
    run.node.systemctl("set-property", "--runtime", unit, "CPUWeight=50")
    still("set-property CPUWeight=50")
    contrast: dict[str, str] = {}
    cg = scope_dir(run, unit)
    if cg is not None:
        (cg / "devices.allow").write_text(f"c {CONTRAST} rw")
        contrast["cgroup only"] = opens(run, container, CONTRAST)[CONTRAST]
        run.node.systemctl("daemon-reload")
        contrast["after daemon-reload"] = opens(run, container, CONTRAST)[CONTRAST]
        if contrast != {"cgroup only": "ENXIO", "after daemon-reload": "EPERM"}:
            problems.append(f"the contrast did not show the reload's undoing: {contrast}")
    return {
        "ok": not problems,
        "problems": problems,
        "unit": unit,
        "keeper_first_line": line[-160:],
        "device_allow_before": given,
        "device_allow_after": after,
        "move": {"old": old, "new": new, "grant_s": max(r.get("alias_s", 99), r.get("bus_s", 99))},
        "opens": seen,
        "contrast": contrast or {"not_made": "no v1 devices controller"},
    }
