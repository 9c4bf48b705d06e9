"""cgroup v1: the devices controller's own files. A container's devices cgroup denies by
default and lists its exceptions (`devices.list`); writing `c 189:4 rwm` to `devices.deny`
removes that exception (so a minor the kernel hands to another device later is not
reachable), writing `c 189:5 rw` to `devices.allow` adds one. Wildcard exceptions the
runtime wrote (runc's `c *:* m`) stay as they are: v1 cannot subtract a node from them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .cgroupv2 import Unrestricted
from .rules import DeviceNumber

UNRESTRICTED = "a *:* rwm"


@dataclass(frozen=True)
class Write:
    file: str  # devices.deny / devices.allow
    line: str
    changes: bool = True  # False: devices.list already says so (writing it again is harmless)

    def __str__(self) -> str:
        return f"{self.file}: {self.line}"


def exceptions(cgroup: str) -> list[str]:
    with open(os.path.join(cgroup, "devices.list"), encoding="ascii") as f:
        return [line.strip() for line in f if line.strip()]


def plan(cgroup: str, allow: dict[DeviceNumber, str], revoke: set[DeviceNumber]) -> list[Write]:
    """The writes of one grant, revocations first (never two nodes open at once)."""
    listed = exceptions(cgroup)
    if UNRESTRICTED in listed:
        raise Unrestricted(f"{cgroup}: the devices cgroup allows every device (a *:* rwm)")
    have = {}
    for line in listed:
        node, _, acc = line.rpartition(" ")
        have[node] = acc
    writes = [Write("devices.deny", f"{n} rwm", str(n) in have) for n in sorted(revoke)]
    writes += [
        Write("devices.allow", f"{n} {a}", not set(a) <= set(have.get(str(n), "")))
        for n, a in sorted(allow.items())
    ]
    return writes


def apply(cgroup: str, writes: list[Write]) -> None:
    for w in writes:
        fd = os.open(os.path.join(cgroup, w.file), os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.write(fd, w.line.encode("ascii"))
        finally:
            os.close(fd)
