"""cgroup v2's plan and replacement, with the bpf(2) calls stood in for (the real kernel is
test_kernel.py, root only): every attached device program is patched with the keeper's rules
in front of its own body; a program replaced meanwhile (ENOENT on the swap) makes the whole
plan again from what is attached then; a program of another type, or one whose instructions
cannot be read, is refused before anything is loaded; the keeper's own program gets its
preamble replaced, and a grant it already carries loads nothing."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from edgefd.device_keeper import bpf, cgroupv2, program
from edgefd.device_keeper.program import EXIT, JMP, Insn
from edgefd.device_keeper.rules import DeviceNumber, Rule

OLD, NEW = DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5)
# runc's shape (program.runtime_shaped): the context into r2..r5, then "deny the rest"
RUNC_LIKE = [
    Insn(0x61, 2, 1, 0), Insn(0x54, 2, imm=0xFFFF), Insn(0x61, 3, 1, 0), Insn(0x74, 3, imm=16),
    Insn(0x61, 4, 1, 4), Insn(0x61, 5, 1, 8), Insn(0xB4, 0, imm=0), Insn(JMP | EXIT),
]  # fmt: skip


class Kernel:
    """The programs attached to one cgroup, and every load and attach asked of bpf(2)."""

    def __init__(self, flags: int, progs: dict[int, bpf.ProgInfo]) -> None:
        self.flags = flags
        self.progs = progs
        self.fds: dict[int, int] = {}  # fd -> program ID
        self.loaded: list[bytes] = []
        self.attached: list[tuple[int, int, int | None]] = []  # (new ID, flags, old ID)
        self.queries = 0
        self.replaced_meanwhile = 0  # this many swaps fail with ENOENT first

    def _fd(self, prog_id: int) -> int:
        fd = os.open(os.devnull, os.O_RDONLY)
        self.fds[fd] = prog_id
        return fd

    def query(self, cgroup_fd: int) -> tuple[int, list[int]]:
        self.queries += 1
        return self.flags, list(self.progs)

    def prog_fd(self, prog_id: int) -> int:
        return self._fd(prog_id)

    def prog_info(self, fd: int) -> bpf.ProgInfo:
        return self.progs[self.fds[fd]]

    def load(self, insns: bytes, name: str, license: bytes) -> int:
        self.loaded.append(insns)
        new_id = 100 + len(self.loaded)
        self.progs[new_id] = bpf.ProgInfo(new_id, bpf.PROG_TYPE_CGROUP_DEVICE, name, insns, 0)
        return self._fd(new_id)

    def attach(self, cgroup_fd: int, prog: int, flags: int, replace: int | None = None) -> None:
        if self.replaced_meanwhile:
            self.replaced_meanwhile -= 1
            raise bpf.BpfError("BPF_PROG_ATTACH", errno.ENOENT)
        old = None if replace is None else self.fds[replace]
        self.attached.append((self.fds[prog], flags, old))
        if old is not None:
            del self.progs[old]


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Kernel:
    runc = bpf.ProgInfo(7, bpf.PROG_TYPE_CGROUP_DEVICE, "", program.pack(RUNC_LIKE), 0)
    k = Kernel(bpf.F_ALLOW_MULTI, {7: runc})
    for call in ("query", "prog_fd", "prog_info", "load", "attach"):
        monkeypatch.setattr(cgroupv2.bpf, call, getattr(k, call))
    return k


def test_the_runtimes_program_is_replaced_by_the_same_body_behind_the_rules(
    kernel: Kernel, tmp_path: Path
) -> None:
    [patch] = cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})
    assert (patch.prog_id, patch.ours, patch.before) == (7, False, ())
    assert patch.after == (Rule(OLD, None), Rule(NEW, "rw")) and patch.changed
    assert kernel.loaded == [program.pack(program.build(patch.after, RUNC_LIKE))]
    assert kernel.attached == [(101, bpf.F_ALLOW_MULTI, 7)]  # swapped in one step
    assert list(kernel.progs) == [101]


def test_a_program_replaced_meanwhile_is_read_again(kernel: Kernel, tmp_path: Path) -> None:
    kernel.replaced_meanwhile = 1
    cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})
    assert kernel.queries == 2 and len(kernel.loaded) == 2
    assert [(new, old) for new, _, old in kernel.attached] == [(102, 7)]


def test_the_keepers_own_program_gets_its_preamble_replaced_and_a_repeat_loads_nothing(
    kernel: Kernel, tmp_path: Path
) -> None:
    cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})
    [again] = cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})
    assert again.ours and again.body == RUNC_LIKE and not again.changed
    assert len(kernel.loaded) == 1
    [back] = cgroupv2.apply(str(tmp_path), {OLD: "rw"}, {NEW})
    assert back.before == (Rule(OLD, None), Rule(NEW, "rw"))
    assert back.after == (Rule(OLD, "rw"), Rule(NEW, None))
    assert kernel.loaded[-1] == program.pack(program.build(back.after, RUNC_LIKE))


def test_a_plan_loads_nothing(kernel: Kernel, tmp_path: Path) -> None:
    [patch] = cgroupv2.plan(str(tmp_path), {NEW: "rw"}, {OLD})
    assert patch.after == (Rule(OLD, None), Rule(NEW, "rw"))
    assert kernel.loaded == [] and kernel.attached == []


def test_a_single_program_without_allow_multi_is_replaced_with_its_flags(
    kernel: Kernel, tmp_path: Path
) -> None:
    kernel.flags = bpf.F_ALLOW_OVERRIDE
    cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})
    assert kernel.attached == [(101, bpf.F_ALLOW_OVERRIDE, None)]


@pytest.mark.parametrize(
    ("info", "why"),
    [
        (bpf.ProgInfo(7, 1, "", program.pack(RUNC_LIKE), 0), "not a device program"),
        (bpf.ProgInfo(7, bpf.PROG_TYPE_CGROUP_DEVICE, "", b"", 0), "CAP_BPF missing"),
        (
            bpf.ProgInfo(
                7, bpf.PROG_TYPE_CGROUP_DEVICE, "x", program.pack([Insn(0x85, imm=12)]), 0
            ),
            "no attached device program is the runtime's",
        ),
    ],
)
def test_what_cannot_be_patched_is_refused_before_anything_is_loaded(
    kernel: Kernel, tmp_path: Path, info: bpf.ProgInfo, why: str
) -> None:
    kernel.progs[7] = info
    with pytest.raises(cgroupv2.GrantRefused, match=why):
        cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})
    assert kernel.loaded == []


def test_no_program_attached_is_unrestricted(kernel: Kernel, tmp_path: Path) -> None:
    kernel.progs.clear()
    with pytest.raises(cgroupv2.Unrestricted, match="no device program attached"):
        cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})


DENY_ALL = program.pack([Insn(0xB7, 0, imm=0), Insn(JMP | EXIT)])


def test_only_the_runtimes_program_is_replaced_and_another_blocks_the_grant(
    kernel: Kernel, tmp_path: Path
) -> None:
    """issue 30 (9): a second program (a security agent's deny-all) was patched too, and
    with it the agent's policy bypassed. Now it is left as it is; runc's is extended, and the
    grant says the other may still deny the node (the dry run says so too, loading nothing)."""
    kernel.progs[9] = bpf.ProgInfo(9, bpf.PROG_TYPE_CGROUP_DEVICE, "agent", DENY_ALL, 0)
    with pytest.raises(cgroupv2.BlockedByOther, match="would be extended"):
        cgroupv2.plan(str(tmp_path), {NEW: "rw"}, {OLD})
    assert kernel.loaded == []
    with pytest.raises(cgroupv2.BlockedByOther, match=r"not granted c 189:5: program 9 \(agent"):
        cgroupv2.apply(str(tmp_path), {NEW: "rw"}, {OLD})
    assert [(new, old) for new, _, old in kernel.attached] == [(101, 7)]
    assert kernel.progs[9].insns == DENY_ALL


def test_a_revocation_alone_is_not_blocked_by_another_program(
    kernel: Kernel, tmp_path: Path
) -> None:
    """Programs are ANDed: what runc's program now denies stays denied whatever else says."""
    kernel.progs[9] = bpf.ProgInfo(9, bpf.PROG_TYPE_CGROUP_DEVICE, "agent", DENY_ALL, 0)
    [patch] = cgroupv2.apply(str(tmp_path), {}, {OLD})
    assert patch.prog_id == 7 and patch.after == (Rule(OLD, None),)
