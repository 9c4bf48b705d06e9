"""What the resources might match, read once per scan through the bus layer: USB and PCI device
records and the /dev nodes the resources' globs name. The device plugin shares the scanners'
readers (edgefd.bus), never a scanner."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass

from edgefd.bus import pci, usb
from edgefd.core.hostroot import HostRoot


@dataclass(frozen=True)
class Snapshot:
    usb: tuple[usb.UsbDevice, ...] = ()
    pci: tuple[pci.PciDevice, ...] = ()
    dev_nodes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def scan_host(host: HostRoot, globs: tuple[str, ...]) -> Snapshot:
    """Everything the resources might match. HostUnreadable when a bus cannot be listed: the
    caller keeps its last known devices rather than reporting them all gone."""
    u = usb.scan(host)
    p = pci.scan(host)
    nodes: set[str] = set()
    for g in globs:
        for path in glob.glob(str(host.path(g))):
            nodes.add(host.host_path(path))
    return Snapshot(
        usb=u.devices,
        pci=p.devices,
        dev_nodes=tuple(sorted(nodes)),
        warnings=u.warnings + p.warnings,
    )


def host_exists(host: HostRoot) -> Callable[[str], bool]:
    return lambda path: os.path.exists(host.path(path))
