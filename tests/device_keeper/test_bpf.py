"""The bpf(2) calls, against the kernel on a fresh cgroup (root; see conftest): a device
program loaded and attached is what the cgroup's query lists, read back with its type, name
and instructions; an attach with `replace` swaps one program for another in one step; a
program the verifier refuses is an error that carries the verifier's words; and a machine without a
known syscall number is an error, not a wrong syscall."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from edgefd.device_keeper import bpf, program
from edgefd.device_keeper.program import EXIT, JMP, Insn

ALLOW_ALL = [Insn(0xB7, 0, imm=1), Insn(JMP | EXIT)]  # r0 = 1; exit


@contextmanager
def opened(path: Path, flags: int = os.O_RDONLY | os.O_DIRECTORY) -> Iterator[int]:
    fd = os.open(path, flags)
    try:
        yield fd
    finally:
        os.close(fd)


def info_of(prog_id: int) -> bpf.ProgInfo:
    fd = bpf.prog_fd(prog_id)
    try:
        return bpf.prog_info(fd)
    finally:
        os.close(fd)


@pytest.mark.root
def test_an_attached_program_is_listed_and_read_back_and_replaced_in_one_step(v2_cgroup):
    first = bpf.load(program.pack(ALLOW_ALL), "edgefd_first", program.LICENSE)
    second = bpf.load(program.pack(ALLOW_ALL), "edgefd_second", program.LICENSE)
    try:
        with opened(v2_cgroup) as cg:
            assert bpf.query(cg) == (0, [])
            bpf.attach(cg, first, bpf.F_ALLOW_MULTI)
            flags, [first_id] = bpf.query(cg)
            assert flags & bpf.F_ALLOW_MULTI
            info = info_of(first_id)
            assert (info.id, info.type, info.name) == (
                first_id,
                bpf.PROG_TYPE_CGROUP_DEVICE,
                "edgefd_first",
            )
            assert program.unpack(info.insns) == ALLOW_ALL
            bpf.attach(cg, second, bpf.F_ALLOW_MULTI, replace=first)
            _, [second_id] = bpf.query(cg)
            assert second_id != first_id and info_of(second_id).name == "edgefd_second"
    finally:
        os.close(first)
        os.close(second)


@pytest.mark.root
def test_a_program_the_verifier_refuses_says_why(as_root):
    with pytest.raises(bpf.BpfError) as e:
        bpf.load(program.pack(ALLOW_ALL[:1]), "edgefd_bad", program.LICENSE)  # no exit
    assert e.value.call == "BPF_PROG_LOAD" and e.value.errno in (errno.EINVAL, errno.EACCES)
    # the load is repeated with the verifier's log on and its last lines go into what the
    # error says: strerror (GrantFailed quotes it) and str()
    assert "; verifier: " in e.value.strerror and "; verifier: " in str(e.value)


def test_a_machine_without_a_known_syscall_number_is_an_error(monkeypatch):
    monkeypatch.setattr(bpf.platform, "machine", lambda: "pdp11")
    with pytest.raises(bpf.BpfError, match="no syscall number known for pdp11") as e:
        bpf.query(0)
    assert e.value.errno == errno.ENOSYS
