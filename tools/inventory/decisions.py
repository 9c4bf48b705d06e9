"""What devplugin decided for each device it serves, as one small file device-keeper follows.

Two processes of one pod act on one device: devplugin hands it to containers (its kubelet IDs
or its DRA device, at a container path, with a device number), and device-keeper, when the
device re-enumerates inside a running container, grants that container the new number at
that path. The keeper must act on what devplugin *decided*, not on a second derivation of it
from the same host with a copy of the rules: so devplugin writes its decisions here after every
scan that changes them, and the keeper reads them, diffs one version against the next and has
no inventory, selectors or resources configuration of its own.

    {"version": 1, "time": 1733461234.5,
     "handouts": [
      {"device": "coral-usb-2-1", "present": true,
       "plugin": [["edgefd.io/coral-usb", ["coral-usb-2-1"]]],
       "dra": [["edgefd.io", "node1", "coral-usb-2-1"]],
       "nodes": [{"path": "/dev/edgefd/coral-usb-2-1", "number": "c:189:129",
                  "was": [["/dev/edgefd/coral-usb-2-1", "c:189:128"]]}]}]}

A handout is one device as one rule gives it: under which device-plugin resources (with every
kubelet ID it is advertised as) and as which DRA device (driver, pool, name), and for each of
its nodes the container path and number a container is given now, and (`was`) the pairs it was
given before, newest first: a container created before a move holds one of those. A device
that two resources give at different paths (one mounts the USB bus, one does not) is two
handouts. An absent device keeps its last nodes, `present` false.

The keeper holds privileges devplugin does not: what it reads here is input, never authority.
The file is read bounded (no symlink, no FIFO, at most MAX_BYTES), every entry is checked (a
device name the naming rule would make, numbers of the kernel's range, paths under /dev with
nothing to climb out by) and a file that is not right is refused whole: `BadDecisions`, which
the keeper logs and acts on by granting nothing. Written atomically by its one writer.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgefd.core.publish import write_atomic
from edgefd.core.regular import Refused, read_regular

from .naming import MAX_NAME

VERSION = 1
FILE = "decisions.json"
MAX_BYTES = 1 << 20
MAX_HANDOUTS = 1024  # a node has a handful of accelerators; 64 resources of them at most
MAX_NODES = 16  # nodes of one device
MAX_IDS = 1000  # kubelet IDs of one device under one resource (replicas)
MAX_WAS = 8  # earlier (path, number) pairs kept per node
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
# a /dev path with nothing to climb out by: no '..', no empty or '.' component, no odd bytes
_PATH = re.compile(r"^/dev(/[A-Za-z0-9_@:+,=-][A-Za-z0-9_.@:+,=-]{0,199}){1,6}$")
_NUMBER = re.compile(r"^c:([0-9]{1,10}):([0-9]{1,10})$", re.ASCII)
_TEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,252}$")
MAX_MAJOR, MAX_MINOR = (1 << 12) - 1, (1 << 20) - 1  # the kernel's dev_t

Pair = tuple[str, str]  # (container path, number "c:189:5")


class BadDecisions(ValueError):
    """The file is not decisions this reader can act on (says why)."""


def number_of(dev: str | None) -> str | None:
    """A sysfs `dev` ("189:5", a char node's) as the number a handout names ("c:189:5")."""
    return f"c:{dev}" if dev else None


def checked_number(text: Any) -> str:
    m = _NUMBER.fullmatch(text) if isinstance(text, str) else None
    if m is None or int(m.group(1)) > MAX_MAJOR or int(m.group(2)) > MAX_MINOR:
        raise BadDecisions(f"number {text!r} is not c:MAJOR:MINOR of the kernel's range")
    return text


def checked_path(text: Any) -> str:
    """A container path the keeper may write: under /dev, nothing to climb out by."""
    if not isinstance(text, str) or not _PATH.fullmatch(text):
        raise BadDecisions(f"path {text!r} is not a plain path under /dev")
    return text


def _name(text: Any, what: str = "device") -> str:
    if not isinstance(text, str) or len(text) > MAX_NAME or not _NAME.fullmatch(text):
        raise BadDecisions(f"{what} {text!r} is not a device name")
    return text


def _text(text: Any, what: str) -> str:
    if not isinstance(text, str) or not _TEXT.fullmatch(text):
        raise BadDecisions(f"{what} {text!r} is not a resource, driver or pool name")
    return text


def _list(value: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise BadDecisions(f"{what}: not a list of at most {limit}")
    return value


@dataclass(frozen=True)
class GivenNode:
    """One node of a handout: where a container finds it, its number, and what it was."""

    path: str
    number: str
    was: tuple[Pair, ...] = ()

    @property
    def pair(self) -> Pair:
        return (self.path, self.number)

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "number": self.number, "was": [list(p) for p in self.was]}


@dataclass(frozen=True)
class Handout:
    """One device as one rule hands it out (see the module's docstring)."""

    device: str
    nodes: tuple[GivenNode, ...]
    plugin: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (resource, kubelet IDs)
    dra: tuple[tuple[str, str, str], ...] = ()  # (driver, pool, device)
    present: bool = True

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes it the same handout from one version to the next (its nodes move)."""
        return (self.device, tuple(r for r, _ in self.plugin), self.dra)

    def as_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "present": self.present,
            "plugin": [[r, list(ids)] for r, ids in self.plugin],
            "dra": [list(d) for d in self.dra],
            "nodes": [n.as_json() for n in self.nodes],
        }

    def describe(self) -> str:
        """How the kubelet knows it, for a log line: `edgefd.io/coral-usb, DRA node1/x`."""
        parts = [r for r, _ in self.plugin] + [f"DRA {p}/{d}" for _, p, d in self.dra]
        return ", ".join(parts) or "not handed out"


@dataclass(frozen=True)
class Decisions:
    """One version of the file: the scan's wall-clock time and every handout."""

    time: float
    handouts: tuple[Handout, ...] = field(default=())

    def as_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "time": self.time,
            "handouts": [h.as_json() for h in self.handouts],
        }

    def same_as(self, other: Decisions | None) -> bool:
        """The same decisions, whenever made (a rescan that changed nothing)."""
        return other is not None and other.handouts == self.handouts

    def by_key(self) -> dict[tuple[Any, ...], Handout]:
        return {h.key: h for h in self.handouts}


def _pair(value: Any) -> Pair:
    if not isinstance(value, list) or len(value) != 2:
        raise BadDecisions("a 'was' entry is [path, number]")
    return checked_path(value[0]), checked_number(value[1])


def _node(obj: Any) -> GivenNode:
    if not isinstance(obj, dict):
        raise BadDecisions("a node is an object")
    was = tuple(_pair(p) for p in _list(obj.get("was", []), "was", MAX_WAS))
    return GivenNode(checked_path(obj.get("path")), checked_number(obj.get("number")), was)


def _plugin(value: Any) -> tuple[str, tuple[str, ...]]:
    if not isinstance(value, list) or len(value) != 2:
        raise BadDecisions("a plugin entry is [resource, [IDs]]")
    ids = tuple(_name(i, "kubelet ID") for i in _list(value[1], "kubelet IDs", MAX_IDS))
    return _text(value[0], "resource"), ids


def _dra(value: Any) -> tuple[str, str, str]:
    if not isinstance(value, list) or len(value) != 3:
        raise BadDecisions("a dra entry is [driver, pool, device]")
    return _text(value[0], "driver"), _text(value[1], "pool"), _name(value[2])


def _handout(obj: Any) -> Handout:
    if not isinstance(obj, dict):
        raise BadDecisions("a handout is an object")
    present = obj.get("present", True)
    if not isinstance(present, bool):
        raise BadDecisions("present: true or false")
    return Handout(
        device=_name(obj.get("device")),
        nodes=tuple(_node(n) for n in _list(obj.get("nodes"), "nodes", MAX_NODES)),
        plugin=tuple(_plugin(p) for p in _list(obj.get("plugin", []), "plugin", 64)),
        dra=tuple(_dra(d) for d in _list(obj.get("dra", []), "dra", 64)),
        present=present,
    )


def parse(data: bytes) -> Decisions:
    """The decisions in `data`; BadDecisions says what is wrong (the first thing found)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise BadDecisions(f"not JSON ({type(e).__name__})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise BadDecisions(f"not a version {VERSION} decisions file")
    t = doc.get("time")
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
        raise BadDecisions(f"time {t!r} is not a time")
    handouts = tuple(_handout(h) for h in _list(doc.get("handouts"), "handouts", MAX_HANDOUTS))
    keys = [h.key for h in handouts]
    if len(set(keys)) != len(keys):
        raise BadDecisions("a handout is listed twice")
    return Decisions(float(t), handouts)


def read(path: str | Path) -> Decisions | None:
    """The decisions at `path`; None when there are none yet; BadDecisions when it is not a
    file this reader acts on (a symlink, a FIFO, too large, malformed)."""
    try:
        data, _ = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        return None
    except Refused as e:
        raise BadDecisions(str(e)) from None
    return parse(data)


def write(path: str | Path, decisions: Decisions) -> bool:
    """Replace the file atomically (False: it already said this). OSError when it cannot."""
    body = json.dumps(decisions.as_json(), sort_keys=True, separators=(",", ":")) + "\n"
    return write_atomic(Path(path), body.encode(), own=True)


def remembered(decisions: Decisions | None) -> dict[tuple[str, int], list[Pair]]:
    """Every (path, number) pair each device's nodes were given, newest first, per
    (device, node index): a writer that restarts carries its history on from its own file."""
    out: dict[tuple[str, int], list[Pair]] = {}
    for h in decisions.handouts if decisions is not None else ():
        for i, n in enumerate(h.nodes):
            seen = out.setdefault((h.device, i), [])
            for p in (n.pair, *n.was):
                if p not in seen:
                    seen.append(p)
    return out


class History:
    """Which (path, number) pairs each device node was given (a container created before a
    move holds one of them): what `was` lists, newest first, at most MAX_WAS."""

    def __init__(self, start: dict[tuple[str, int], list[Pair]] | None = None) -> None:
        self._pairs: dict[tuple[str, int], list[Pair]] = dict(start or {})

    def given(self, device: str, index: int, now: Iterable[Pair]) -> tuple[Pair, ...]:
        """Note the pairs node `index` of `device` is given now; what it was given before."""
        now = list(now)
        seen = self._pairs.setdefault((device, index), [])
        for p in reversed(now):
            if p in seen:
                seen.remove(p)
            seen.insert(0, p)
        del seen[MAX_WAS + len(now) :]
        return tuple(p for p in seen if p not in now)[:MAX_WAS]

    def forget(self, keep: Iterable[str]) -> None:
        """Devices no handout names any more (forgotten by the inventory) are forgotten."""
        names = set(keep)
        self._pairs = {k: v for k, v in self._pairs.items() if k[0] in names}
