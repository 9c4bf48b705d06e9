"""What the keeper granted, on disk: per container and container path, every device number it
allowed there. Revoking is decided from this and from what the runtime itself granted (the
container's creation spec, containers.py), never from what the container's own path names: a
root process in the container can hard-link `/dev/full` over that path, and a revoke chosen
from it would leave the boot minor allowed until the kernel hands that minor to another USB
device, reachable through the container's `/dev/bus/usb` mount.

It outlives the process (a restart, a rolling update), so a device the keeper first sees after
a restart, or a path the container removed, still has every earlier grant revoked. It lives on
the host and must cost nothing when broken: read without following a symlink or blocking on a
FIFO, at most MAX_BYTES; a file that is not the ledger is one warning and an empty ledger.
Bounded: MAX_CONTAINERS containers, MAX_NUMBERS numbers a path (the oldest go first: each grant
already revoked them). A container whose cgroup is gone is forgotten.

It fails closed: a number is recorded, and the record saved, before it is allowed (a crash
between the two leaves a number recorded that was never allowed, which costs a no-op revoke
later); when the record cannot be saved (a full or read-only disk) `record` raises Unsaved, the
service allows nothing new in that container (it still revokes), and `unsaved` says why until a
save succeeds again, which the keeper's /readyz reports. A ledger that exists but is not read
whole (corrupt, another version, an entry dropped) sets `lost`: the grants it held cannot be
proven, so this process's catch-ups revoke every number of the device's major the container's
cgroup allows that neither the runtime's spec nor a device it holds now accounts for.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from edgefd.core.errors import EdgefdError
from edgefd.core.publish import write_atomic
from edgefd.core.regular import Refused, read_regular
from edgefd.inventory.decisions import BadDecisions, checked_path

from .rules import DeviceNumber

log = logging.getLogger("device-keeper")

FILE = "granted.json"
VERSION = 1
MAX_BYTES = 1 << 20
MAX_CONTAINERS = 1024
MAX_PATHS = 16
MAX_NUMBERS = 32
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_NUMBER = re.compile(r"([cb]):(\d{1,10}):(\d{1,10})")


class Unsaved(EdgefdError):
    """The ledger could not be written: a grant it could not prove after a restart is not
    made."""


def _number(text: Any) -> DeviceNumber | None:
    m = _NUMBER.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        return None
    try:
        return DeviceNumber(m.group(1), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def _is_path(p: Any) -> bool:
    """A container path as devplugin's decisions may name one (the keeper granted there)."""
    try:
        checked_path(p)
    except BadDecisions:
        return False
    return True


class Entry:
    """One container: its cgroupsPath (to tell whether it is gone) and its grants by path."""

    def __init__(self, cgroup: str) -> None:
        self.cgroup = cgroup
        self.paths: dict[str, list[DeviceNumber]] = {}

    def as_json(self) -> dict[str, Any]:
        return {
            "cgroup": self.cgroup,
            "paths": {p: [n.spec for n in ns] for p, ns in sorted(self.paths.items())},
        }


class Ledger:
    """The grants of this node's keeper; `path` None keeps them in memory only."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self.entries: dict[str, Entry] = {}
        self.unsaved = ""  # why the last save failed; "" once one succeeds
        self.lost = ""  # why earlier grants may be missing from it (this process's lifetime)
        if self.path is not None:
            self._load(self.path)

    def _load(self, path: Path) -> None:
        try:
            data, _ = read_regular(path, MAX_BYTES)
            doc = json.loads(data)
        except FileNotFoundError:
            return
        except (Refused, OSError, ValueError, RecursionError) as e:
            self.lost = f"{path}: not read ({e})"
            log.warning("%s; earlier grants it cannot prove are revoked at catch-up", self.lost)
            return
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            self.lost = f"{path}: not a ledger of version {VERSION}"
            log.warning("%s; earlier grants it cannot prove are revoked at catch-up", self.lost)
            return
        containers = doc.get("containers")
        dropped = 0
        for cid, obj in (containers if isinstance(containers, dict) else {}).items():
            if len(self.entries) >= MAX_CONTAINERS:
                dropped += 1
                continue
            entry = self._entry(cid, obj)
            if entry is None:
                dropped += 1
            else:
                self.entries[cid] = entry
        if dropped:
            self.lost = f"{path}: {dropped} entry(ies) not understood, dropped"
            log.warning("%s; grants it cannot prove are revoked at catch-up", self.lost)

    @staticmethod
    def _entry(cid: Any, obj: Any) -> Entry | None:
        if not isinstance(cid, str) or not _ID.fullmatch(cid) or not isinstance(obj, dict):
            return None
        cgroup, paths = obj.get("cgroup"), obj.get("paths")
        if not isinstance(cgroup, str) or len(cgroup) > 4096 or not isinstance(paths, dict):
            return None
        entry = Entry(cgroup)
        for p, numbers in list(paths.items())[:MAX_PATHS]:
            if not _is_path(p) or not isinstance(numbers, list):
                return None
            got = [_number(n) for n in numbers[-MAX_NUMBERS:]]
            if any(n is None for n in got):
                return None
            entry.paths[p] = [n for n in got if n is not None]
        return entry

    def granted(self, container: str, path: str) -> set[DeviceNumber]:
        """Every number the keeper allowed at `path` in `container`."""
        entry = self.entries.get(container)
        return set(entry.paths.get(path, ())) if entry is not None else set()

    def latest(self, container: str) -> dict[str, DeviceNumber]:
        """Per path, the last number the keeper allowed there in `container`."""
        entry = self.entries.get(container)
        return {p: ns[-1] for p, ns in entry.paths.items() if ns} if entry is not None else {}

    def record(self, container: str, cgroup: str, path: str, number: DeviceNumber) -> None:
        """`number` is about to be allowed at `path` in `container`: saved before the grant, so
        a crash right after it cannot forget it; Unsaved when it cannot be (then nothing is to
        be allowed)."""
        entry = self.entries.get(container)
        if entry is None:
            if len(self.entries) >= MAX_CONTAINERS:
                oldest = next(iter(self.entries))
                log.warning("ledger full: forgetting container %s", oldest[:12])
                del self.entries[oldest]
            entry = self.entries[container] = Entry(cgroup)
        numbers = entry.paths.get(path)
        if numbers is None:
            if len(entry.paths) >= MAX_PATHS:
                return  # a container with this many followed paths: keep the first ones
            numbers = entry.paths[path] = []
        if numbers and numbers[-1] == number:
            if self.unsaved:
                self.save()  # what memory holds is not on disk yet: it must be, first
            return
        if number in numbers:
            numbers.remove(number)
        numbers.append(number)
        del numbers[:-MAX_NUMBERS]
        self.save()

    def forget(self, gone: Callable[[str], bool], keep: Iterable[str] = ()) -> list[str]:
        """Forget the containers `gone(cgroup)` says are gone (not those in `keep`)."""
        kept = set(keep)
        dropped = [c for c, e in self.entries.items() if c not in kept and gone(e.cgroup)]
        for c in dropped:
            del self.entries[c]
        if dropped:
            with contextlib.suppress(Unsaved):  # the next record saves again or refuses
                self.save()
        return dropped

    def save(self) -> None:
        """Write the ledger atomically; Unsaved (and `unsaved` set) when that fails."""
        if self.path is None:
            return
        doc = {
            "version": VERSION,
            "containers": {c: e.as_json() for c, e in self.entries.items()},
        }
        data = json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n"
        try:
            write_atomic(self.path, data, own=True)
        except (OSError, EdgefdError) as e:
            why = f"{self.path}: cannot save the grants ({e})"
            if why != self.unsaved:
                log.error("%s; no new grant is made until it can", why)
            self.unsaved = why
            raise Unsaved(why) from None
        if self.unsaved:
            log.info("%s: saved again; grants go on", self.path)
            self.unsaved = ""
