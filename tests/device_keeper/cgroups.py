"""The host's cgroup hierarchies and the device rules runc gives a container: what the keeper's
kernel tests (conftest's fixtures) and the service's tests put on a fresh cgroup."""

from __future__ import annotations

from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")

# A container's rules as containerd + runc give them (OCI linux.resources.devices, then
# runc's own additions, among them `c *:* m`), with the Coral's boot node 189:4 from a
# DeviceSpec ("rw").
RUNC_RULES = [
    {"allow": False, "access": "rwm"},
    {"allow": True, "type": "c", "access": "m"},
    {"allow": True, "type": "b", "access": "m"},
    {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
    {"allow": True, "type": "c", "major": 1, "minor": 5, "access": "rwm"},
    {"allow": True, "type": "c", "major": 1, "minor": 7, "access": "rwm"},
    {"allow": True, "type": "c", "major": 1, "minor": 8, "access": "rwm"},
    {"allow": True, "type": "c", "major": 1, "minor": 9, "access": "rwm"},
    {"allow": True, "type": "c", "major": 5, "minor": 0, "access": "rwm"},
    {"allow": True, "type": "c", "major": 136, "access": "rwm"},
    {"allow": True, "type": "c", "major": 10, "minor": 200, "access": "rwm"},
    {"allow": True, "type": "c", "major": 189, "minor": 4, "access": "rw"},
]


def v2_root() -> Path | None:
    for p in (CGROUP_FS / "unified", CGROUP_FS):
        if (p / "cgroup.controllers").exists():
            return p
    return None
