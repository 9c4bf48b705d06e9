"""The stable device links both front-ends hand out: `<links-dir>/<resource>/<name>/<n>`, kept
pointing at each usable device's current node, removed while it cannot be used. The kubelet
is given the link as a DeviceSpec host path and the runtime resolves it at each container
creation, so a replayed Allocate answer follows the device (why: v1beta1/allocate.py); a
DRA claim's CDI spec names the link while its device is away (cdi.py)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass

from edgefd.core.hostroot import HostRoot
from edgefd.inventory.device import Device

log = logging.getLogger(__name__)

STATE_FILE = "devices.json"  # the inventory's memory, beside the links (no resource is named so)


@dataclass(frozen=True)
class LinkLayout:
    """Where the stable links live, as host paths; None directory = use the nodes directly.
    With `cdi_spec_dir`, devices are handed over as CDI names whose specs the plugin writes.
    `host` is where the host's device nodes are seen from here (the pod's /host): a CDI spec
    gives a node's group to the container (cdi.py), which only the node's own stat says."""

    directory: str | None
    cdi_spec_dir: str | None = None
    host: HostRoot | None = None  # None: this process sees the host's /dev at /dev

    def resource_dir(self, resource: str) -> str | None:
        if self.directory is None:
            return None
        return os.path.join(self.directory, resource.replace("/", "_"))

    def link(self, resource: str, device: str, index: int) -> str | None:
        rdir = self.resource_dir(resource)
        return None if rdir is None else os.path.join(rdir, device, str(index))

    @property
    def state_file(self) -> str | None:
        """Where the inventory remembers devices across restarts (None without links)."""
        return None if self.directory is None else os.path.join(self.directory, STATE_FILE)


class LinkKeeper:
    """Keeps each resource's links equal to its devices (a subscriber of the inventory)."""

    def __init__(self, layout: LinkLayout) -> None:
        self.layout = layout

    def sync(self, resource: str, devices: Iterable[Device]) -> None:
        rdir = self.layout.resource_dir(resource)
        if rdir is None:
            return
        try:
            os.makedirs(rdir, exist_ok=True)
            wanted: set[str] = set()
            for d in devices:
                wanted.add(d.name)
                ddir = os.path.join(rdir, d.name)
                os.makedirs(ddir, exist_ok=True)
                for n, node in enumerate(d.devnodes):
                    link = os.path.join(ddir, str(n))
                    if d.healthy:
                        _point(link, node)
                    else:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(link)
            for entry in os.listdir(rdir):
                full = os.path.join(rdir, entry)
                if entry not in wanted and os.path.isdir(full) and not os.path.islink(full):
                    for f in os.listdir(full):
                        with contextlib.suppress(OSError):
                            os.unlink(os.path.join(full, f))
                    with contextlib.suppress(OSError):
                        os.rmdir(full)
        except OSError as e:
            log.warning("%s: cannot maintain device links in %s: %s", resource, rdir, e)


def _point(link: str, target: str) -> None:
    """Make `link` a symlink to `target`, atomically (a reader never sees it missing)."""
    try:
        if os.readlink(link) == target:
            return
    except OSError:
        pass
    tmp = f"{link}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
