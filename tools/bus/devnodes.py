"""Bare /dev nodes a resource names by glob (`/dev/dri/renderD*`): the one device source that
is not a bus. Read like the buses: under an explicit host root, into DevNode records."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from edgefd.core.hostroot import HostRoot

from .key import DevNode


def glob_nodes(host: HostRoot, globs: Iterable[str]) -> tuple[DevNode, ...]:
    """Every /dev path matching one of `globs`, sorted, with its char major:minor when it is a
    character device (a fixture tree's plain files have none)."""
    globs = tuple(globs)
    if not globs:
        return ()
    import glob  # lazy: only a resource made of globs needs it

    out: dict[str, DevNode] = {}
    for g in globs:
        for path in glob.glob(str(host.path(g))):
            node = host.host_path(path)
            if node in out or not node.startswith("/dev/"):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue  # gone since the listing
            dev = None
            if stat.S_ISCHR(st.st_mode):
                dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            out[node] = DevNode(node, dev)
    return tuple(out[k] for k in sorted(out))
