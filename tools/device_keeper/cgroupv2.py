"""cgroup v2: replace each device program attached to the container's cgroup by the same
program with the keeper's rules in front (program.py says why this shape), atomically.

Several programs on one cgroup are ANDed by the kernel, so each one is patched: the new node
must pass all of them, and denying the old node in any one is enough. Every replacement is a
single BPF_PROG_ATTACH with BPF_F_REPLACE, so there is no instant without a program. When a
program changes under us (another grant, the runtime), the replace fails with ENOENT and the
whole plan is made again from what is attached then.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from edgefd.core.errors import EdgefdError

from . import bpf, program
from .rules import DeviceNumber, Rule, merge

ATTEMPTS = 5


class GrantRefused(EdgefdError):
    """This cgroup cannot be given the grant (said why); nothing was changed."""


class Unrestricted(GrantRefused):
    """The cgroup restricts no device here (no program attached; v1 `a *:* rwm`): there is
    nothing to grant. On a hybrid host one of a container's two cgroups is always so."""


@dataclass
class Patch:
    """One attached program and what replaces it."""

    prog_id: int
    name: str
    ours: bool  # already carries a keeper preamble
    before: tuple[Rule, ...]
    after: tuple[Rule, ...]
    body: list[program.Insn] = field(repr=False)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def as_json(self) -> dict[str, object]:
        return {
            "program": self.prog_id,
            "name": self.name or None,
            "keeper_rules_before": [str(r) for r in self.before],
            "rules": [str(r) for r in self.after],
            "then": f"the runtime's program ({len(self.body)} instructions, unchanged)",
        }


@contextlib.contextmanager
def _fd(path: str, flags: int) -> Iterator[int]:
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _read(cgroup_fd: int) -> tuple[int, list[tuple[int, int]]]:
    """(attach flags, [(program ID, fd)]); the caller closes the fds."""
    flags, ids = bpf.query(cgroup_fd)
    fds = []
    try:
        for pid in ids:
            fds.append((pid, bpf.prog_fd(pid)))
    except BaseException:
        for _, fd in fds:
            os.close(fd)
        raise
    return flags, fds


def _patch(
    fd: int, prog_id: int, allow: dict[DeviceNumber, str], revoke: set[DeviceNumber]
) -> Patch:
    info = bpf.prog_info(fd)
    if info.type != bpf.PROG_TYPE_CGROUP_DEVICE:
        raise GrantRefused(f"program {prog_id} is not a device program (type {info.type})")
    if not info.insns:
        raise GrantRefused(
            f"program {prog_id}: the kernel shows no instructions (CAP_BPF missing?)"
        )
    insns = program.unpack(info.insns)
    parts = program.split(insns) if info.name == program.NAME else None
    before, body = parts if parts is not None else ((), insns)
    try:
        program.check_reloadable(body)
    except program.NotReloadable as e:
        raise GrantRefused(
            f"program {prog_id} ({info.name or 'unnamed'}) cannot be extended: {e}"
        ) from None
    return Patch(prog_id, info.name, parts is not None, before, merge(before, allow, revoke), body)


def plan(cgroup: str, allow: dict[DeviceNumber, str], revoke: set[DeviceNumber]) -> list[Patch]:
    """What a grant would load, program by program; changes nothing (the dry run)."""
    with _fd(cgroup, os.O_RDONLY | os.O_DIRECTORY) as cfd:
        _, progs = _read(cfd)
        try:
            return [_patch(fd, pid, allow, revoke) for pid, fd in progs]
        finally:
            for _, fd in progs:
                os.close(fd)


def apply(cgroup: str, allow: dict[DeviceNumber, str], revoke: set[DeviceNumber]) -> list[Patch]:
    """Replace every device program of `cgroup` by its patched copy. An empty list: no
    program is attached (the cgroup itself restricts nothing; GrantRefused says so)."""
    with _fd(cgroup, os.O_RDONLY | os.O_DIRECTORY) as cfd:
        for attempt in range(ATTEMPTS):
            flags, progs = _read(cfd)
            try:
                if not progs:
                    raise Unrestricted(
                        f"{cgroup}: no device program attached; the cgroup restricts no device "
                        "(not a container's cgroup?)"
                    )
                patches = [_patch(fd, pid, allow, revoke) for pid, fd in progs]
                for patch, (_, old) in zip(patches, progs, strict=True):
                    if patch.changed:
                        _swap(cfd, flags, old, patch)
                return patches
            except bpf.BpfError as e:
                if e.errno == errno.ENOENT and attempt + 1 < ATTEMPTS:
                    continue  # a program was replaced meanwhile: read again
                raise
            finally:
                for _, fd in progs:
                    os.close(fd)
    raise AssertionError("unreachable")


def _swap(cgroup_fd: int, flags: int, old_fd: int, patch: Patch) -> None:
    code = program.pack(program.build(patch.after, patch.body))
    new = bpf.load(code, program.NAME, program.LICENSE)
    try:
        if flags & bpf.F_ALLOW_MULTI:
            bpf.attach(cgroup_fd, new, bpf.F_ALLOW_MULTI, replace=old_fd)
        else:  # a single program without ALLOW_MULTI is replaced by attaching with its flags
            bpf.attach(cgroup_fd, new, flags)
    finally:
        os.close(new)
