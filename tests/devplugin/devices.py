"""Devices as the inventory hands them out, built by hand for the devplugin's unit tests (and
tests/k8s): `coral()` (a Coral USB in its runtime state at port 2-1) and `apex()` (a Coral
PCIe at 0000:02:00.0), each with keyword overrides (`present=False`, `reason=...`, ...); the
default configuration's resources they belong to (`CORAL`, `PCIE`); the node they are on
(`NODE`, also the DRA pool); `table()`, the DRA front-end's device table of them; and
`host_node()`, a device node under a test's host root with the owner and mode udev gives it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.devplugin.dra.slices import attributes
from edgefd.devplugin.dra.table import Entry
from edgefd.devplugin.resources import default_config
from edgefd.inventory.device import Device

CORAL = default_config().by_name()["edgefd.io/coral-usb"]
PCIE = default_config().by_name()["edgefd.io/coral-pcie"]
NODE = "edge-1"


def coral(node: str = "/dev/bus/usb/002/003", port: str = "2-1", **kw: Any) -> Device:
    d = Device(
        name="coral-usb-" + port.replace(".", "-"),
        key=DeviceKey("usb", port),
        model="coral-usb",
        kind="edgetpu",
        ids="18d1:9302",
        nodes=(DevNode(node, "189:130"),),
    )
    return d._replace(**kw)


def apex(**kw: Any) -> Device:
    key = DeviceKey("pci", "0000:02:00.0")
    d = Device(
        "coral-pcie-0000-02-00-0", key, "coral-pcie", "edgetpu", nodes=(DevNode("/dev/apex_0"),)
    )
    return d._replace(**kw)


def table(*pairs: tuple[Device, Any]) -> dict[str, Entry]:
    return {d.name: Entry(d, r, attributes(d)) for d, r in pairs}


def host_node(root: Path, path: str, mode: int = 0o664, gid: int = 46) -> Path:
    """A character node at `path` under the host root `root` (root:`gid`, `mode`: what the
    vendors' udev rules leave, plugdev on Debian); a test of a node's group needs a real one."""
    node = root / path.lstrip("/")
    node.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(node, stat.S_IFCHR | mode, os.makedev(189, 130))
    os.chown(node, 0, gid)
    os.chmod(node, mode)  # mknod's mode passes the umask
    return node
