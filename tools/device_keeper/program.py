"""The cgroup v2 device program the keeper attaches: a short preamble of its own rules in
front of the runtime's program, kept instruction for instruction.

Why prepend rather than rebuild or wrap
---------------------------------------
The runtime's program (runc's, crun's or systemd's) already decides everything this
container may open. The keeper reads its instructions back from the kernel (the verifier's
"xlated" form, `BPF_OBJ_GET_INFO_BY_FD`) and loads [preamble + those instructions]:

    r2 = ctx->access_type; r3 = r2 & 0xffff (type); r2 >>= 16 (access)
    r4 = ctx->major; r5 = ctx->minor
    per rule:  deny  c 189:4      -> type, major, minor equal: return 0
               allow c 189:5 rw   -> equal and access within rw: return 1
    otherwise: the runtime's own instructions, unchanged (they start from r1 = ctx)

so the result allows exactly what the runtime's program allowed, minus the revoked nodes,
plus the granted ones, whichever runtime wrote it and whatever its rule order. Rebuilding
from the OCI bundle's `linux.resources.devices` would have to reproduce each runtime's own
additions (runc appends its default device list and `c *:* m`) and read its state directory;
wrapping with a tail call needs a BPF_MAP_TYPE_PROG_ARRAY, which the kernel empties once no
process holds it open (so a keeper restart would cut every device off). The rules live in
the program itself, so the kernel is the only state: a restarted keeper reads them back.

The preamble has a fixed shape, so the keeper recognises its own program (name
`edgefd_keeper`), recovers its rule list and the runtime's body, and replaces the preamble on
the next grant instead of stacking another. A body that uses maps or calls (which cannot be
reloaded from their xlated form) is refused.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .rules import ACCESS_BITS, TYPE_BITS, DeviceNumber, Rule, access_mask, access_text

NAME = "edgefd_keeper"  # the kernel's program name (at most 15 characters)
MAGIC = 0x6564_6B70  # "edkp": the first instruction's immediate, marks our preamble
LICENSE = b"Apache-2.0\0"

# opcodes (include/uapi/linux/bpf_common.h, bpf.h)
LDX, ST, STX, ALU, JMP, JMP32, ALU64, LD = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x00
W, DW, MEM, IMM = 0x00, 0x18, 0x60, 0x00
K, X = 0x00, 0x08
MOV, AND, RSH = 0xB0, 0x50, 0x70
JNE, CALL, EXIT = 0x50, 0x80, 0x90
ALL_ACCESS = sum(ACCESS_BITS.values())


@dataclass(frozen=True)
class Insn:
    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0

    def pack(self) -> bytes:
        return struct.pack("<BBhi", self.code, (self.src << 4) | self.dst, self.off, self.imm)

    @classmethod
    def unpack(cls, raw: bytes) -> Insn:
        code, regs, off, imm = struct.unpack("<BBhi", raw)
        return cls(code, regs & 0xF, regs >> 4, off, imm)


def pack(insns: Iterable[Insn]) -> bytes:
    return b"".join(i.pack() for i in insns)


def unpack(raw: bytes) -> list[Insn]:
    return [Insn.unpack(raw[i : i + 8]) for i in range(0, len(raw) - len(raw) % 8, 8)]


class NotReloadable(ValueError):
    """The runtime's program holds something its xlated form cannot be loaded from again."""


# -- the preamble


def _head(count: int) -> list[Insn]:
    return [
        Insn(ALU64 | MOV | K, 0, imm=MAGIC),
        Insn(ALU64 | MOV | K, 0, imm=count),
        Insn(LDX | W | MEM, 2, 1, 0),  # r2 = access_type
        Insn(ALU64 | MOV | X, 3, 2),
        Insn(ALU64 | AND | K, 3, imm=0xFFFF),  # r3 = device type
        Insn(ALU64 | RSH | K, 2, imm=16),  # r2 = access bits
        Insn(LDX | W | MEM, 4, 1, 4),  # r4 = major
        Insn(LDX | W | MEM, 5, 1, 8),  # r5 = minor
    ]


def _block(rule: Rule) -> list[Insn]:
    n = rule.node
    match = [
        Insn(JMP | JNE | K, 3, off=0, imm=TYPE_BITS[n.type]),
        Insn(JMP | JNE | K, 4, off=0, imm=n.major),
        Insn(JMP | JNE | K, 5, off=0, imm=n.minor),
    ]
    if rule.access is None:  # every access denied: nothing data-dependent left to test
        tail = [Insn(ALU64 | MOV | K, 0, imm=0), Insn(JMP | EXIT)]
    else:  # any access bit outside the grant falls through to the runtime's decision
        extra = 0xFFFF & ~access_mask(rule.access)
        tail = [
            Insn(ALU64 | MOV | X, 0, 2),
            Insn(ALU64 | AND | K, 0, imm=extra),
            Insn(JMP | JNE | K, 0, off=2, imm=0),
            Insn(ALU64 | MOV | K, 0, imm=1),
            Insn(JMP | EXIT),
        ]
    size = len(match) + len(tail)
    return [Insn(i.code, i.dst, i.src, size - 1 - k, i.imm) for k, i in enumerate(match)] + tail


def build(rules: Sequence[Rule], body: Sequence[Insn]) -> list[Insn]:
    """The program: preamble for `rules` (in order), then `body` unchanged."""
    out = _head(len(rules))
    for r in rules:
        out += _block(r)
    return out + list(body)


def _is_zext(i: Insn) -> bool:
    """`w = w`: a zero-extension the verifier inserts after 32-bit definitions on
    architectures whose JIT asks for it (`bpf_jit_needs_zext`); it changes nothing and may
    appear in the xlated preamble."""
    return i.code == ALU | MOV | X and i.dst == i.src


def split(insns: Sequence[Insn]) -> tuple[tuple[Rule, ...], list[Insn]] | None:
    """(rules, runtime body) of a program that starts with our preamble; None otherwise."""
    seq = [i for i in insns]
    pos = 0

    def take(n: int) -> list[Insn] | None:
        nonlocal pos
        got = []
        while len(got) < n:
            if pos >= len(seq):
                return None
            i = seq[pos]
            pos += 1
            if got and _is_zext(i):
                continue
            got.append(i)
        # a zero-extension right after the last one belongs to it
        while pos < len(seq) and _is_zext(seq[pos]) and got[-1].code == LDX | W | MEM:
            pos += 1
        return got

    head = take(8)
    if head is None or head[0] != Insn(ALU64 | MOV | K, 0, imm=MAGIC):
        return None
    count = head[1].imm
    if head[1].code != ALU64 | MOV | K or not 0 <= count <= 4096 or head[2:] != _head(0)[2:]:
        return None
    rules = []
    for _ in range(count):
        m = take(3)
        if m is None or [(i.code, i.dst) for i in m] != [
            (JMP | JNE | K, 3),
            (JMP | JNE | K, 4),
            (JMP | JNE | K, 5),
        ]:
            return None
        kind = next((t for t, bit in TYPE_BITS.items() if bit == m[0].imm), None)
        if kind is None:
            return None
        try:  # a number no device has: not a preamble the keeper wrote
            node = DeviceNumber(kind, m[1].imm, m[2].imm)
        except ValueError:
            return None
        t = take(2)
        if t == [Insn(ALU64 | MOV | K, 0, imm=0), Insn(JMP | EXIT)]:
            rules.append(Rule(node, None))
            continue
        rest = take(3)
        if (
            t is None
            or rest is None
            or t[0] != Insn(ALU64 | MOV | X, 0, 2)
            or t[1].code != ALU64 | AND | K
        ):
            return None
        if rest != [
            Insn(JMP | JNE | K, 0, off=2),
            Insn(ALU64 | MOV | K, 0, imm=1),
            Insn(JMP | EXIT),
        ]:
            return None
        rules.append(Rule(node, access_text(ALL_ACCESS & ~t[1].imm)))
    return tuple(rules), seq[pos:]


# -- the runtime's own program

# runc (opencontainers/cgroups devices/devicefilter.go) and crun (libcrun/ebpf.c) load one
# shape, unnamed: type, access, major and minor into r2..r5, then one block per rule (each
# test optional, in this order, each jumping to the next block), a verdict in r0, exit.
_RUNTIME_HEAD = [
    Insn(LDX | W | MEM, 2, 1, 0),
    Insn(ALU | AND | K, 2, imm=0xFFFF),
    Insn(LDX | W | MEM, 3, 1, 0),
    Insn(ALU | RSH | K, 3, imm=16),
    Insn(LDX | W | MEM, 4, 1, 4),
    Insn(LDX | W | MEM, 5, 1, 8),
]


def runtime_shaped(insns: Sequence[Insn]) -> bool:
    """Whether `insns` are exactly a runtime's device filter (runc's or crun's, as the
    verifier gives them back): what the keeper may extend. Anything else attached to a
    container's cgroup (a security agent's policy) is not the keeper's to change."""
    keep = [n for n, i in enumerate(insns) if not (n and _is_zext(i))]
    code = [insns[n] for n in keep]
    at = {orig: k for k, orig in enumerate(keep)}
    at[len(insns)] = len(code)
    if code[:6] != _RUNTIME_HEAD:
        return False
    k = 6
    while k < len(code):
        jumps = []
        tests = (
            [Insn(JMP | JNE | K, 2)],
            [Insn(ALU | MOV | X, 1, 3), Insn(ALU | AND | K, 1), Insn(JMP | JNE | X, 1, 3)],
            [Insn(JMP | JNE | K, 4)],
            [Insn(JMP | JNE | K, 5)],
        )
        for shape in tests:
            got = code[k : k + len(shape)]
            if [(i.code, i.dst, i.src) for i in got] != [(i.code, i.dst, i.src) for i in shape]:
                continue
            if shape[0].dst == 2 and got[0].imm not in (1, 2):  # block or char
                return False
            if shape[0].dst == 1 and not 0 < got[1].imm <= ALL_ACCESS:
                return False
            jumps.append(k + len(shape) - 1)
            k += len(shape)
        verdict = code[k : k + 2]
        if (
            len(verdict) != 2
            or verdict[0].code not in (ALU | MOV | K, ALU64 | MOV | K)
            or (verdict[0].dst, verdict[0].src, verdict[0].off) != (0, 0, 0)
            or verdict[0].imm not in (0, 1)
            or verdict[1] != Insn(JMP | EXIT)
        ):
            return False
        k += 2
        for j in jumps:  # every test of a block goes to the next block, nowhere else
            if at.get(keep[j] + 1 + code[j].off) != k:
                return False
        if not jumps:  # a block without tests decides everything: the program's end
            return k == len(code)
    return False


def check_reloadable(body: Sequence[Insn]) -> None:
    """NotReloadable unless every instruction means the same when loaded again: no helper or
    subprogram calls (their xlated immediates are kernel addresses), no map references."""
    skip = False
    for n, i in enumerate(body):
        if skip:
            skip = False
            continue
        cls = i.code & 0x07
        if i.dst > 10 or i.src > 10:  # the verifier's own scratch register (constant blinding)
            raise NotReloadable(
                f"instruction {n} uses a kernel-only register: the program was blinded "
                "(net.core.bpf_jit_harden=2)"
            )
        if cls in (JMP, JMP32) and (i.code & 0xF0) == CALL:
            raise NotReloadable(f"instruction {n} is a call")
        if cls == LD:
            if i.code != LD | DW | IMM or i.src != 0:
                raise NotReloadable(f"instruction {n} loads a map or an address")
            skip = True  # the second half of the 16-byte constant
        elif cls not in (LDX, ST, STX, ALU, ALU64, JMP, JMP32):
            raise NotReloadable(f"instruction {n}: unknown class {cls}")
