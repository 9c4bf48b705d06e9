"""Finding and reading the host's devicetree under an explicit host root.

The kernel exposes the same tree twice: the blob it booted with (`/sys/firmware/fdt`, readable
only by root) and the live tree as directories (`/sys/firmware/devicetree/base`, also reachable
as `/proc/device-tree`). The blob is one read and one linear pass, so it is preferred; the
directory form is the fallback for unprivileged runs and for kernels without the blob file.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from edgefd.core.errors import BadInput
from edgefd.core.hostroot import HostRoot

from .tree import DeviceTree, MalformedTree, parse_blob, read_blob_file, read_directory

log = logging.getLogger(__name__)

FDT_BLOB = "/sys/firmware/fdt"
TREE_DIRS = ("/sys/firmware/devicetree/base", "/proc/device-tree")


def load_dtb(path: Path) -> DeviceTree:
    """Read a blob the user named; any problem with it is their input's fault (exit 3)."""
    try:
        return parse_blob(read_blob_file(path), source=os.fspath(path))
    except MalformedTree as e:
        raise BadInput(f"{path}: not a usable devicetree blob: {e}") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror or e})") from None


def _tree_dir(host: HostRoot) -> tuple[str, Path] | None:
    for host_path in TREE_DIRS:
        try:
            real = host.resolve(host_path)
        except OSError as e:
            log.warning("%s: %s; skipped", host_path, e.strerror or e)
            continue
        if real.is_dir():
            return host_path, real
    return None


def discover(host: HostRoot) -> DeviceTree | None:
    """Return the host's devicetree, or None when it has none (an x86 or ACPI machine)."""
    tree_dir = _tree_dir(host)
    blob_path = host.path(FDT_BLOB)
    if blob_path.is_file():
        try:
            return parse_blob(read_blob_file(blob_path), source=FDT_BLOB)
        except PermissionError:
            log.info("%s is not readable (it is root-only); reading the directory form", FDT_BLOB)
        except OSError as e:
            log.warning("%s: cannot read (%s)", FDT_BLOB, e.strerror or e)
        except MalformedTree as e:
            if tree_dir is None:
                raise BadInput(f"{FDT_BLOB}: not a usable devicetree blob: {e}") from None
            log.warning("%s: %s; reading %s instead", FDT_BLOB, e, tree_dir[0])
    if tree_dir is None:
        return None
    host_path, real = tree_dir
    try:
        tree = read_directory(real, source=host_path)
    except MalformedTree as e:
        raise BadInput(str(e)) from None
    for w in tree.warnings:
        log.warning("%s%s", host_path, w)
    return tree
