"""The sample node's hardware: a host tree (``sys/`` and ``dev/`` as ``tests.fixturegen``
writes them, or a snapshot of a real host) seen by edgefd's pod, and its device nodes made real
inside the node's /dev.

The fixture generator writes ``dev/`` entries as empty regular files (it must run unprivileged);
a snapshot of a real host holds real device nodes, which must be copied as nodes, never read
(reading one gives ENXIO, or worse, the device's data). A container runtime needs character
devices, so the node's are created here the way devtmpfs does it: from each device's ``uevent``
(``MAJOR``, ``MINOR``, ``DEVNAME``), with ``mknod`` in the node's private /dev, never in the
machine's.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixturegen import HostBuilder

from .mountns import MountNamespace


@dataclass(frozen=True)
class DevNode:
    devname: str  # relative to /dev, e.g. "bus/usb/002/002"
    major: int
    minor: int
    block: bool = False

    @property
    def path(self) -> str:
        return f"/dev/{self.devname}"


def _uevent(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def device_nodes(host_root: Path, under: str = "sys/devices") -> list[DevNode]:
    """Every device node the kernel would create for the devices in ``host_root``."""
    nodes = []
    for dirpath, _, files in os.walk(host_root / under):
        if "uevent" not in files:
            continue
        ev = _uevent(Path(dirpath) / "uevent")
        if {"MAJOR", "MINOR", "DEVNAME"} <= ev.keys():
            sub = Path(dirpath) / "subsystem"
            block = sub.is_symlink() and os.path.basename(os.readlink(sub)) == "block"
            nodes.append(DevNode(ev["DEVNAME"], int(ev["MAJOR"]), int(ev["MINOR"]), block))
    return sorted(nodes, key=lambda n: n.devname)


def copy_host_tree(src: Path, dest: Path) -> Path:
    """Copy a host tree: symlinks as links (sysfs is made of them), device nodes and FIFOs as
    nodes (never opened), sockets left out, regular files with their metadata."""

    def copy_entry(s: str, d: str) -> None:
        mode = os.lstat(s).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            os.mknod(d, mode, os.lstat(s).st_rdev)
        elif stat.S_ISFIFO(mode):
            os.mkfifo(d, stat.S_IMODE(mode))
        elif stat.S_ISREG(mode):
            shutil.copy2(s, d)

    shutil.copytree(src, dest, symlinks=True, copy_function=copy_entry, dirs_exist_ok=True)
    return dest


def usb_node(host_root: Path, port: str) -> DevNode:
    """The node of the USB device at ``port`` (e.g. ``2-1``) in the host tree."""
    ev = _uevent(host_root / "sys/bus/usb/devices" / port / "uevent")
    if not {"MAJOR", "MINOR", "DEVNAME"} <= ev.keys():
        raise LookupError(f"no USB device node at port {port}")
    return DevNode(ev["DEVNAME"], int(ev["MAJOR"]), int(ev["MINOR"]))


def usb_ids(host_root: Path) -> dict[str, tuple[str, str]]:
    """USB port -> (idVendor, idProduct) of every device in the host tree."""
    out = {}
    for link in sorted((host_root / "sys/bus/usb/devices").iterdir()):
        try:
            out[link.name] = (
                (link / "idVendor").read_text().strip(),
                (link / "idProduct").read_text().strip(),
            )
        except OSError:
            continue  # an interface, not a device
    return out


# plugdev on Debian: the group the accelerators' udev rules give their nodes (the Coral
# runtime's `GROUP="plugdev"`), which a non-root workload joins (checks_nonroot.py)
PLUGDEV_GID = 46


def mknod_commands(nodes: list[DevNode]) -> str:
    """Shell commands creating ``nodes`` (0664, group plugdev: as udev leaves USB devices with
    the vendors' rules), replacing any."""
    cmds = []
    for n in nodes:
        kind = "b" if n.block else "c"
        cmds.append(
            f"mkdir -p {os.path.dirname(n.path)} && rm -f {n.path} && "
            f"mknod -m 0664 {n.path} {kind} {n.major} {n.minor} && "
            f"chgrp {PLUGDEV_GID} {n.path}"
        )
    return "\n".join(["set -e", *cmds])


def _renumber(device_dir: Path, minor: int) -> None:
    """Give the device node of the device at `device_dir` (its class device's `uevent` and
    `dev`, as a driver's reload would) the minor `minor`."""
    for dirpath, _, files in os.walk(device_dir):
        ev = _uevent(Path(dirpath) / "uevent") if "uevent" in files else {}
        if {"MAJOR", "MINOR", "DEVNAME"} <= ev.keys():
            ev["MINOR"] = str(minor)
            text = "".join(f"{k}={v}\n" for k, v in ev.items())
            (Path(dirpath) / "uevent").write_text(text)
            if "dev" in files:
                (Path(dirpath) / "dev").write_text(f"{ev['MAJOR']}:{minor}\n")


class SampleHost:
    """The host tree plus the node's /dev, kept in step: plug, unplug, re-plug."""

    def __init__(self, root: Path, ns: MountNamespace) -> None:
        self.root = Path(root)
        self.ns = ns
        self.builder = HostBuilder(self.root)
        self._unplugged: dict[str, dict[str, Any]] = {}

    def create_nodes(self) -> list[DevNode]:
        if self.ns.same_as_host():
            raise RuntimeError("refusing to mknod: not inside the node's mount namespace")
        nodes = device_nodes(self.root)
        self.ns.run(["sh", "-c", mknod_commands(nodes)])
        return nodes

    def remove_nodes(self, nodes: list[DevNode]) -> None:
        if nodes:
            self.ns.run(["rm", "-f", *(n.path for n in nodes)])

    def unplug(self, bus: str, location: str) -> DevNode:
        """Unplug the device at ``location`` (a USB port path, a PCI address or a platform
        device's name)."""
        return self.unplug_usb(location) if bus == "usb" else self.unplug_pci(location, bus)

    def plug(self, bus: str, location: str) -> DevNode:
        """Plug the device unplugged from ``location`` back in, as the kernel would bring it
        back: a USB device with the next free device number (a new node), a PCI function at
        the same address (a platform device under its name) with its driver's same node."""
        if bus == "usb":
            old = self._unplugged[location]["devnum"]
            return self.plug_usb(location, int(old) + 10)
        return self.plug_pci(location, bus)

    def unplug_usb(self, port: str) -> DevNode:
        node = usb_node(self.root, port)
        desc = self.builder.describe_usb(port)
        self.builder.remove_usb(port)
        self.remove_nodes([node])
        self._unplugged[port] = desc
        return node

    def plug_usb(self, port: str, devnum: int) -> DevNode:
        """Plug the device unplugged from ``port`` back in, with ``devnum``."""
        self.builder.add_usb({**self._unplugged.pop(port), "devnum": devnum})
        node = usb_node(self.root, port)
        self.ns.run(["sh", "-c", mknod_commands([node])])
        return node

    def next_devnum(self, port: str) -> int:
        """The device number the device unplugged from ``port`` comes back with when it
        re-enumerates: the next free one on its bus (so a new node)."""
        bus = port.split("-", 1)[0]
        used = set()
        for d in (self.root / "sys/bus/usb/devices").iterdir():
            try:
                if (d / "busnum").read_text().strip() == bus:
                    used.add(int((d / "devnum").read_text()))
            except (OSError, ValueError):
                continue
        devnum = int(self._unplugged[port]["devnum"])
        for _ in range(127):
            devnum = devnum % 127 + 1
            if devnum > 1 and devnum not in used:
                return devnum
        raise LookupError(f"no free device number on USB bus {bus}")

    def replug_usb(self, port: str, devnum: int, ids: tuple[str, str] | None = None) -> DevNode:
        """Plug the device unplugged from ``port`` back in as a re-enumeration brings it, with
        ``devnum`` and, after a firmware load, its runtime ``ids`` (vendor, product)."""
        if ids is not None:
            self._unplugged[port]["vendor"], self._unplugged[port]["product"] = ids
        return self.plug_usb(port, devnum)

    def unplug_pci(self, address: str, bus: str = "pci") -> DevNode:
        """Hot-remove a PCI function: its sysfs directory goes aside, its node away. A platform
        device (``bus`` "platform", ``address`` its name) goes the same way, with its class
        devices and their nodes (an unbind, or the unload of a driver that made the device,
        as rk3588-npu's `rknn` is `rocket`'s own)."""
        link = self.root / f"sys/bus/{bus}/devices" / address
        real = Path(os.path.realpath(link))
        (node,) = device_nodes(self.root, str(real.relative_to(self.root)))
        aside = self.root.parent / f"unplugged-{address}"
        self._unplugged[address] = {"real": real, "aside": aside, "link": os.readlink(link)}
        shutil.move(real, aside)
        link.unlink()
        self.remove_nodes([node])
        return node

    def plug_pci(self, address: str, bus: str = "pci", minor: int | None = None) -> DevNode:
        """The function back at its address after a rescan (a platform device under its name
        once its driver is back), with the same node; with `minor`, the driver (reloaded) gave
        its node that minor instead (the same path, another number)."""
        u = self._unplugged.pop(address)
        if minor is not None:
            _renumber(Path(u["aside"]), minor)
        shutil.move(u["aside"], u["real"])
        link = self.root / f"sys/bus/{bus}/devices" / address
        os.symlink(u["link"], link)
        (node,) = device_nodes(self.root, str(Path(u["real"]).relative_to(self.root)))
        self.ns.run(["sh", "-c", mknod_commands([node])])
        return node
