"""The running kernel's page size, as a label: `edgefd.io/kernel.page-size=4096`.

Coral PCIe's driver (gasket/apex) maps its device's page tables in 4 KiB pages and needs a
kernel whose pages are 4 KiB; the Raspberry Pi 5's default kernel uses 16 KiB pages
(raspberrypi/linux arch/arm64/configs/bcm2712_defconfig: CONFIG_ARM64_16K_PAGES=y). A pod
that needs one selects the label.

One producer owns it: pci-scan. A kernel fact is no bus's, but two files holding one label
disagree as soon as one is stale; pci-scan is on every node (bus-scan runs `usb-scan --also
pci-scan`), on x86 as on ARM, where dt-labeller says nothing on a machine without a
devicetree; and the drivers that care about the page size are PCIe ones.

The number must be the host kernel's, never this process's guess about a tree that only looks
like a host:
- the tree's `/proc/self/smaps`, when it has one: the first mapping's `KernelPageSize`, "the
  size of page used by the kernel to back a VMA" (the linux-mm patch that added it, 2008;
  Documentation/filesystems/proc.rst lists it), the base page size for any mapping not on
  hugetlbfs, which a process's first one, its executable, never is. A fixture tree states its
  kernel's page size so; the host root `/` reads the live value.
- else, when the tree's `/sys` is a live sysfs (the host root `/`, or a pod's `/host/sys`, the
  host's /sys mounted there): sysfs is the running kernel's, and a container runs on its
  host's kernel, so this process's page size (sysconf) is the host's.
- else (a copied or generated tree that says nothing): no label.
"""

from __future__ import annotations

import os
import re

from edgefd.core.hostroot import HostRoot
from edgefd.inventory.naming import qualified

LABEL = qualified("kernel.page-size")
SMAPS = "/proc/self/smaps"
MAX_READ = 64 * 1024  # the first mapping is in the first few hundred bytes
_KERNEL_PAGE = re.compile(rb"^KernelPageSize:\s+(\d{1,9}) kB$", re.MULTILINE)


def _from_smaps(host: HostRoot) -> int | None:
    try:
        fd = os.open(host.path(SMAPS), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_READ)
    except OSError:
        return None
    finally:
        os.close(fd)
    m = _KERNEL_PAGE.search(data)
    return int(m.group(1)) * 1024 if m else None


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The filesystem type of the mount `path` (a resolved path) is on, or None."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best, found = -1, None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split(" ")
        if not sep or len(fields) < 5:
            continue
        point = _unescape(fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # the last of stacked mounts is the one seen
            best, found = len(point), right.split(" ", 1)[0]
    return found


def page_size(host: HostRoot) -> int | None:
    """The host kernel's page size in bytes, or None when the tree cannot say it."""
    size = _from_smaps(host)
    if size is None and fs_type(os.path.realpath(host.path("/sys"))) == "sysfs":
        size = os.sysconf("SC_PAGE_SIZE")
    if size is None or size < 1024 or size & (size - 1):
        return None
    return size


def host_labels(host: HostRoot) -> dict[str, str]:
    size = page_size(host)
    return {} if size is None else {LABEL: str(size)}
