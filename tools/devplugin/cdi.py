"""CDI specs: how a container gets a device when the runtime resolves CDI names, for both APIs
(a DRA claim's devices; the device plugin's with --cdi-spec-dir). Files are written atomically
and only when their content changes, in the directory containerd and CRI-O read
(`/var/run/cdi`; they reload a spec when its file changes).

Why the spec names the device's current node, not the stable link: the CDI library the
runtimes use (tags.cncf.io/container-device-interface, pkg/cdi container-edits_unix.go)
`lstat`s `hostPath` and refuses anything but a device node, so a link (which containerd's CRI
resolves for a device plugin's DeviceSpec) cannot be used. The plugin instead rewrites the
spec when a device's node changes (a re-plug, a Coral's re-enumeration): every container
created afterwards gets the node the device has *now*, as the link gives the device plugin.
While a device is absent, `hostPath` is its link, which is removed then: creating a container
fails cleanly (and is retried) instead of granting whatever node took the old number.

What a container gets is what Allocate gives it (container.py): a USB device's node at
`/dev/edgefd/<name>` plus a read-only bind of the host's `/dev/bus/usb` (libusb opens the
device by its bus path), a PCI device's node under its own name, the resource's env and
mounts, and `EDGEFD_<RESOURCE>_DEVICES`; a DRA claim's device also its request's device
metadata file, read-only (dra/metadata.py; a mount with its `type` needs CDI 0.4.0, below
the 0.5.0 every claim spec declares).

Non-root workloads, without a runtime setting: the CDI library makes a node it creates the
container user's (pkg/cdi container-edits.go `Apply`: a device node without `uid`/`gid` gets
the process's, when not 0), but `/dev/bus/usb`, which libusb opens, is the host's directory
bound read-only: its nodes keep the host's owner, group and mode. So each device's edits carry
`additionalGids`, the group of its node on the host (plugdev, by the vendors' udev rules), and
the container's process joins it with no `supplementalGroups` in the pod (`node_group` says
when a group is given). That field is CDI 0.7.0's.

The version: a spec declares the lowest one its content needs (`spec_version`). The CDI library
refuses a spec whose version is below what its fields need (specs-go version.go `requiresV0x0`)
and one whose version it does not know, and each runtime vendors the library of its day:
containerd 1.7.0-1.7.11 know up to 0.5.0, 1.7.12-1.7.15 up to 0.6.0, 1.7.16 and later and 2.x
0.7.0 and later. So a spec with a group is 0.7.0, and one without is what the oldest runtime
can read: 0.5.0 (`deviceNodes.hostPath`, a device name starting with a digit: a claim UID), or
0.6.0 for a class with a dot (a configured resource's short name).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from edgefd.core.errors import OutputError
from edgefd.core.publish import write_atomic
from edgefd.devplugin.resources import Resource
from edgefd.inventory.device import Device
from edgefd.inventory.naming import DOMAIN, qualified

from .container import USB_DEV_DIR
from .container import env as container_env
from .links import LinkLayout

log = logging.getLogger(__name__)

CDI_VERSION = "0.5.0"  # deviceNodes.hostPath (and mounts' type, 0.4.0)
DOTTED_CLASS_VERSION = "0.6.0"  # a dot in the kind's class
GIDS_VERSION = "0.7.0"  # the first with containerEdits.additionalGids
GROUP_RW = stat.S_IRGRP | stat.S_IWGRP  # what the group must be allowed: the nodes' "rw"
VENDOR = DOMAIN  # the CDI vendor
DEFAULT_VENDOR = VENDOR  # the device plugin's CDI names without --cdi-prefix
CLAIM_KIND = qualified("claim")
CLAIM_SPEC_INFIX = "claim_"
MAX_SPEC_BYTES = 4 << 20  # what is read back of a spec file (its kind); nothing of ours is near
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def cdi_kind(cdi_prefix: str, res: Resource) -> str:
    """`vendor/class`; a prefix without `/` gets the resource's short name as class."""
    return cdi_prefix if "/" in cdi_prefix else f"{cdi_prefix}/{res.short_name}"


def cdi_name(cdi_prefix: str, res: Resource, device: str) -> str:
    """`vendor/class=name`: the fully qualified CDI device name of one device."""
    return f"{cdi_kind(cdi_prefix, res)}={device}"


def _bind(host: str, container: str, read_only: bool) -> dict[str, Any]:
    options = ["bind", "ro" if read_only else "rw", "nosuid"]
    return {"hostPath": host, "containerPath": container, "type": "bind", "options": options}


def node_group(path: str | os.PathLike[str]) -> int | None:
    """The group a container may join to open this device node read-write, as the host has it.

    Only a group whose permission bits give read and write (the access the spec grants, "rw")
    is given: joining one that cannot open the node adds nothing for the device and would
    hand the container whatever else that group may reach. Never 0: root's group is no
    device's group to share (and the CDI library drops a 0 anyway). None also for a path
    that is not a device node now (absent, replaced)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        return None
    if st.st_gid == 0 or st.st_mode & GROUP_RW != GROUP_RW:
        return None
    return st.st_gid


def container_edits(
    dev: Device, res: Resource, links: LinkLayout, files: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """Device nodes, mounts and the nodes' groups for one device (env is per container: see
    `env`). An absent device has no group: its node is gone, and its link with it. `files`:
    (host, container) paths of files bound read-only with it (a DRA claim's device metadata;
    two devices binding one file are one mount: the CDI library replaces a mount of the same
    container path, pkg/cdi container-edits.go `Apply`)."""
    nodes, gids = [], set()
    for n, node in enumerate(dev.devnodes):
        host = node if dev.healthy else links.link(res.name, dev.name, n) or node
        path = res.container_path(dev, n, node)
        nodes.append({"path": path, "hostPath": host, "permissions": "rw"})
        if dev.healthy:
            gid = node_group(links.host.path(node) if links.host else node)
            if gid is not None:
                gids.add(gid)
    usb_mount = res.bus_mount(dev) and bool(nodes)
    mounts = [_bind(USB_DEV_DIR, USB_DEV_DIR, True)] if usb_mount else []
    mounts += [_bind(m.host_path, m.container_path, m.read_only) for m in res.mounts]
    mounts += [_bind(host, inside, True) for host, inside in files]
    edits: dict[str, Any] = {"deviceNodes": nodes}
    if mounts:
        edits["mounts"] = mounts
    if gids:
        edits["additionalGids"] = sorted(gids)
    return edits


def env(devices: Iterable[tuple[Device, Resource]]) -> list[str]:
    """The containers' environment (container.env), as CDI's `K=V` list."""
    return [f"{k}={v}" for k, v in sorted(container_env(devices).items())]


def spec_version(kind: str, devices: Sequence[dict[str, Any]]) -> str:
    """The lowest version a spec of these devices needs (see the module's docstring)."""
    if any(d.get("containerEdits", {}).get("additionalGids") for d in devices):
        return GIDS_VERSION
    return DOTTED_CLASS_VERSION if "." in kind.partition("/")[2] else CDI_VERSION


def spec(kind: str, devices: Sequence[dict[str, Any]], env_vars: Sequence[str] = ()) -> dict:
    doc: dict[str, Any] = {"cdiVersion": spec_version(kind, devices), "kind": kind}
    doc["devices"] = list(devices)
    if env_vars:
        doc["containerEdits"] = {"env": list(env_vars)}
    return doc


def claim_device_name(claim_uid: str, device: str) -> str:
    """One claim's copy of a device: unique across the claim specs of the kind."""
    return f"{claim_uid}-{device}"


def qualified(kind: str, name: str) -> str:
    return f"{kind}={name}"


def spec_path(directory: str | os.PathLike[str], kind: str, suffix: str) -> Path:
    """`<dir>/edgefd.io-<suffix>.json`: the vendor first, as the CDI spec recommends."""
    vendor = kind.partition("/")[0]
    return Path(directory) / f"{vendor}-{_UNSAFE.sub('_', suffix)}.json"


def claim_spec_path(directory: str | os.PathLike[str], uid: str) -> Path:
    """`<dir>/edgefd.io-claim_<UID>.json`, CDI's name for a transient spec (vendor-class, `_`,
    the transient ID), for a claim UID already checked by the caller. The device plugin's
    `<vendor>-<class>.json` in the same directory (`--api both`) cannot take this name: its
    class would have to be `claim_<UID>`, which ResourceSpecs refuses (`is_claim_spec`)."""
    return Path(directory) / f"{VENDOR}-{CLAIM_SPEC_INFIX}{uid}.json"


def is_claim_spec(path: Path) -> bool:
    """Whether a file name is the kind a DRA claim's spec has (present or future)."""
    return path.name.startswith(f"{VENDOR}-{CLAIM_SPEC_INFIX}")


def render(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def write(path: Path, doc: dict[str, Any]) -> bool:
    """Write atomically; False when the file already says exactly this."""
    try:
        return write_atomic(path, render(doc))
    except OSError as e:
        raise OutputError(f"cannot write CDI spec {path}: {e.strerror or e}") from None


def remove(path: Path) -> bool:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return True
    return False


def device_entry(
    name: str,
    dev: Device,
    res: Resource,
    links: LinkLayout,
    files: Sequence[tuple[str, str]] = (),
) -> dict | None:
    """One CDI device; None for a device that has no node to give (nothing to edit: the CDI
    library refuses a device without edits, and there is nothing to grant)."""
    if not dev.devnodes:
        return None
    return {"name": name, "containerEdits": container_edits(dev, res, links, files)}


class ResourceSpecs:
    """The device plugin's CDI specs (--cdi-spec-dir): one file per CDI kind
    (`edgefd.io/coral-usb` -> `edgefd.io-coral-usb.json`), devices under their names, kept
    current on every snapshot. Files of kinds that are gone are removed.

    One kind's file that cannot be written (a symlink or FIFO in its place, a kind whose file
    would be a DRA claim's) costs that kind only: one warning when it starts failing (not on
    every scan), the other kinds are still written, and `written()` tells Allocate which CDI
    names have a spec on disk, so it never answers with a name the runtime cannot resolve.
    What is in the way is not ours: it is neither replaced nor removed."""

    def __init__(self, directory: str, prefix: str, links: LinkLayout) -> None:
        self.directory = directory
        self.prefix = prefix
        self.links = links
        self._files: set[Path] = set()  # the files this process wrote
        self._problems: dict[Path, str] = {}  # files that cannot be written now, and why
        self._ready: dict[str, frozenset[str]] = {}  # kind -> device names in its file

    def written(self, name: str) -> bool:
        """Whether a qualified CDI name (`vendor/class=device`) is in a spec on disk."""
        kind, _, device = name.partition("=")
        return device in self._ready.get(kind, ())

    def sync(self, resources: Iterable[tuple[Resource, tuple[Device, ...]]]) -> list[Path]:
        """Write what changed; return the files written."""
        by_kind: dict[str, dict[str, dict[str, Any]]] = {}
        for res, devices in resources:
            entries = by_kind.setdefault(cdi_kind(self.prefix, res), {})
            for d in devices:
                entry = device_entry(d.name, d, res, self.links)
                if entry is not None:
                    entries.setdefault(d.name, entry)  # one name, one device: first resource wins
        written = []
        files, wanted, ready = set(), set(), {}
        for kind, entries in sorted(by_kind.items()):
            if not entries:  # the CDI library refuses a spec without devices
                continue
            path = spec_path(self.directory, kind, kind.partition("/")[2])
            wanted.add(path)
            try:
                if is_claim_spec(path):
                    raise OutputError(f"{path}: the name of a DRA claim's spec; not written")
                if write(path, spec(kind, [entries[k] for k in sorted(entries)])):
                    written.append(path)
            except OutputError as e:
                self._problem(path, f"{kind}: {e}; its devices get device specs instead")
                continue
            if self._problems.pop(path, None) is not None:
                log.warning("%s: written again", path)
            files.add(path)
            ready[kind] = frozenset(entries)
        self._ready = ready
        for stale in self._files - wanted:
            remove(stale)
        for gone in set(self._problems) - wanted:
            del self._problems[gone]
        self._files = files
        return written

    def _problem(self, path: Path, why: str) -> None:
        if self._problems.get(path) != why:
            log.warning("%s", why)
        self._problems[path] = why
