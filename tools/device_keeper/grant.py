"""One grant on one container cgroup: allow the new node, revoke the old one. The one code
path of `device-keeper grant` and of the service.

Which cgroup version a directory is: a v1 devices controller directory has `devices.list`;
a v2 directory has `cgroup.controllers`. A cgroup managed by systemd (the systemd cgroup
driver: `…/kubepods-….slice/cri-containerd-<id>.scope`, `crio-<id>.scope`) is granted through
systemd first, the scope's `DeviceAllow=` (systemd.py: a `daemon-reload` or any property change
of the scope re-applies that list, and would undo a grant made only in the cgroup), then in the
cgroup itself as on cgroupfs (runc's own program is extended on v2, beside systemd's, which
systemd rebuilt from the list). Without a way to reach systemd it is refused, saying why.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from dataclasses import dataclass, field

from edgefd.core.errors import EXIT_OUTPUT, BadInput, EdgefdError, Unreachable

from . import cgroupv1, cgroupv2
from .bpf import BpfError
from .cgroupv2 import SYSTEMD_PROGRAM, GrantRefused
from .rules import DeviceNumber, disjoint
from .systemd import Systemd, SystemdError, device_path


class SystemdManaged(GrantRefused):
    """The cgroup belongs to a systemd scope that the keeper cannot reach systemd about: a
    grant made only in the cgroup would be undone by the next daemon-reload."""


class GrantFailed(EdgefdError):
    """The kernel refused a write (permissions, the verifier); nothing half-done stays."""

    exit_code = EXIT_OUTPUT


@dataclass
class GrantOutcome:
    cgroup: str
    version: str  # "v1" / "v2"
    allow: dict[DeviceNumber, str]
    revoke: set[DeviceNumber]
    applied: bool
    writes: list[cgroupv1.Write] = field(default_factory=list)
    patches: list[cgroupv2.Patch] = field(default_factory=list)
    unit: str = ""  # the systemd scope granted through (its DeviceAllow=), "" for none
    device_allow: list[tuple[str, str]] = field(default_factory=list)  # its list after

    @property
    def changed(self) -> bool:
        return any(w.changes for w in self.writes) or any(p.changed for p in self.patches)

    def as_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "cgroup": self.cgroup,
            "cgroup_version": self.version,
            "allow": [f"{n} {a}" for n, a in sorted(self.allow.items())],
            "revoke": [str(n) for n in sorted(self.revoke)],
            "applied": self.applied,
            "changed": self.changed,
        }
        if self.unit:
            allowed = [" ".join(e) for e in self.device_allow]
            doc["systemd"] = {"unit": self.unit, "device_allow": allowed}
        if self.version == "v1":
            doc["writes"] = [{"file": w.file, "line": w.line} for w in self.writes]
        else:
            doc["programs"] = [p.as_json() for p in self.patches]
        return doc

    def text(self) -> str:
        """What --dry-run prints: the lines it would write, or the program's rule list (and
        under the systemd driver, the scope's DeviceAllow= first)."""
        lines = [f"{self.unit}: DeviceAllow={p} {a}" for p, a in self.device_allow]
        if self.version == "v1":
            return "".join(f"{line}\n" for line in [*lines, *map(str, self.writes)])
        for p in self.patches:
            lines.append(f"# program {p.prog_id} on {self.cgroup}: replaced by")
            lines += [str(r) for r in p.after]
            lines.append(f"then: {p.as_json()['then']}")
        return "".join(f"{line}\n" for line in lines)


def systemd_scope(cgroup: str) -> bool:
    """Whether the directory is a systemd scope in a slice (the systemd cgroup driver)."""
    parts = [p for p in os.path.normpath(cgroup).split(os.sep) if p]
    return len(parts) >= 2 and parts[-1].endswith(".scope") and parts[-2].endswith(".slice")


def version(cgroup: str) -> str:
    if not os.path.isdir(cgroup):
        raise BadInput(f"{cgroup}: no such cgroup directory")
    if os.path.exists(os.path.join(cgroup, "devices.list")):
        return "v1"
    if os.path.exists(os.path.join(cgroup, "cgroup.controllers")):
        return "v2"
    raise BadInput(
        f"{cgroup}: neither a cgroup v2 directory nor one of the v1 devices controller's"
    )


def grant(
    cgroup: str,
    allow: dict[DeviceNumber, str],
    revoke: set[DeviceNumber],
    dry_run: bool = False,
    systemd: Systemd | None = None,
) -> GrantOutcome:
    """Allow `allow`, revoke `revoke` on one cgroup (or, dry, say what that would do); a
    systemd scope's through `systemd` first (SystemdManaged when there is none)."""
    disjoint(allow, revoke)
    ver = version(cgroup)
    out = GrantOutcome(cgroup, ver, dict(allow), set(revoke), applied=not dry_run)
    kept: frozenset[str] = frozenset()
    if systemd_scope(cgroup):
        if systemd is None:
            raise SystemdManaged(
                f"{cgroup}: a systemd scope (systemd cgroup driver) and no systemd to grant it "
                "through (its DeviceAllow=); a daemon-reload would undo a grant made only in "
                "the cgroup, so none is made"
            )
        out.unit, kept = os.path.basename(os.path.normpath(cgroup)), frozenset({SYSTEMD_PROGRAM})
        out.device_allow = _scope_grant(systemd, out.unit, allow, revoke, dry_run)
    try:
        if ver == "v1":
            out.writes = cgroupv1.plan(cgroup, allow, revoke)
            if not dry_run:
                cgroupv1.apply(cgroup, out.writes)
        elif dry_run:
            out.patches = cgroupv2.plan(cgroup, allow, revoke, kept)
        else:
            out.patches = cgroupv2.apply(cgroup, allow, revoke, kept)
    except GrantRefused:
        raise
    except OSError as e:
        raise refusal(cgroup, ver, e) from None
    return out


def allowed_now(cgroup: str, systemd: Systemd | None = None) -> set[DeviceNumber]:
    """The exact device numbers the keeper may have allowed in this cgroup and that still are:
    v1 the devices controller's list, v2 the keeper's own rules in the runtime's program (the
    runtime's part is its creation spec's), a systemd scope's `DeviceAllow=` besides. What a
    restart without its ledger revokes from (ledger.py): a grant it cannot prove is not kept.
    Nothing readable: empty (the cgroup is gone, or restricts nothing)."""
    out: set[DeviceNumber] = set()
    try:
        if version(cgroup) == "v1":
            for line in cgroupv1.exceptions(cgroup):  # `c 189:5 rwm`; a wildcard is no number
                m = re.fullmatch(r"([cb]) (\d{1,10}):(\d{1,10}) [rwm]+", line)
                if m:
                    with contextlib.suppress(ValueError):
                        out.add(DeviceNumber(m[1], int(m[2]), int(m[3])))
        else:
            for patch in cgroupv2.plan(cgroup, {}, set()):
                out |= {r.node for r in patch.before if r.allow}
    except (OSError, EdgefdError):
        pass
    if systemd is not None and systemd_scope(cgroup):
        unit = os.path.basename(os.path.normpath(cgroup))
        with contextlib.suppress(SystemdError, Unreachable):
            for path, _ in systemd.device_allow(unit):
                kind, _, numbers = path.removeprefix("/dev/").partition("/")
                major, _, minor = numbers.partition(":")
                if kind in ("char", "block") and major.isdigit() and minor.isdigit():
                    with contextlib.suppress(ValueError):
                        out.add(DeviceNumber(kind[0], int(major), int(minor)))
    return out


def _scope_grant(
    systemd: Systemd,
    unit: str,
    allow: dict[DeviceNumber, str],
    revoke: set[DeviceNumber],
    dry_run: bool,
) -> list[tuple[str, str]]:
    """The scope's DeviceAllow= after the grant (dry: what it would be)."""
    try:
        if not dry_run:
            return systemd.set_device_allow(unit, allow, revoke)
        gone = {device_path(n) for n in revoke} | {device_path(n) for n in allow}
        kept = [e for e in systemd.device_allow(unit) if e[0] not in gone]
        return kept + [(device_path(n), a) for n, a in sorted(allow.items())]
    except SystemdError as e:
        raise GrantRefused(f"{unit}: {e}") from None
    except Unreachable as e:
        raise SystemdManaged(
            f"{unit}: a systemd scope and {e}: a grant made only in the cgroup would be undone "
            "by the next daemon-reload, so none is made"
        ) from None


def refusal(cgroup: str, ver: str, e: OSError) -> EdgefdError:
    """The kernel's no as the documented exit code: the cgroup gone (removed under us:
    ENOENT, or ENODEV from a v1 file) is 3; a program the kernel will not take (the verifier
    refused the extended program, a constant-blinded one whose instructions it withholds) is
    1, as every program that cannot be extended; the programs changing under every attempt is
    1; a missing capability (EPERM, EACCES) is 4 with what is needed, any other refused write
    4. The verifier answers EACCES or EINVAL too: that is not a capability, and said so."""
    call = e.call if isinstance(e, BpfError) else ""
    why = e.strerror or str(e)
    if e.errno == errno.ENODEV or (e.errno == errno.ENOENT and call in ("", "BPF_PROG_QUERY")):
        return BadInput(f"{cgroup}: the cgroup went away")
    if call == "BPF_PROG_LOAD" and e.errno in (errno.EACCES, errno.EINVAL, errno.E2BIG):
        return GrantRefused(
            f"{cgroup}: the runtime's program cannot be extended: the kernel refused the "
            f"extended program ({why}); it was left as it was"
        )
    if call == "BPF_OBJ_GET_INFO_BY_FD" and "withheld" in why:
        return GrantRefused(
            f"{cgroup}: a device program cannot be extended: the kernel withholds its "
            f"instructions (constant blinding, net.core.bpf_jit_harden=2): {why}"
        )
    if e.errno == errno.ENOENT:
        return EdgefdError(
            f"{cgroup}: the device programs changed under every attempt ({why}); try again"
        )
    hint = ""
    if e.errno in (errno.EPERM, errno.EACCES):
        hint = " (needs CAP_SYS_ADMIN and a writable cgroup directory)"
        if ver == "v1":
            hint = " (needs CAP_SYS_ADMIN and a parent devices cgroup that allows the node)"
    return GrantFailed(f"{cgroup}: {why}{hint}")
