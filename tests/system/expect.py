"""What a host tree should give on the node, derived from the tree itself: the labels edgefd's
producers compute for it, and the devices the device plugin offers (per resource: each device's
kubelet IDs, its place on the bus, its device node, what a container gets).

Both come from the tools' own dry runs on the tree (`usb-scan --dry-run`, `devplugin --dry-run
--output json`, ...), so a tree of any shape (two Corals, a PCIe Coral and nothing on USB, a
snapshot of a real host) has its expectations without a line of the checks naming a device:
the checks then verify that the running system does what the tools say for this tree.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .hosttree import DevNode, device_nodes, usb_node

PRODUCERS = ("dt-labeller", "usb-scan", "pci-scan")
USB_BUS_DIR = "/dev/bus/usb"


def _dry_run(argv: list[str], tree: Path) -> str:
    r = subprocess.run(
        [*argv, f"--host-root={tree}", "--dry-run"], capture_output=True, text=True, timeout=60
    )
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} --dry-run on {tree}: {r.stderr.strip()}")
    return r.stdout


def producer_labels(host_tree: Path) -> dict[str, str]:
    """The labels edgefd's producers compute for the host tree, run here with ``--dry-run``:
    what the Node must end up carrying."""
    labels: dict[str, str] = {}
    for tool in PRODUCERS:
        for raw in _dry_run([tool], host_tree).splitlines():
            line = raw.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                labels[key.strip()] = value.strip() if "=" in line else "true"
    return labels


@dataclass(frozen=True)
class Device:
    """One device as the device plugin offers it."""

    resource: str  # edgefd.io/coral-usb
    kubelet_ids: tuple[str, ...]  # one per replica; what the kubelet allocates
    bus: str  # usb | pci | platform
    location: str  # the USB port path, PCI address or platform device: where a re-plug happens
    node: DevNode  # its device node on the host when the plugin offered it (see node_now)
    host_paths: tuple[str, ...]  # what the kubelet gives the runtime (the plugin's links)
    container_paths: tuple[str, ...]  # where a container that gets it sees it
    env: str  # the variable naming the allocated IDs in the container
    usb_bus_mount: bool  # whether the container gets /dev/bus/usb (read-only)
    kind: str  # edgetpu, myriadx, ...: the capability label and the DRA DeviceClass
    dra_name: str  # its name in the node's ResourceSlice (devplugin --api dra)
    model: str = ""  # its catalogue entry (coral-pcie, rockchip-npu, ...)

    @property
    def selector(self) -> dict[str, str]:
        """The node selector a user's pod for this kind of device has."""
        return {f"edgefd.io/{self.kind}.present": "true"}

    @property
    def device_class(self) -> str:
        return f"{self.kind}.edgefd.io"

    def node_now(self, host_tree: Path) -> DevNode:
        """Its device node as the host tree has it now. The checks re-plug devices (6, 7d) and
        re-enumerate them (6k), and a USB device comes back with a new node each time, so
        ``node`` goes stale; the tree is kept in step with the node's /dev (hosttree.py), so it
        is the one answer, whichever checks ran before. A PCI function comes back at its address
        with its driver's same node. A USB device unplugged at this moment has no node in the
        tree; it is given its node as offered (no check asks while one is out)."""
        if self.bus == "usb":
            with contextlib.suppress(LookupError):
                return usb_node(host_tree, self.location)
        return self.node


@dataclass(frozen=True)
class Offer:
    """Every resource the device plugin serves on the tree (those without a device too)."""

    resources: dict[str, list[Device]]

    @property
    def devices(self) -> list[Device]:
        return [d for ds in self.resources.values() for d in ds]

    def allocatable(self) -> dict[str, str]:
        """status.allocatable as the kubelet should show it: healthy kubelet IDs per resource."""
        return {r: str(sum(len(d.kubelet_ids) for d in ds)) for r, ds in self.resources.items()}

    def by_id(self, kubelet_id: str) -> Device:
        return next(d for d in self.devices if kubelet_id in d.kubelet_ids)

    def by_dra_name(self, name: str) -> Device:
        return next(d for d in self.devices if d.dra_name == name)

    def of_class(self, device_class: str) -> list[Device]:
        return [d for d in self.devices if d.device_class == device_class]

    def primary(self) -> str | None:
        """The resource the workload checks use: the first one with a device."""
        return next((r for r, ds in self.resources.items() if ds), None)

    def others(self, resource: str) -> list[str]:
        """The other resources with a device (a new pod can get one while the first runs)."""
        return [r for r, ds in self.resources.items() if ds and r != resource]


def plugin_offer(host_tree: Path, node_name: str) -> Offer:
    """`devplugin --dry-run --output json` on the tree, with each device's node from the tree
    and its kind and slice name from `devplugin --api dra --dry-run`."""
    node = f"--node-name={node_name}"
    out = json.loads(_dry_run(["devplugin", node, "--output=json"], host_tree))
    dra = json.loads(_dry_run(["devplugin", "--api=dra", node], host_tree))
    slice_devices = {}
    for d in dra["spec"].get("devices") or ():
        attrs = {k: next(iter(v.values())) for k, v in d["attributes"].items()}
        place = attrs.get("port") or attrs.get("pciAddress") or attrs.get("platformDevice")
        slice_devices[(attrs["bus"], place)] = (d["name"], attrs["kind"])
    nodes = {n.path: n for n in device_nodes(host_tree)}
    resources: dict[str, list[Device]] = {}
    for res in out["resources"]:
        resources[res["resource"]] = [
            _device(res["resource"], d, nodes, slice_devices) for d in res["devices"]
        ]
    return Offer(resources)


def _device(
    resource: str,
    d: dict[str, Any],
    nodes: dict[str, DevNode],
    slice_devices: dict[tuple[str, str], tuple[str, str]],
) -> Device:
    alloc = d["allocate"]
    (devnode, *_) = d["devnodes"]
    if devnode not in nodes:
        raise RuntimeError(f"{resource} {d['id']}: {devnode} has no uevent in the host tree")
    ((env, _),) = alloc["envs"].items()
    dra_name, kind = slice_devices[(d["bus"], d["location"])]
    return Device(
        resource=resource,
        kubelet_ids=tuple(d["kubelet_ids"]),
        bus=d["bus"],
        location=d["location"],
        node=nodes[devnode],
        host_paths=tuple(s["host_path"] for s in alloc["devices"]),
        container_paths=tuple(s["container_path"] for s in alloc["devices"]),
        env=env,
        usb_bus_mount=any(m["container_path"] == USB_BUS_DIR for m in alloc["mounts"]),
        kind=kind,
        dra_name=dra_name,
        model=d.get("model") or "",
    )


def unplugged_reason(host_tree: Path, node_name: str, device: Device) -> str:
    """While ``device`` is unplugged from the tree: why the tools still list it, present but
    unusable (a platform NPU whose driver went: its SoC block stays, without a node), or ""
    when they do not list it (absent: a USB device, a PCI function). `devplugin --dry-run`
    remembers nothing, so a device it lists is there."""
    node = f"--node-name={node_name}"
    out = json.loads(_dry_run(["devplugin", node, "--output=json"], host_tree))
    for res in out["resources"]:
        for d in res["devices"]:
            if (d["bus"], d["location"]) == (device.bus, device.location):
                return d["reason"] or d["health"]
    return ""
