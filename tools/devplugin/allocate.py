"""What a container gets for the devices the kubelet picked: the Allocate answer, and the
preferred allocation. Pure functions of the devices, the resource and the link layout.

Why the device nodes are reached through links
----------------------------------------------
The kubelet checkpoints the ContainerAllocateResponse and replays it, unchanged, whenever the
container is created again: on a container restart, and for pods re-admitted after a kubelet
restart or a node reboot. A DeviceSpec naming `/dev/bus/usb/001/004` is therefore a time
bomb for a USB accelerator: the devnum changes on every re-plug, on every reboot, and when a
Coral or NCS2 re-enumerates after its firmware upload; the replayed path then names nothing
(container creation fails) or, worse, another device that took the number.

So each device node is given to the runtime as a *link* the plugin keeps current,
`<links-dir>/<resource>/<device ID>/<n>` -> `/dev/bus/usb/001/005`. The runtime resolves
symlinks in `DeviceSpec.host_path` at each container creation (containerd does), so every
(re)created container gets the device cgroup rule and node for where the device is *now*.
The link is removed while the device is absent, so a replay then fails cleanly and the
kubelet retries, instead of granting a stranger's device node.

USB accelerators: libusb finds a device by walking sysfs and opening
`/dev/bus/usb/BBB/DDD` by its current name, so the container also gets a read-only bind
Mount of the host's `/dev/bus/usb` (`usb_bus_mount`, on by default): a live view in which
the current name always exists. The DeviceSpec's node goes to `/dev/edgefd/<device ID>`
instead (creating it inside the bind mount would mknod on the host). Read-only does not stop
opening a device node for writing; it stops mknod/unlink on the host's /dev.

What no runtime can do, and what that means:

- The device cgroup of a running container is fixed when it is created. A Coral that
  re-enumerates *inside* a running container (libedgetpu uploads the firmware on first use;
  the device comes back as 18d1:9302 with a new devnum, so a new minor number) is not in
  the container's allow-list: opening the new node fails with EPERM, although the bind
  mount shows it. The plugin cannot fix this after the fact (Allocate is not called again;
  the Device Plugin API has no device-cgroup-rule or "major:*" grant, and a DeviceSpec
  needs an existing host node). The container must be created again: on its restart the
  replayed response resolves the link to the runtime-state node and works. Workloads that
  cannot tolerate one restart should load the firmware before the pod starts, or run the
  container privileged.
- Granting the whole bus in advance is impossible with DeviceSpecs (one per existing node)
  and would expose every other USB device on the bus.
- A bind mount (read-only or not) grants no device access: visibility only.

PCI and plain /dev devices get DeviceSpecs with the node's own name in the container
(`/dev/apex_0`, what libedgetpu opens) and the link as host path.

Environment: `<EDGEFD_RESOURCE>_DEVICES` lists the allocated device IDs (comma-separated,
physical devices once each even when shared), plus the resource's configured env. With a
CDI prefix, CDI device names `<vendor>/<class>=<device ID>` are added. With a CDI spec
directory (`LinkLayout.cdi_spec_dir`) the plugin writes those specs itself (dra/cdi.py, kept
current like the links) and the answer is the CDI names and the env only: nodes and mounts
come from the spec, one source for both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .api import deviceplugin_pb2 as pb
from .config import Resource
from .devices import Device

USB_DEV_DIR = "/dev/bus/usb"
CONTAINER_ALIAS_DIR = "/dev/edgefd"


class UnknownDevice(Exception):
    """Allocate named IDs this plugin never advertised for the resource."""


@dataclass(frozen=True)
class LinkLayout:
    """Where the stable links live, as host paths; None directory = use the nodes directly.
    With `cdi_spec_dir`, devices are handed over as CDI names whose specs the plugin writes."""

    directory: str | None
    cdi_spec_dir: str | None = None

    def resource_dir(self, resource: str) -> str | None:
        if self.directory is None:
            return None
        return os.path.join(self.directory, resource.replace("/", "_"))

    def link(self, resource: str, device_id: str, index: int) -> str | None:
        rdir = self.resource_dir(resource)
        return None if rdir is None else os.path.join(rdir, device_id, str(index))


def resolve(ids: Sequence[str], by_kubelet_id: Mapping[str, Device]) -> list[Device]:
    """The distinct devices behind kubelet IDs (replicas fold into their device), in order."""
    unknown = [i for i in ids if i not in by_kubelet_id]
    if unknown:
        known = sorted(by_kubelet_id)
        shown = ", ".join(known[:8]) + (" ..." if len(known) > 8 else "") if known else "none"
        raise UnknownDevice(
            f"unknown device ID(s) {', '.join(unknown)}: this plugin advertises {shown}"
        )
    out: dict[str, Device] = {}
    for i in ids:
        d = by_kubelet_id[i]
        out.setdefault(d.id, d)
    return list(out.values())


DEFAULT_CDI_VENDOR = "edgefd.io"


def cdi_kind(cdi_prefix: str, res: Resource) -> str:
    """`vendor/class`; a prefix without `/` gets the resource's short name as class."""
    return cdi_prefix if "/" in cdi_prefix else f"{cdi_prefix}/{res.short_name}"


def cdi_name(cdi_prefix: str, res: Resource, device_id: str) -> str:
    """`vendor/class=name`: the fully qualified CDI device name of one device."""
    return f"{cdi_kind(cdi_prefix, res)}={device_id}"


def container_response(
    res: Resource,
    devices: Iterable[Device],
    links: LinkLayout,
    cdi_prefix: str | None = None,
) -> pb.ContainerAllocateResponse:
    """The answer for one container holding `devices` (distinct physical devices)."""
    devs = list(devices)
    resp = pb.ContainerAllocateResponse()
    if links.cdi_spec_dir:
        # the plugin's own CDI specs carry the nodes and mounts (dra/cdi.py)
        prefix = cdi_prefix or DEFAULT_CDI_VENDOR
        resp.cdi_devices.extend(pb.CDIDevice(name=cdi_name(prefix, res, d.id)) for d in devs)
    else:
        _device_specs(resp, res, devs, links, cdi_prefix)
    for k, v in res.env:
        resp.envs[k] = v
    resp.envs[f"{res.env_prefix}_DEVICES"] = ",".join(d.id for d in devs)
    return resp


def _device_specs(
    resp: pb.ContainerAllocateResponse,
    res: Resource,
    devs: list[Device],
    links: LinkLayout,
    cdi_prefix: str | None,
) -> None:
    usb_mount = False
    for d in devs:
        for n, node in enumerate(d.devnodes):
            host = links.link(res.name, d.id, n) or node
            if d.bus == "usb" and res.usb_bus_mount:
                usb_mount = True
                suffix = "" if n == 0 else f".{n}"
                container = f"{CONTAINER_ALIAS_DIR}/{d.id}{suffix}"
            else:
                container = node
            resp.devices.append(
                pb.DeviceSpec(container_path=container, host_path=host, permissions="rw")
            )
        if cdi_prefix:
            resp.cdi_devices.append(pb.CDIDevice(name=cdi_name(cdi_prefix, res, d.id)))
    if usb_mount:
        resp.mounts.append(
            pb.Mount(container_path=USB_DEV_DIR, host_path=USB_DEV_DIR, read_only=True)
        )
    for m in res.mounts:
        resp.mounts.append(
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
        )


def preferred(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    by_kubelet_id: Mapping[str, Device],
) -> list[str]:
    """Pick `size` IDs from `available` (keeping `must_include`), spreading over devices.

    With shared devices every replica is a separate ID; two containers asking for one each
    should land on two accelerators while there are idle ones. Replicas missing from
    `available` are in use elsewhere, so a device's load counts them too; the least-loaded
    device is picked next (ties: the lowest ID, for determinism).
    """
    chosen = [i for i in dict.fromkeys(must_include) if i in available or i in by_kubelet_id]
    avail = [i for i in dict.fromkeys(available) if i not in chosen]
    avail_set = set(available)
    load: dict[str, int] = {}
    for kid, dev in by_kubelet_id.items():
        if kid not in avail_set:
            load[dev.id] = load.get(dev.id, 0) + 1
    for kid in chosen:
        dev = by_kubelet_id.get(kid)
        if dev is not None and kid in avail_set:
            load[dev.id] = load.get(dev.id, 0) + 1

    def dev_of(kid: str) -> str:
        d = by_kubelet_id.get(kid)
        return d.id if d is not None else kid

    avail.sort(key=lambda kid: (dev_of(kid), kid))
    while len(chosen) < size and avail:
        best = min(avail, key=lambda kid: (load.get(dev_of(kid), 0), dev_of(kid), kid))
        avail.remove(best)
        chosen.append(best)
        load[dev_of(best)] = load.get(dev_of(best), 0) + 1
    return chosen
