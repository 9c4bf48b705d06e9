"""Listing a sysfs bus: the entries of `/sys/bus/<bus>/devices`, resolved to their device
directories, and the record every bus reader returns.

A bus is plugged into the inventory and the scan engine as a `BusReader` (its name and how to
scan it), so neither imports a bus by name. Every record a reader returns has a `key` (where
it is, edgefd.bus.key) and `nodes`; the catalogue matches any of them (Catalogue.match).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from edgefd.core.errors import HostUnreadable
from edgefd.core.hostroot import HostRoot
from edgefd.core.record import Record

from .key import DevNode
from .sysfs import AttrDir, note_dir_error

D = TypeVar("D")


class ScanResult(Record, Generic[D]):
    """Devices found on one bus plus every problem met, for the caller to show."""

    devices: tuple[D, ...]
    warnings: tuple[str, ...] = ()
    bus_present: bool = True  # False: no such bus directory under the root (no such bus)


class BusReader(Record, Generic[D]):
    """How to read one bus."""

    bus: str  # "usb", "pci", "platform"
    scan: Callable[[HostRoot], ScanResult[D]]
    # a bus read only where the catalogue says (the platform bus): how to read it for another
    # catalogue than the packaged one (a scanner's --catalogue)
    scan_for: Callable[[HostRoot, Any], ScanResult[D]] | None = None

    def bound(self, catalogue: Any) -> BusReader[D]:
        """This reader, reading what `catalogue` names (itself when that changes nothing)."""
        if self.scan_for is None or catalogue is None:
            return self
        scan_for = self.scan_for
        return self._replace(scan=lambda host: scan_for(host, catalogue))


def rehost(host: HostRoot, message: str) -> str:
    """Show paths in a message as the host sees them (`/sys/...`), not under the fixture root."""
    root = str(host.root)
    if root == "/":
        return message
    return message.replace(root + "/", "/")


def host_path_of(host: HostRoot, real: str) -> str:
    """HostRoot.host_path for a path known to be under the root, without relpath's cost."""
    root = str(host.root).rstrip("/")
    if not root:
        return real
    if real.startswith(root + "/"):
        return real[len(root) :]
    return host.host_path(real)


def scandir_names(path: str, warnings: list[str]) -> set[str] | None:
    """Names in a directory, or None with a warning (broken link, loop, not a directory)."""
    try:
        return set(os.listdir(path))
    except OSError as e:
        note_dir_error(path, e, warnings)
    return None


def class_nodes(
    d: AttrDir, entries: set[str], class_dirs: tuple[str, ...], warnings: list[str]
) -> tuple[DevNode, ...]:
    """The device nodes of a device's class children (`<dev>/accel/accel0`: its uevent's
    DEVNAME, its `dev`): a node found under the device it belongs to, never by a /dev glob
    another driver's node could also match."""
    nodes = []
    for cdir in class_dirs:
        if cdir not in entries:
            continue
        children = scandir_names(d.prefix + cdir, warnings)
        for child in sorted(children or ()):
            devnode = d.devname(f"{cdir}/{child}/uevent", warnings)
            if devnode:
                nodes.append(DevNode(devnode, d.dev_number(f"{cdir}/{child}/dev", warnings)))
    return tuple(nodes)


def _require_sysfs(host: HostRoot) -> None:
    """A missing bus is normal (a board without PCI); a missing /sys/bus means sysfs is not
    there at all, and then nothing can be said about any bus."""
    sys_bus = host.path("/sys/bus")
    try:
        os.listdir(sys_bus)
    except OSError as e:
        raise HostUnreadable(
            f"cannot read {sys_bus} ({e.strerror or e}): is sysfs mounted there? "
            "(in a pod: mount the host's /sys and pass --host-root)"
        ) from None


def bus_entries(
    host: HostRoot, bus_dir: str, warnings: list[str], bus: str
) -> tuple[list[tuple[str, str]], bool]:
    """(name, real path under the root) of every entry of a sysfs bus `devices` directory, and
    whether that directory exists at all.

    The kernel makes each entry a relative symlink into `/sys/devices`; it is resolved lexically
    from its link text, which costs one `readlink` instead of an `lstat` per path component.
    Absolute targets (possible in a copied or chrooted tree) are re-rooted; a target that would
    climb out of the root falls back to HostRoot.resolve, which cannot escape.

    Two entries that lead to the same device directory are one device: a device must never be
    counted twice. Link texts can differ for one directory (one link pointing at the other, an
    absolute and a relative target), so the directory's identity (device and inode, one
    `stat`) decides, not its path; it is looked up only when some entry is not named like its
    directory, as the kernel's own entries always are. The entry named like the directory keeps
    the device (its name is the port path or address the IDs are made of); the other is
    reported and skipped. An entry that cannot be stat'ed (dangling, a loop) is kept, for the
    bus reader to report.

    Raises HostUnreadable when the directory exists but cannot be listed, or when sysfs itself
    is missing (no /sys/bus under the root).
    """
    base = host.path(bus_dir)
    root = str(host.root).rstrip("/")
    try:
        with os.scandir(base) as it:
            raw = sorted((e.name, e.path, e.is_symlink()) for e in it)
    except FileNotFoundError:
        _require_sysfs(host)
        warnings.append(f"{bus}: {bus_dir} does not exist (no {bus} bus on this host); no devices")
        return [], False
    except OSError as e:
        raise HostUnreadable(
            f"cannot list {bus_dir} under {host.root} ({e.strerror or e}): "
            f"the {bus} devices cannot be read"
        ) from None
    out: list[tuple[str, str]] = []
    for name, path, is_link in raw:
        real = path
        if is_link:
            try:
                target = os.readlink(path)
            except OSError as e:
                warnings.append(f"{bus} {name}: cannot read link ({e.strerror or e}); skipped")
                continue
            if target.startswith("/"):
                real = root + os.path.normpath(target)
            else:
                real = os.path.normpath(os.path.join(str(base), target))
            if not (real + "/").startswith(root + "/"):
                try:
                    real = str(host.resolve(f"{bus_dir}/{name}"))
                except OSError as e:
                    warnings.append(f"{bus} {name}: cannot resolve ({e.strerror or e}); skipped")
                    continue
        out.append((name, real))
    # the kernel names every entry like the directory it links to; only an entry that is not
    # can be a second name for a device, and only then is each directory's identity needed
    if all(os.path.basename(real) == name for name, real in out):
        return out, True
    return _once_each(host, out, warnings, bus), True


def _once_each(
    host: HostRoot, entries: list[tuple[str, str]], warnings: list[str], bus: str
) -> list[tuple[str, str]]:
    """`entries` with every device directory once (see bus_entries), in name order."""
    out: list[tuple[str, str]] = []
    seen: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> index in out
    for name, real in entries:
        try:
            st = os.stat(real)
        except OSError:
            out.append((name, real))  # the bus reader says what is wrong with it
            continue
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen[key] = len(out)
            out.append((name, real))
            continue
        i = seen[key]
        kept = out[i][0]
        if kept != os.path.basename(os.path.realpath(real)) == name:
            out[i], name, kept = (name, real), kept, name  # the kernel's own entry wins
        warnings.append(
            f"{bus} {name}: the same device as {kept} "
            f"({host_path_of(host, out[i][1])}); counted once"
        )
    return sorted(out)
