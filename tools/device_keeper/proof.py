"""What the keeper takes as proof, beside its ledger: which container the runtime gave a
device (its creation spec), and, when the ledger is lost, which numbers a container's cgroups
allow that nothing accounts for. Names and labels only say which container the kubelet means;
what went into a container is the runtime's word.
"""

from __future__ import annotations

import logging

from .containers import Container
from .grant import allowed_now
from .moves import Move
from .rules import DeviceNumber
from .systemd import Systemd

log = logging.getLogger("device-keeper")


def given(move: Move, c: Container) -> bool:
    """Whether the runtime gave `c` this device: its spec has a node at one of the paths the
    device was given at (a container of the same name never given it, a force-deleted pod's,
    gets nothing; said once a move)."""
    if any(p in move.paths for p, _ in c.devices):
        return True
    log.warning(
        "%s (container %s): its spec has no node at %s: the runtime did not give it %s, so "
        "nothing is granted to it",
        c.holder,
        c.id[:12],
        ", ".join(sorted(move.paths)),
        move.device,
    )
    return False


def unproven(
    move: Move, c: Container, cgroup_fs: str, systemd: Systemd | None
) -> set[DeviceNumber]:
    """With the ledger lost: every number of the device's type and major the container's
    cgroups allow now that the runtime did not give it at another path (the numbers of devices
    it holds now are taken out by the caller)."""
    elsewhere = {n for p, n in c.devices if p != move.path and p not in move.paths}
    out: set[DeviceNumber] = set()
    for d in c.cgroup_dirs(cgroup_fs):
        out |= allowed_now(d, systemd)
    return {n for n in out - elsewhere if (n.type, n.major) == (move.new.type, move.new.major)}
