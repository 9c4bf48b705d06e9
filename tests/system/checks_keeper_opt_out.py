"""Check 6o: device-keeper's one-value opt-out (``deviceKeeper.enabled=false``, or
k8s/overlays/no-device-keeper over the kustomize install), once per way of installing: the
problem the keeper solves shows (the running holder gets EPERM for its device's new node), and
the default again catches the missed move up at its first look (checks_keeper.py says the
rest of check 6k)."""

from __future__ import annotations

import json
import time
from typing import Any

from .checks_devices import ALLOWED_OPEN
from .checks_keeper import GRANT_S, WATCH, _num, holder, opens, power_cycle, reenumerate
from .context import Run
from .keeper_install import set_keeper


def check_keeper_opt_out(run: Run) -> dict[str, Any]:
    """6o. The one-value opt-out: the running holder gets EPERM for its device's new node, the
    problem the keeper solves. Then the default again: the keeper's first look catches that
    missed move up (the holder opens the new node by both paths, the old one is EPERM)."""
    pod, device, _ = holder(run)
    if device.bus != "usb":
        return {"ok": True, "not_applicable": f"{device.dra_name} is on {device.bus}"}
    problems: list[str] = []
    container = run.running_container(pod)["id"]
    desc = run.node.host.builder.describe_usb(device.location)
    without, caught, keeper_on = "", {}, True
    try:
        set_keeper(run, False)
        keeper_on = False
        r = reenumerate(run, device, None)
        old, new = r["old"], r["new"]
        time.sleep(GRANT_S)
        without = opens(run, container, _num(new))[_num(new)]
        if without != "EPERM":
            problems.append(f"without the keeper the holder opened the new node: {without}")
        set_keeper(run, True)
        keeper_on = True
        argv = ("python3", "-c", WATCH, device.container_paths[0], new.path, _num(new), "5")
        caught = json.loads(run.node.runtime.exec(container, *argv, timeout=30))
        if {v[1] for v in caught["got"].values()} - ALLOWED_OPEN or len(caught["got"]) != 2:
            problems.append(f"the move missed while the keeper was off was not caught up: {caught}")
        elif opens(run, container, _num(old))[_num(old)] != "EPERM":
            problems.append(f"after the catch-up the old node {_num(old)} still opens")
    finally:
        if not keeper_on:  # the default install back for the checks after this one
            set_keeper(run, True)
        power_cycle(run, device, (desc["vendor"], desc["product"]))
    return {"ok": not problems, "problems": problems, "without_keeper": without,
            "caught_up": caught.get("got")}  # fmt: skip
