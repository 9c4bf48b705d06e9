"""Check 6k, at the paths devplugin gives beyond /dev/edgefd/<name> (the keeper follows
devplugin's decisions: the path is devplugin's, never a rule of the keeper's own):

* a PCI accelerator whose driver is reloaded (its function back at its address, its node at the
  same path, /dev/apex_0, with another minor): the running holder opens the path with the new
  number, and the old number is EPERM there;
* a USB device given without the host's bus (a resource with `usb_bus_mount: false`, set in
  devplugin's ConfigMap for the check): its node is the container's own, at its bus path
  (/dev/bus/usb/BBB/DDD), which moves with the number when it re-enumerates; the running
  holder finds and opens it at the new bus path, the old number is EPERM, and the stale node
  at the old path is gone. It needs a free device of the holder's kind (a tree with two: a
  filler's, freed), else it does not apply.

Both through either API: the workload (device plugin) or a claim pod (DRA).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

import yaml

from . import checks_dra
from .checks_devices import probe, workload
from .checks_keeper import WATCH, opens, power_cycle, reenumerate, round_problems, runtime_ids
from .checks_reload import CONFIGMAP
from .context import Run
from .expect import Device
from .hosttree import DevNode
from .keeper_install import identity
from .kube import wait_for

EXISTS = r"""
import json, os, sys
print(json.dumps({p: os.path.exists(p) for p in sys.argv[1:]}))
"""


def _num(n: DevNode) -> str:
    return f"{n.major}:{n.minor}"


def pci_move(run: Run, pod: str, device: Device, container: str, other: str) -> dict[str, Any]:
    """The holder's PCI device comes back at its address with its node at the same path and
    the next minor (a driver reload); then as it was."""
    host, path = run.node.host, device.container_paths[0]
    old = host.unplug_pci(device.location)
    want = DevNode(old.devname, old.major, old.minor + 1)
    result: dict[str, Any] = {}

    def watch() -> None:
        argv = ("python3", "-c", WATCH, path, path, _num(want), "6")
        result.update(json.loads(run.node.runtime.exec(container, *argv, timeout=30)))

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    time.sleep(0.8)
    t = time.time()
    new = host.plug_pci(device.location, minor=want.minor)
    run.node.device_nodes = [n for n in run.node.device_nodes if n != old] + [new]
    th.join(timeout=40)
    problems = []
    out: dict[str, Any] = {"old": _num(old), "new": _num(new), "path": path}
    got = result.get("got", {})
    for key in ("alias", "bus"):
        if key in got:
            out[f"{key}_s"], out[f"{key}_open"] = round(got[key][0] - t, 3), got[key][1]
    problems += round_problems(out)
    if opens(run, container, _num(old))[_num(old)] != "EPERM":
        problems.append(f"the old number {_num(old)} still opens")
    if set(opens(run, other, _num(new)).values()) != {"EPERM"}:
        problems.append("the bystander opens the new number")
    host.unplug_pci(device.location)  # back as it was, for the checks after this one
    restored = host.plug_pci(device.location, minor=old.minor)
    run.node.device_nodes = [n for n in run.node.device_nodes if n != new] + [restored]
    return {"ok": not problems, "problems": problems, "pod": pod, **out}


def _resources_without_bus(run: Run, resource: str) -> str:
    """devplugin's ConfigMap with `resource` given without the host's USB bus."""
    doc = yaml.safe_load(run.api.get(CONFIGMAP)["data"]["resources.yaml"])
    for r in doc["resources"]:
        if r["name"] == resource:
            r["usb_bus_mount"] = False
    return yaml.safe_dump(doc, sort_keys=False)


def _set_config(run: Run, text: str) -> None:
    """devplugin's ConfigMap set to `text`, and taken (its log says it reloaded)."""
    before = run.container_log("devplugin").count("configuration reloaded: ")
    cm = run.api.get(CONFIGMAP)
    cm["data"]["resources.yaml"] = text
    run.api.request("PUT", CONFIGMAP, cm)
    wait_for(
        "devplugin reloaded",
        lambda: run.container_log("devplugin").count("configuration reloaded: ") > before,
        timeout=60,
        interval=0.5,
    )


def bus_path_move(run: Run, held: Device) -> dict[str, Any]:
    """A USB device of the holder's kind, given at its bus path to a new holder, re-enumerates
    while it runs (the keeper makes its node at the new bus path); then all as it was."""
    others = [d for d in run.offer.of_class(held.device_class) if d != held and d.bus == "usb"]
    if held.bus != "usb" or not others or not run.facts.get("fillers"):
        return {"ok": True, "not_applicable": f"no second USB device of {held.device_class}"}
    run.delete_pod(run.facts["fillers"].pop(), wait=True)  # its device is the one to get
    original = run.api.get(CONFIGMAP)["data"]["resources.yaml"]
    name, problems, out = "bus-path", [], {}
    _set_config(run, _resources_without_bus(run, held.resource))
    try:
        if run.dra:
            w = checks_dra.claim_pod(run, name, held.device_class)
            container, device = w["container"], w["device"]
        else:
            run.create_pod(workload(name, run.image, held.resource, held.selector))
            container = run.running_container(name)["id"]
            got = probe(run, container, run.offer.resources[held.resource])["env"]
            device = run.offer.by_id(got.split(",")[0])
        before = identity(run, name)
        node = device.node_now(run.node.host.root)
        given = json.loads(run.node.runtime.exec(container, "python3", "-c", EXISTS, node.path))
        if not given[node.path]:
            problems.append(f"not given at its bus path {node.path}")
        desc = run.node.host.builder.describe_usb(device.location)
        boot = (desc["vendor"], desc["product"])
        r = reenumerate(run, device, runtime_ids(boot), container, at_bus_path=True)
        old, new = r["old"], r["new"]
        problems += round_problems(r)
        if opens(run, container, _num(old))[_num(old)] != "EPERM":
            problems.append(f"the old number {_num(old)} still opens")
        left = json.loads(run.node.runtime.exec(container, "python3", "-c", EXISTS, old.path))
        if left[old.path]:
            problems.append(f"the stale node {old.path} is still in the container")
        if identity(run, name) != before:
            problems.append("the holder was restarted")
        out = {k: (_num(v) if isinstance(v, DevNode) else v) for k, v in r.items()}
        out["paths"] = [old.path, new.path]
        power_cycle(run, device, boot)
    finally:
        with contextlib.suppress(Exception):
            run.delete_pod(name, wait=True)
        _set_config(run, original)
    return {"ok": not problems, "problems": problems, **out}
