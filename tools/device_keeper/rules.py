"""Device nodes and the access rules the keeper writes: `c:189:5` (a char node), access
`rw`/`rwm`, and one rule per node: allow with an access set, or deny whatever the access.

One notation for the command line, the logs, the JSON and the v1 files (`c 189:5 rw`), so an
operator reads the same rule everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgefd.core.errors import UsageError

# the cgroup v1 letters and the eBPF context bits (include/uapi/linux/bpf.h BPF_DEVCG_*)
ACCESS_BITS = {"m": 1, "r": 2, "w": 4}
TYPE_BITS = {"b": 1, "c": 2}
DEFAULT_ACCESS = "rw"  # what both device APIs give a container (DeviceSpec and CDI "rw")
# ASCII digits only: `\d` alone also takes other scripts' digits (c:١٨٩:٥ would be 189:5)
_NODE = re.compile(r"([cb]):([0-9]{1,10}):([0-9]{1,10})(?::([rwm]{1,3}))?", re.ASCII)
MAX_MAJOR = (1 << 12) - 1  # the kernel's dev_t: 12-bit major, 20-bit minor
MAX_MINOR = (1 << 20) - 1


def access_mask(access: str) -> int:
    return sum(ACCESS_BITS[a] for a in set(access))


def access_text(mask: int) -> str:
    return "".join(a for a in "rwm" if mask & ACCESS_BITS[a])


@dataclass(frozen=True, order=True)
class DeviceNumber:
    """A device number with its type: what a device cgroup rule names."""

    type: str  # "c" or "b"
    major: int
    minor: int

    def __post_init__(self) -> None:
        if self.type not in TYPE_BITS:
            raise ValueError(f"device type {self.type!r} is not 'c' or 'b'")
        if not (0 <= self.major <= MAX_MAJOR and 0 <= self.minor <= MAX_MINOR):
            raise ValueError(f"{self.major}:{self.minor} is not a device number")

    def __str__(self) -> str:
        return f"{self.type} {self.major}:{self.minor}"

    @property
    def spec(self) -> str:
        """The command-line form, `c:189:5`."""
        return f"{self.type}:{self.major}:{self.minor}"

    @property
    def rdev(self) -> int:
        import os

        return os.makedev(self.major, self.minor)


@dataclass(frozen=True, order=True)
class Rule:
    """Allow `access` on `node`, or (access None) deny every access to it."""

    node: DeviceNumber
    access: str | None

    @property
    def allow(self) -> bool:
        return self.access is not None

    def __str__(self) -> str:
        return f"allow {self.node} {self.access}" if self.allow else f"deny {self.node}"

    def as_json(self) -> dict[str, object]:
        return {
            "verdict": "allow" if self.allow else "deny",
            "type": self.node.type,
            "major": self.node.major,
            "minor": self.node.minor,
            "access": self.access or "rwm",
        }


def parse_node(text: str, default_access: str = DEFAULT_ACCESS) -> tuple[DeviceNumber, str]:
    """`c:189:5` or `c:189:5:rwm` -> (node, access); UsageError says what is wrong."""
    m = _NODE.fullmatch(text.strip())
    if not m:
        raise UsageError(
            f"{text!r} is not a device node: expected TYPE:MAJOR:MINOR[:ACCESS] such as "
            "c:189:5 or c:189:5:rwm (TYPE c or b, ACCESS of r, w, m)"
        )
    access = m.group(4) or default_access
    if len(set(access)) != len(access):
        raise UsageError(f"{text!r}: access letters repeat")
    try:
        node = DeviceNumber(m.group(1), int(m.group(2)), int(m.group(3)))
    except ValueError as e:
        raise UsageError(f"{text!r}: {e}") from None
    return node, "".join(a for a in "rwm" if a in access)


def disjoint(allow: dict[DeviceNumber, str], revoke: set[DeviceNumber]) -> None:
    both = set(allow) & revoke
    if both:
        shown = ", ".join(str(n) for n in sorted(both))
        raise UsageError(f"{shown}: both allowed and revoked in one grant")


def merge(
    existing: tuple[Rule, ...], allow: dict[DeviceNumber, str], revoke: set[DeviceNumber]
) -> tuple[Rule, ...]:
    """The rule list after one grant: each node has one rule, the newest wins (a minor the
    kernel hands back to the same device is allowed again; a revoked one stays denied)."""
    disjoint(allow, revoke)
    out = {r.node: r for r in existing}
    for node in revoke:
        out[node] = Rule(node, None)
    for node, access in allow.items():
        out[node] = Rule(node, access)
    return tuple(sorted(out.values()))
