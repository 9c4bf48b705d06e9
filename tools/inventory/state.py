"""The devices one process remembers, on disk: one JSON file per process, so that after a
restart (a rolling update, a reboot) a device that is late or gone is still known, absent,
under its name, for as long as `forget_after` says.

The file is the process's own, but it lives on the host and a hostile or broken one must cost
nothing: it is read without following a symlink or blocking on a FIFO, at most MAX_BYTES, and
every entry is checked (a name the naming rule would make, nodes under /dev, a finite
last-seen time, not before 1970; one in the future counts as now). What is wrong is dropped
with one warning; nothing here raises. Written atomically (temp file, fsync, rename),
replacing whatever was there.

An absent device is saved with since when it is missing (presence.py); a present one without:
its absence, if it is not there after the restart, starts then. Neither starts an eviction
clock: that one counts from what the new process itself sees (presence.py, `missed_since`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from edgefd.bus.key import DeviceKey, DevNode, dev_number
from edgefd.bus.sysfs import dev_path
from edgefd.core.log import get_logger
from edgefd.core.publish import write_atomic
from edgefd.core.regular import Refused, read_regular

from .device import Device, Facts
from .naming import device_name

log = get_logger(__name__)

VERSION = 1
MAX_BYTES = 4 << 20
FUTURE_SLACK = 86400.0  # a clock set back by a day must not drop the memory
MAX_TEXT = 256
STATES = ("", "boot", "runtime")
PLACES = {  # what the kernel names a USB port path and a PCI address
    "usb": re.compile(r"usb[0-9]{1,3}|[0-9]{1,3}-[0-9]{1,3}(\.[0-9]{1,3}){0,6}"),
    "pci": re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"),
    "platform": re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:,+@-]{0,127}"),  # `fdab0000.npu`, `rknn`
}


def read_json(path: Path) -> tuple[Any, str | None]:
    """(document, None), or (None, why not): missing is (None, None)."""
    try:
        data, _ = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        return None, None
    except Refused as e:
        return None, str(e)
    try:
        return json.loads(data), None
    except (ValueError, RecursionError) as e:
        return None, f"not JSON ({type(e).__name__})"


def _text(v: Any, limit: int = MAX_TEXT) -> str:
    if not isinstance(v, str) or len(v) > limit or any(c < " " for c in v):
        raise ValueError("not a short printable string")
    return v


def _opt_text(v: Any) -> str | None:
    return None if v is None else _text(v, 64)


def _time(v: Any, now: float, what: str = "last_seen") -> float:
    """A last-seen time; one further in the future than FUTURE_SLACK (a clock that was wrong
    when it was written, or is wrong now: a Pi without an RTC) counts as now. The memory
    counts in monotonic time from there (presence.py), so no time keeps a device for ever."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{what} {v!r} is not a time")
    if v < 0:
        raise ValueError(f"{what} {v!r} is out of range")
    return float(v) if v <= now + FUTURE_SLACK else now


def _opt_time(v: Any, now: float) -> float | None:
    return None if v is None else _time(v, now, "missing_since")


def _node(v: Any) -> DevNode:
    if not isinstance(v, list) or len(v) != 2:
        raise ValueError("a node is [path, major:minor]")
    path, dev = _text(v[0]), v[1]
    if dev_path(path.removeprefix("/dev/")) != path:
        raise ValueError(f"node {path!r} is not under /dev")
    if dev is not None and dev_number(dev) != dev:
        raise ValueError(f"node number {dev!r} is not major:minor")
    return DevNode(path, dev)


def device_from_json(obj: Any, now: float) -> Device:
    """One remembered device; ValueError says what is wrong with the entry."""
    if not isinstance(obj, dict):
        raise ValueError("an entry is not a mapping")
    try:
        bus, place = obj["bus"], _text(obj["place"])
        if not (
            (bus in PLACES and PLACES[bus].fullmatch(place))
            or (bus == "dev" and dev_path(place.removeprefix("/dev/")) == place)
        ):
            raise ValueError(f"bad place {bus!r} {place!r}")
        key = DeviceKey(bus, place)
        model, by_serial = _text(obj["model"], 63), obj.get("by_serial", False) is True
        f = obj.get("facts") or {}
        if not isinstance(f, dict):
            raise ValueError("facts is not a mapping")
        facts = Facts(*(_opt_text(f.get(k)) for k in Facts._fields))
        name = obj["name"]
        if by_serial and not facts.serial:
            raise ValueError("named by a serial it does not have")
        if name != device_name(model, key, facts.serial if by_serial else None):
            raise ValueError(f"name {name!r} is not this device's")
        numa = obj.get("numa_node")
        resources = obj.get("resources", [])
        if not isinstance(resources, list) or not isinstance(obj.get("nodes", []), list):
            raise ValueError("resources and nodes are lists")
        state = obj.get("state", "")
        if state not in STATES:
            raise ValueError(f"state {state!r}")
        return Device(
            name=name,
            key=key,
            model=model,
            kind=_text(obj.get("kind", model), 63),
            state=state,
            ids=_text(obj.get("ids", ""), 16),
            nodes=tuple(_node(n) for n in obj.get("nodes", [])),
            numa_node=numa if isinstance(numa, int) and not isinstance(numa, bool) else None,
            facts=facts,
            resources=tuple(_text(r) for r in resources),
            present=False,
            last_seen=_time(obj.get("last_seen"), now),
            by_serial=by_serial,
            missing_since=_opt_time(obj.get("missing_since"), now),
        )
    except KeyError as e:
        raise ValueError(f"no {e.args[0]}") from None


def device_to_json(d: Device) -> dict[str, Any]:
    return {
        "name": d.name,
        "bus": d.key.bus,
        "place": d.key.place,
        "model": d.model,
        "kind": d.kind,
        "state": d.state,
        "ids": d.ids,
        "nodes": [[n.path, n.dev] for n in d.nodes],
        "numa_node": d.numa_node,
        "facts": {k: v for k, v in d.facts._asdict().items() if v is not None},
        "resources": list(d.resources),
        "by_serial": d.by_serial,
        "last_seen": d.last_seen,
    } | ({} if d.missing_since is None else {"missing_since": d.missing_since})


def checked(path: Path, entries: Iterable[Any], now: float) -> list[Device]:
    """The entries that are valid devices (one per name), with one warning for the rest."""
    devices: dict[str, Device] = {}
    dropped: list[str] = []
    future: list[str] = []
    for obj in entries:
        try:
            d = device_from_json(obj, now)
        except (ValueError, TypeError) as e:
            dropped.append(str(e))
            continue
        if d.last_seen != obj["last_seen"]:
            future.append(d.name)
        devices.setdefault(d.name, d)
    if future:
        log.warning(
            "%s: %d last-seen time(s) in the future (%s ...): counted as now; is the clock right?",
            path,
            len(future),
            future[0],
        )
    if dropped:
        log.warning(
            "%s: %d entr%s dropped (%s)",
            path,
            len(dropped),
            "y" if len(dropped) == 1 else "ies",
            dropped[0],
        )
    return list(devices.values())


def load(path: Path, now: float) -> list[Device]:
    """The devices the state file remembers; [] (with one warning) for a bad file."""
    doc, why = read_json(path)
    if why is None and doc is not None:
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            why = f"not a version {VERSION} state file"
        elif not isinstance(doc.get("devices"), list):
            why = "no device list"
    if why is not None:
        log.warning("%s: %s; starting with no remembered devices", path, why)
        return []
    return [] if doc is None else checked(path, doc["devices"], now)


def save(path: Path, devices: Sequence[Device]) -> None:
    """Write the file atomically, replacing a symlink or anything else found in its place.
    OSError when it cannot be written."""
    body = {"version": VERSION, "devices": [device_to_json(d) for d in devices]}
    write_atomic(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode(), own=True)
