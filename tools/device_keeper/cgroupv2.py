"""cgroup v2: replace the runtime's device program attached to the container's cgroup by the
same program with the keeper's rules in front (program.py says why this shape), atomically.

Only the runtime's own program is extended (runc's or crun's: unnamed and of exactly their
shape, program.runtime_shaped; or the keeper's own extension of one). Any other program on
the cgroup (a security agent's policy, a deny-all) is left exactly as it is: the kernel ANDs
the programs attached with BPF_F_ALLOW_MULTI, so such a program still decides what it denies,
and the keeper cannot know what that is. A grant on such a cgroup extends the runtime's
program (a revocation holds whatever else is attached) and then says the new node may still
be denied (BlockedByOther) rather than that it was granted; a cgroup with no runtime program
at all is refused with nothing changed.

Every replacement is a single BPF_PROG_ATTACH with BPF_F_REPLACE, so there is no instant
without a program. When a program changes under us (another grant, the runtime), the replace
fails with ENOENT and the whole plan is made again from what is attached then.
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


class BlockedByOther(GrantRefused):
    """A program that is not the runtime's is attached too and was left as it is: it may
    still deny the granted node, so the grant is not reported as made."""


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


@dataclass(frozen=True)
class Other:
    """An attached program that is not the runtime's: left as it is."""

    prog_id: int
    name: str

    def __str__(self) -> str:
        return f"program {self.prog_id} ({self.name or 'unnamed'})"


def _runtime_parts(
    name: str, insns: list[program.Insn]
) -> tuple[tuple[Rule, ...], list[program.Insn]] | None:
    """(the keeper's rules, the runtime's body) of the runtime's program or of the keeper's
    extension of it; None for any other program."""
    if name == program.NAME:
        parts = program.split(insns)
        return parts if parts is not None and program.runtime_shaped(parts[1]) else None
    return ((), insns) if name == "" and program.runtime_shaped(insns) else None


def _patch(
    fd: int, prog_id: int, allow: dict[DeviceNumber, str], revoke: set[DeviceNumber]
) -> Patch | Other:
    info = bpf.prog_info(fd)
    if info.type != bpf.PROG_TYPE_CGROUP_DEVICE:
        raise GrantRefused(f"program {prog_id} is not a device program (type {info.type})")
    if not info.insns:
        raise GrantRefused(
            f"program {prog_id}: the kernel shows no instructions (CAP_BPF missing?)"
        )
    parts = _runtime_parts(info.name, program.unpack(info.insns))
    if parts is None:
        return Other(prog_id, info.name)
    before, body = parts
    try:
        program.check_reloadable(body)
    except program.NotReloadable as e:
        raise GrantRefused(
            f"program {prog_id} ({info.name or 'unnamed'}) cannot be extended: {e}"
        ) from None
    ours = info.name == program.NAME
    return Patch(prog_id, info.name, ours, before, merge(before, allow, revoke), body)


def _sorted(cgroup: str, found: list[Patch | Other]) -> list[Patch]:
    """The runtime's programs; GrantRefused when there is none, with nothing changed."""
    patches = [p for p in found if isinstance(p, Patch)]
    others = [str(p) for p in found if isinstance(p, Other)]
    if not patches:
        raise GrantRefused(
            f"{cgroup}: no attached device program is the runtime's ({', '.join(others)}): "
            "the keeper extends only runc's or crun's own program, so nothing was changed"
        )
    return patches


# systemd's own device program (src/core/bpf-devices.c), built from the scope's DeviceAllow=:
# under the systemd cgroup driver the keeper changes that list first (systemd.py), and systemd
# rebuilds the program from it, so it never denies what the grant allows
SYSTEMD_PROGRAM = "sd_devices"


def _blocked(
    cgroup: str,
    found: list[Patch | Other],
    allow: dict[DeviceNumber, str],
    done: str,
    kept: frozenset[str] = frozenset(),
) -> None:
    """BlockedByOther when a program that is not the runtime's may still deny `allow` (one
    named in `kept` is its owner's, kept in step by it)."""
    others = [str(p) for p in found if isinstance(p, Other) and p.name not in kept]
    if others and allow:
        nodes = ", ".join(str(n) for n in sorted(allow))
        raise BlockedByOther(
            f"{cgroup}: not granted {nodes}: {', '.join(others)} is attached too and is not "
            "the runtime's device program; it was left as it is and the kernel applies every "
            f"attached program, so it may still deny the node ({done})"
        )


def plan(
    cgroup: str,
    allow: dict[DeviceNumber, str],
    revoke: set[DeviceNumber],
    kept: frozenset[str] = frozenset(),
) -> list[Patch]:
    """What a grant would load, program by program; changes nothing (the dry run)."""
    with _fd(cgroup, os.O_RDONLY | os.O_DIRECTORY) as cfd:
        _, progs = _read(cfd)
        try:
            found = [_patch(fd, pid, allow, revoke) for pid, fd in progs]
        finally:
            for _, fd in progs:
                os.close(fd)
    patches = _sorted(cgroup, found)
    _blocked(cgroup, found, allow, "the runtime's program would be extended", kept)
    return patches


def apply(
    cgroup: str,
    allow: dict[DeviceNumber, str],
    revoke: set[DeviceNumber],
    kept: frozenset[str] = frozenset(),
) -> list[Patch]:
    """Replace the runtime's device program of `cgroup` by its patched copy (Unrestricted:
    no program is attached; GrantRefused: none is the runtime's; BlockedByOther, after the
    replacement: another program, not one of `kept`, may still deny the granted node)."""
    with _fd(cgroup, os.O_RDONLY | os.O_DIRECTORY) as cfd:
        for attempt in range(ATTEMPTS):
            flags, progs = _read(cfd)
            try:
                if not progs:
                    raise Unrestricted(
                        f"{cgroup}: no device program attached; the cgroup restricts no device "
                        "(not a container's cgroup?)"
                    )
                found = [_patch(fd, pid, allow, revoke) for pid, fd in progs]
                patches = _sorted(cgroup, found)
                for patch, (_, old) in zip(found, progs, strict=True):
                    if isinstance(patch, Patch) and patch.changed:
                        _swap(cfd, flags, old, patch)
                _blocked(cgroup, found, allow, "the runtime's program was extended", kept)
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
