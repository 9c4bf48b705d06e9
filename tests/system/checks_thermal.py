"""Check 6t, both APIs: a device that says its temperature (a Coral PCIe: gasket's
`/sys/class/apex/apex_N/temp`, milli-degrees Celsius) runs hot while a workload holds it, and
cools down again (issue 31: temperature as a health source).

Which device, where its temperature is and its limit come from the tree and edgefd's own
catalogue (its entry's `temperature`: the class directory, the input, the driver's trip-point
attribute), never from the check: the limit is the driver's (the e2e configuration sets none),
the hysteresis the inventory's default. A tree without such a device has nothing to check
(``not_applicable``, as check 6k on a tree without a USB device).

The temperature is written into the host tree the pod reads (a rename: a scan never reads
half a number). sysfs sends no event when a reading changes, so the device plugin sees it at
its next full rescan (``--rescan-interval``, 10 s by default): the figures include that wait.
1. Above the limit: the device is Unhealthy (device plugin: the kubelet's allocatable drops by
   its IDs; DRA: the ResourceSlice's device gets the taint `edgefd.io/unhealthy=overheating`,
   NoSchedule), and the workload's `allocatedResourcesStatus` says Unhealthy (DRA: with the
   reason, "... above the limit ..."; the claim's status.devices Ready=False, state
   "unusable"). The workload keeps running: a throttling TPU still answers, so nothing evicts
   it (the taint is never NoExecute; `--evict-after` is only for absent devices).
2. Below the limit but within the hysteresis: a rescan reads it (the device's temperature
   metric says the new reading) and the device is still Unhealthy.
3. Below the limit minus the hysteresis: Healthy again, allocatable back (DRA: the taint gone,
   Ready=True), the workload's status Healthy.
The tree's reading is put back at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgefd.bus.catalogue import load_catalogue
from edgefd.core.service import WatchSettings
from edgefd.inventory.temperature import DEFAULT_HYSTERESIS, MAX_LIMIT, MIN_LIMIT

from . import checks_dra
from .checks_health import health_problems, wait_claim_ready, wait_pod_health
from .context import Run, metric, plugin_metrics
from .expect import Device, Offer
from .kube import wait_for

RESCAN_S = WatchSettings().rescan_interval  # devplugin's, as the manifests leave it
SCAN_SLACK_S = 5.0  # a rescan's own time on a loaded 2-core machine, and the sampling
OVER_C = 2.0  # how far above the limit the hot reading is, and below the hysteresis the cool
TAINT = {"key": "edgefd.io/unhealthy", "value": "overheating", "effect": "NoSchedule"}
# what the figures time, by API (run.dra): the plugin's health, or the slice's taint
BAD, GOOD = {False: "unhealthy", True: "tainted"}, {False: "healthy", True: "untainted"}


@dataclass(frozen=True)
class Hot:
    """A device of the tree that says its temperature, and where."""

    device: Device
    path: Path  # the input in the host tree (outside the node)
    limit_c: float  # the driver's limit, as the inventory reads it
    original: str  # the reading the tree had


def thermal_device(offer: Offer, root: Path, prefer: str = "") -> Hot | None:
    """The first offered device whose catalogue entry names a temperature that the tree at
    ``root`` has (the device ``prefer``, by its slice name, first)."""
    catalogue = load_catalogue()
    devices = sorted(offer.devices, key=lambda d: d.dra_name != prefer)
    for d in devices:
        acc = catalogue.by_id(d.model) if d.model else None
        thermal = acc.temperature if acc is not None else None
        if thermal is None:
            continue
        base = root / "sys/class" / thermal.cls / os.path.basename(d.node.devname)
        path = base / thermal.input
        if not path.is_file():
            continue
        limit = thermal.default_limit  # unless the driver says its own, as it may
        with contextlib.suppress(OSError, ValueError):
            said = int((base / thermal.limit).read_text().strip()) if thermal.limit else 0
            if 1000 * MIN_LIMIT <= said <= 1000 * MAX_LIMIT:
                limit = said
        return Hot(d, path, limit / 1000.0, path.read_text())
    return None


def set_reading(path: Path, celsius: float) -> float:
    """Write the reading (milli-°C) as a rename; the time it was written (monotonic)."""
    tmp = path.with_name(f".{path.name}.e2e")
    tmp.write_text(f"{round(celsius * 1000)}\n")
    os.replace(tmp, path)
    return time.monotonic()


def _reading(name: str) -> float | None:
    """The temperature (°C) the device plugin's last scan read for device ``name``."""
    m = plugin_metrics()
    gauge = "edgefd_inventory_device_temperature_celsius"
    return next((v for (n, ls), v in m.items() if n == gauge and ("device", name) in ls), None)


class _DevicePlugin:
    """What the device plugin shows of the device's health."""

    def __init__(self, run: Run, device: Device) -> None:
        self.run, self.device = run, device
        self.resource = device.resource
        self.total = sum(len(d.kubelet_ids) for d in run.offer.resources[self.resource])
        self.mine = len(device.kubelet_ids)
        w = run.facts.get("workload") or {}
        self.pod = w.get("pod") if w.get("id") in device.kubelet_ids else None

    def _count(self, health: str) -> float:
        m = plugin_metrics()
        return metric(m, "edgefd_devplugin_devices", resource=self.resource, health=health)

    def unhealthy(self) -> bool:
        return self._count("Unhealthy") == self.mine

    def healthy(self) -> bool:
        return self._count("Healthy") == self.total

    def node_shows(self, hot: bool, since: float) -> float:
        """Seconds from ``since`` until the Node's allocatable says it (the sampler's)."""
        want = str(self.total - self.mine if hot else self.total)
        sample, _ = wait_for(
            f"{self.resource} allocatable {want}",
            lambda: self.run.sampler.first(
                lambda s: s.allocatable.get(self.resource, "0") == want, since
            ),
            timeout=30,
        )
        return sample.t - since


class _Dra:
    """What the ResourceSlice and the claim show of the device's health."""

    def __init__(self, run: Run, device: Device) -> None:
        self.run, self.device = run, device
        claim = run.facts.get("claim") or {}
        self.pod = claim.get("pod") if claim.get("name") == device.dra_name else None

    def taints(self) -> list[dict[str, Any]] | None:
        d = checks_dra.node_devices(self.run).get(self.device.dra_name)
        return None if d is None else d.get("taints") or []

    def unhealthy(self) -> bool:
        return any({k: t.get(k) for k in TAINT} == TAINT for t in self.taints() or ())

    def healthy(self) -> bool:
        return self.taints() == []

    def claim(self) -> dict[str, Any] | None:
        return checks_dra._claim_of(self.run, self.pod) if self.pod else None


def _running_as_before(run: Run, pod: str, before: tuple[Any, Any]) -> list[str]:
    st = run.api.get(f"/api/v1/namespaces/default/pods/{pod}")
    p = (st.get("status", {}).get("containerStatuses") or [{}])[0]
    if st["metadata"].get("deletionTimestamp") or "running" not in p.get("state", {}):
        return [f"{pod} did not keep running while its device was hot: {p.get('state')}"]
    if (p.get("containerID"), p.get("restartCount")) != before:
        return [f"{pod}'s container changed while its device was hot: {before} -> {p}"]
    return []


def check_overheating(run: Run) -> dict[str, Any]:
    """6t. Hot, within the hysteresis, cool: Unhealthy, still Unhealthy, Healthy."""
    prefer = (run.facts.get("claim") or {}).get("name") or ""
    if not prefer and run.facts.get("workload"):
        prefer = run.offer.by_id(run.facts["workload"]["id"]).dra_name
    hot = thermal_device(run.offer, run.node.host.root, prefer)
    if hot is None:
        return {"ok": True, "not_applicable": "no device of the tree says its temperature"}
    device = hot.device
    view: _DevicePlugin | _Dra = _Dra(run, device) if run.dra else _DevicePlugin(run, device)
    pod = view.pod
    before: tuple[Any, Any] = (None, None)
    if pod:
        p = run.api.get(f"/api/v1/namespaces/default/pods/{pod}")["status"]["containerStatuses"][0]
        before = (p.get("containerID"), p.get("restartCount"))
    claim = view.claim() if isinstance(view, _Dra) else None
    limit, band = hot.limit_c, hot.limit_c - DEFAULT_HYSTERESIS / 2
    cool = hot.limit_c - DEFAULT_HYSTERESIS - OVER_C
    within = RESCAN_S + SCAN_SLACK_S
    problems: list[str] = []
    figures: dict[str, Any] = {}
    shown: dict[str, Any] = {}
    pre = "dra_" if run.dra else ""
    try:
        # 1. hot
        t0 = set_reading(hot.path, limit + OVER_C)
        wait_for("device Unhealthy (hot)", view.unhealthy, timeout=within + RESCAN_S, interval=0.1)
        t_bad = time.monotonic()
        figures[f"{pre}hot_to_{BAD[run.dra]}_s"] = round(t_bad - t0, 2)
        if isinstance(view, _Dra):
            shown["taints_hot"] = view.taints()
        if isinstance(view, _DevicePlugin):
            figures["hot_to_allocatable_drop_s"] = round(view.node_shows(True, t0), 2)
        if pod:
            down = wait_pod_health(run, pod, "Unhealthy", t_bad)
            figures[f"{pre}hot_to_pod_unhealthy_s"] = round(down["after_s"] + t_bad - t0, 2)
            problems += health_problems(down, "Unhealthy", "above the limit" if run.dra else "")
            shown["pod_status_hot"] = down["shown"]
        if claim:
            entries = wait_claim_ready(run, claim, "False")
            states = [(e.get("data") or {}).get("state") for e in entries]
            if states != ["unusable"]:
                problems.append(f"claim status data.state {states} while hot, want unusable")
            shown["claim_status_hot"] = entries
        # 2. below the limit, within the hysteresis: a scan reads it, still Unhealthy
        t1 = set_reading(hot.path, band)
        wait_for(
            f"a scan reading {band:g} °C",
            lambda: (r := _reading(device.dra_name)) is not None and abs(r - band) < 0.01,
            timeout=within + RESCAN_S,
            interval=0.1,
        )
        figures[f"{pre}band_reading_seen_s"] = round(time.monotonic() - t1, 2)
        if not view.unhealthy():
            problems.append(f"Healthy at {band:g} °C, within the hysteresis below {limit:g} °C")
        # 3. cool
        t2 = set_reading(hot.path, cool)
        wait_for("device Healthy (cool)", view.healthy, timeout=within + RESCAN_S, interval=0.1)
        t_good = time.monotonic()
        figures[f"{pre}cool_to_{GOOD[run.dra]}_s"] = round(t_good - t2, 2)
        if isinstance(view, _DevicePlugin):
            figures["cool_to_allocatable_back_s"] = round(view.node_shows(False, t2), 2)
        if pod:
            up = wait_pod_health(run, pod, "Healthy", t_good)
            figures[f"{pre}cool_to_pod_healthy_s"] = round(up["after_s"] + t_good - t2, 2)
            problems += health_problems(up, "Healthy")
            problems += _running_as_before(run, pod, before)
        if claim:
            wait_claim_ready(run, claim, "True")
        for what in (f"hot_to_{BAD[run.dra]}_s", f"cool_to_{GOOD[run.dra]}_s"):
            if figures[pre + what] > within:
                problems.append(f"{what} {figures[pre + what]}s, over a rescan ({within:g}s)")
    finally:
        tmp = hot.path.with_name(f".{hot.path.name}.e2e")
        tmp.write_text(hot.original)
        os.replace(tmp, hot.path)
    run.figures.update(figures)
    return {
        "ok": not problems,
        "problems": problems,
        "device": device.dra_name,
        "temperature": str(hot.path.relative_to(run.node.host.root)),
        "limit_c": limit,
        "readings_c": [limit + OVER_C, band, cool],
        "workload": pod,
        **figures,
        **shown,
    }
