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

So each device node is given to the runtime as a *link* the plugin keeps current (links.py),
`<links-dir>/<resource>/<device name>/<n>` -> `/dev/bus/usb/001/005`. The runtime resolves
symlinks in `DeviceSpec.host_path` at each container creation (containerd does), so every
(re)created container gets the device cgroup rule and node for where the device is *now*.
The link is removed while the device is absent, so a replay then fails cleanly and the
kubelet retries, instead of granting a stranger's device node.

USB accelerators also get a read-only bind Mount of the host's `/dev/bus/usb`
(`usb_bus_mount`, on by default) and their node at their container path
(edgefd.inventory.naming); why is in container.py. Read-only does not stop opening a device
node for writing; it stops mknod/unlink on the host's /dev.

What the device plugin cannot do, and who does:

- The device cgroup of a running container is fixed when it is created. A Coral that
  re-enumerates *inside* a running container (libedgetpu uploads the firmware on first use;
  the device comes back as 18d1:9302 with a new devnum, so a new minor number) is not in
  the container's allow-list: opening the new node fails with EPERM, although the bind
  mount shows it. Allocate is not called again and the Device Plugin API has no
  device-cgroup-rule or "major:*" grant, so the plugin cannot follow the device there:
  device-keeper does (it extends the running container's device cgroup and makes its
  container path name the new node). Without it, the container's next creation (a restart)
  replays the response, resolves the link to the node there now and works.
- Granting the whole bus in advance is impossible with DeviceSpecs (one per existing node)
  and would expose every other USB device on the bus.
- A bind mount (read-only or not) grants no device access: visibility only.

PCI and plain /dev devices get DeviceSpecs with the node's own name in the container
(`/dev/apex_0`, what libedgetpu opens) and the link as host path.

Environment: `<EDGEFD_RESOURCE>_DEVICES` lists the allocated device names (comma-separated,
physical devices once each even when shared), plus the resource's configured env. With a
CDI prefix, CDI device names `<vendor>/<class>=<device name>` are added. With a CDI spec
directory (`LinkLayout.cdi_spec_dir`) the plugin writes those specs itself (cdi.py, kept
current like the links) and the answer is the CDI names and the env only: nodes and mounts
come from the spec, one source for both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from edgefd.devplugin.resources import Resource
from edgefd.inventory.device import Device

from ..api import deviceplugin_pb2 as pb
from ..cdi import DEFAULT_VENDOR, cdi_name
from ..container import USB_DEV_DIR, env
from ..links import LinkLayout

log = logging.getLogger(__name__)


class UnknownDevice(Exception):
    """Allocate named IDs this plugin never advertised for the resource."""


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
        out.setdefault(d.name, d)
    return list(out.values())


def container_response(
    res: Resource,
    devices: Iterable[Device],
    links: LinkLayout,
    cdi_prefix: str | None = None,
    cdi_written: Callable[[str], bool] | None = None,
) -> pb.ContainerAllocateResponse:
    """The answer for one container holding `devices` (distinct physical devices).

    With the plugin's own CDI specs, CDI names only if `cdi_written` says every one of them is
    in a spec on disk now: a name without a spec fails the container's creation for good (the
    kubelet replays the answer), so then the whole answer is device specs and mounts, as
    without --cdi-spec-dir (not a mix: a spec's mounts and the answer's would both apply)."""
    devs = list(devices)
    resp = pb.ContainerAllocateResponse()
    cdi_names = []
    if links.cdi_spec_dir:
        prefix = cdi_prefix or DEFAULT_VENDOR
        cdi_names = [cdi_name(prefix, res, d.name) for d in devs]
        missing = [n for n in cdi_names if cdi_written is None or not cdi_written(n)]
        if missing:
            log.warning(
                "Allocate %s: no CDI spec written for %s; answering with device specs",
                res.name,
                ", ".join(missing),
            )
            cdi_names, cdi_prefix = [], None
    if cdi_names:
        # the plugin's own CDI specs carry the nodes and mounts (cdi.py)
        resp.cdi_devices.extend(pb.CDIDevice(name=n) for n in cdi_names)
    else:
        _device_specs(resp, res, devs, links, None if links.cdi_spec_dir else cdi_prefix)
    resp.envs.update(env((d, res) for d in devs))
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
        usb_mount = usb_mount or (res.bus_mount(d) and bool(d.devnodes))
        for n, node in enumerate(d.devnodes):
            host = links.link(res.name, d.name, n) or node
            resp.devices.append(
                pb.DeviceSpec(
                    container_path=res.container_path(d, n, node),
                    host_path=host,
                    permissions="rw",
                )
            )
        if cdi_prefix:
            resp.cdi_devices.append(pb.CDIDevice(name=cdi_name(cdi_prefix, res, d.name)))
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
            load[dev.name] = load.get(dev.name, 0) + 1
    for kid in chosen:
        dev = by_kubelet_id.get(kid)
        if dev is not None and kid in avail_set:
            load[dev.name] = load.get(dev.name, 0) + 1

    def dev_of(kid: str) -> str:
        d = by_kubelet_id.get(kid)
        return d.name if d is not None else kid

    avail.sort(key=lambda kid: (dev_of(kid), kid))
    while len(chosen) < size and avail:
        best = min(avail, key=lambda kid: (load.get(dev_of(kid), 0), dev_of(kid), kid))
        avail.remove(best)
        chosen.append(best)
        load[dev_of(best)] = load.get(dev_of(best), 0) + 1
    return chosen
