"""Finding and reading the host's devicetree under an explicit host root.

The kernel exposes the same tree twice: the blob it booted with (`/sys/firmware/fdt`, readable
only by root) and the live tree as directories (`/sys/firmware/devicetree/base`, also reachable
as `/proc/device-tree`). The blob is one read and one linear pass, so it is preferred; the
directory form is the fallback for unprivileged runs and for kernels without the blob file.

"No devicetree here" and "could not read the devicetree" must never look alike, because the
first publishes an empty file and the sink then removes every devicetree label of the node:
- none of the three exists, and `/sys/firmware` (which every kernel has) can be listed: no
  devicetree (an x86 or ACPI machine), None;
- one exists but cannot be read (permission, I/O error, a directory or FIFO where the blob
  should be, a symlink loop, a devicetree directory that cannot be listed) and no other form
  can be read either: HostUnreadable (exit 3), naming each one; the caller writes nothing;
- the host root or its `/sys/firmware` is missing: HostUnreadable, since nothing can be said.
A blob that is read but malformed is BadInput when no directory form can be read instead.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from edgefd.core.errors import BadInput, EdgefdError, HostUnreadable
from edgefd.core.hostroot import HostRoot
from edgefd.core.log import get_logger

from .tree import DeviceTree, MalformedTree, parse_blob, read_blob_file, read_directory

log = get_logger(__name__)

FIRMWARE_DIR = "/sys/firmware"
FDT_BLOB = "/sys/firmware/fdt"
TREE_DIRS = ("/sys/firmware/devicetree/base", "/proc/device-tree")


def load_dtb(path: Path) -> DeviceTree:
    """Read a blob the user named; any problem with it is their input's fault (exit 3)."""
    try:
        return parse_blob(read_blob_file(path, allow_pipe=True), source=os.fspath(path))
    except MalformedTree as e:
        raise BadInput(f"{path}: not a usable devicetree blob: {e}") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror or e})") from None


class _Quiet(HostUnreadable):
    """A problem not worth a warning when another form of the tree can be read."""


def _why(e: OSError) -> str:
    return str(e.strerror or e)


def _read_fdt(host: HostRoot, problems: list[EdgefdError]) -> DeviceTree | None:
    """The blob, or None when it is absent or could not be used (then noted in `problems`)."""
    try:
        data = read_blob_file(host.path(FDT_BLOB))
    except FileNotFoundError:
        return None
    except PermissionError:
        # normal for an unprivileged run (the blob is root-only): said quietly, unless no
        # directory form can be read either
        log.info("%s is not readable (it is root-only); reading the directory form", FDT_BLOB)
        problems.append(_Quiet(f"{FDT_BLOB}: cannot read (permission denied)"))
        return None
    except OSError as e:
        problems.append(HostUnreadable(f"{FDT_BLOB}: cannot read ({_why(e)})"))
        return None
    except MalformedTree as e:
        problems.append(BadInput(f"{FDT_BLOB}: not a usable devicetree blob: {e}"))
        return None
    try:
        return parse_blob(data, source=FDT_BLOB)
    except MalformedTree as e:
        problems.append(BadInput(f"{FDT_BLOB}: not a usable devicetree blob: {e}"))
        return None


def _read_tree_dir(
    host: HostRoot, host_path: str, problems: list[EdgefdError]
) -> DeviceTree | None:
    """The directory form at `host_path`, or None when absent or unreadable (noted)."""
    try:
        real = host.resolve(host_path)
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        problems.append(HostUnreadable(f"{host_path}: cannot read ({_why(e)})"))
        return None
    if not stat.S_ISDIR(mode):
        problems.append(HostUnreadable(f"{host_path}: not a directory"))
        return None
    try:
        tree = read_directory(real, source=host_path)
    except OSError as e:
        problems.append(HostUnreadable(f"{host_path}: cannot list ({_why(e)})"))
        return None
    except MalformedTree as e:
        problems.append(BadInput(str(e)))
        return None
    for w in tree.warnings:
        log.warning("%s%s", host_path, w)
    return tree


def _require_host(host: HostRoot) -> None:
    """The host root and its /sys/firmware must be there for "no devicetree" to mean it."""
    if not host.root.is_dir():
        what = "is not a directory" if host.root.exists() else "does not exist"
        raise HostUnreadable(f"host root {host.root} {what}")
    try:
        os.listdir(host.path(FIRMWARE_DIR))
    except OSError as e:
        raise HostUnreadable(
            f"cannot read {host.path(FIRMWARE_DIR)} ({_why(e)}): is sysfs mounted there? "
            "(in a pod: mount the host's /sys and pass --host-root)"
        ) from None


def discover(host: HostRoot) -> DeviceTree | None:
    """Return the host's devicetree, or None when it has none (an x86 or ACPI machine).

    Raises HostUnreadable or BadInput when a devicetree is there but no form of it can be
    read; the message names every form tried and why it failed."""
    if not host.root.is_dir():
        _require_host(host)
    problems: list[EdgefdError] = []
    tree = _read_fdt(host, problems)
    if tree is not None:
        return tree
    for host_path in TREE_DIRS:
        tree = _read_tree_dir(host, host_path, problems)
        if tree is not None:
            loud = [str(p) for p in problems if not isinstance(p, _Quiet)]
            if loud:
                log.warning("%s; reading %s instead", "; ".join(loud), host_path)
            return tree
    if problems:
        kind = BadInput if isinstance(problems[0], BadInput) else HostUnreadable
        raise kind("; ".join(str(p) for p in problems)) from None
    _require_host(host)
    return None
