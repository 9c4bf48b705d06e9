"""The stable device links the kubelet is given as DeviceSpec host paths, kept pointing at each
present device's current node, and the memory of a resource's devices across plugin restarts
(`.known.json`). Why links: see allocate.py."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from typing import Any

from edgefd.bus.sysfs import dev_path

from .allocate import LinkLayout
from .devices import Device, make_id

log = logging.getLogger(__name__)

KNOWN_FILE = ".known.json"


def _device_from_json(obj: dict[str, Any]) -> Device | None:
    # a truncated or hand-edited file must not bring in a device that is never forgotten
    # (last_seen NaN or inf) or a NUMA node that is not a number (it goes into ListAndWatch)
    last_seen = obj.get("last_seen", 0.0)
    if isinstance(last_seen, bool) or not isinstance(last_seen, int | float):
        return None
    if not math.isfinite(last_seen):
        return None
    numa = obj.get("numa_node")
    if isinstance(numa, bool) or not isinstance(numa, int):
        numa = None
    # the ID becomes a directory under the links dir and each node a link target: an entry
    # that is not an ID the plugin would make, or a node outside /dev, is not ours
    dev_id, nodes = obj.get("id"), obj.get("devnodes", ())
    if not isinstance(dev_id, str) or make_id(dev_id) != dev_id or dev_id in (".", ".."):
        return None
    if not isinstance(nodes, list | tuple) or not all(
        isinstance(n, str) and dev_path(n.removeprefix("/dev/")) == n for n in nodes
    ):
        return None
    try:
        return Device(
            id=dev_id,
            bus=str(obj["bus"]),
            location=str(obj["location"]),
            devnodes=tuple(nodes),
            state=str(obj.get("state", "")),
            ids=str(obj.get("ids", "")),
            numa_node=numa,
            present=False,
            reason="not seen since the plugin started",
            last_seen=float(last_seen),
        )
    except (KeyError, TypeError, ValueError):
        return None


class LinkKeeper:
    """Keeps `<links>/<resource>/<id>/<n>` pointing at each present device's current node,
    and remembers the resource's devices across plugin restarts (`.known.json`)."""

    def __init__(self, layout: LinkLayout) -> None:
        self.layout = layout
        self._written: dict[str, Any] = {}

    def load_known(self, resource: str) -> list[Device]:
        rdir = self.layout.resource_dir(resource)
        if rdir is None:
            return []
        try:
            with open(os.path.join(rdir, KNOWN_FILE), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return []
        entries = data.get("devices") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return []
        devs = [_device_from_json(o) for o in entries if isinstance(o, dict)]
        return [d for d in devs if d is not None]

    def sync(self, resource: str, devices: tuple[Device, ...]) -> None:
        rdir = self.layout.resource_dir(resource)
        if rdir is None:
            return
        try:
            os.makedirs(rdir, exist_ok=True)
            wanted: set[str] = set()
            for d in devices:
                wanted.add(d.id)
                ddir = os.path.join(rdir, d.id)
                os.makedirs(ddir, exist_ok=True)
                for n, node in enumerate(d.devnodes):
                    link = os.path.join(ddir, str(n))
                    if d.present and not d.reason:
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
            self._save_known(resource, rdir, devices)
        except OSError as e:
            log.warning("%s: cannot maintain device links in %s: %s", resource, rdir, e)

    def _save_known(self, resource: str, rdir: str, devices: tuple[Device, ...]) -> None:
        # rewritten only when identity or location changes, not on every health flip
        body = [
            {k: v for k, v in d.to_json().items() if k not in ("health", "reason")} for d in devices
        ]
        if self._written.get(resource) == body:
            return
        for obj, d in zip(body, devices, strict=True):
            obj["last_seen"] = d.last_seen
        tmp = os.path.join(rdir, f".{KNOWN_FILE}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"resource": resource, "devices": body}, fh, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(rdir, KNOWN_FILE))
        self._written[resource] = [{k: v for k, v in o.items() if k != "last_seen"} for o in body]


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
