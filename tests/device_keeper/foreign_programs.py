"""Device programs that are not the runtime's, attached beside runc's filter the way a
security agent attaches its policy (BPF_F_ALLOW_MULTI): what the keeper must leave alone."""

from __future__ import annotations

import os
from pathlib import Path

from edgefd.device_keeper import bpf, program

DENY_ALL = [program.Insn(0xB7, 0, imm=0), program.Insn(program.JMP | program.EXIT)]
ALLOW_ALL = [program.Insn(0xB7, 0, imm=1), program.Insn(program.JMP | program.EXIT)]


def attach_other(cgroup: Path, insns: list[program.Insn], name: str) -> int:
    """Load `insns` under `name` and attach them to `cgroup` beside what is there; its ID."""
    fd = bpf.load(program.pack(insns), name, b"GPL\0")
    cg = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        bpf.attach(cg, fd, bpf.F_ALLOW_MULTI)
        return bpf.prog_info(fd).id
    finally:
        os.close(cg)
        os.close(fd)
