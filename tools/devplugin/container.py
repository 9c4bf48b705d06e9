"""What a container gets for a device, whichever API hands it out, beyond its nodes (their
paths are the resource's: edgefd.devplugin.resources): the read-only view of the host's USB
bus and the environment. The device plugin's Allocate answer (v1beta1/allocate.py) and the CDI
specs (cdi.py) both say this.

USB accelerators: libusb finds a device by walking sysfs and opening `/dev/bus/usb/BBB/DDD`
by its current name, so the container gets a read-only bind of the host's `/dev/bus/usb` (a
live view in which the current name always exists) and the granted node goes to the device's
container path (naming.container_path; creating it inside the bind mount would mknod on the
host). PCI and bare /dev devices keep their node's own name.
"""

from __future__ import annotations

from collections.abc import Iterable

from edgefd.devplugin.resources import Resource
from edgefd.inventory.device import Device

USB_DEV_DIR = "/dev/bus/usb"


def env(devices: Iterable[tuple[Device, Resource]]) -> dict[str, str]:
    """Each resource's env, plus `EDGEFD_<RESOURCE>_DEVICES`: its devices' names, each once."""
    names: dict[str, list[str]] = {}
    out: dict[str, str] = {}
    for dev, res in devices:
        listed = names.setdefault(res.env_prefix, [])
        if dev.name not in listed:
            listed.append(dev.name)
        out.update(res.env)
    out.update({f"{prefix}_DEVICES": ",".join(v) for prefix, v in names.items()})
    return out
