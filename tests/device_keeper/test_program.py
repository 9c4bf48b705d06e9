"""The keeper's program format, without the kernel: a preamble reads back as the rules it was
built from (also with the zero-extensions some JITs insert), a foreign program is not taken
for ours, and bodies that cannot be loaded again are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgefd.device_keeper import program
from edgefd.device_keeper.program import ALU, EXIT, JMP, MOV, Insn, X
from edgefd.device_keeper.rules import DeviceNumber, Rule

RUNC_LIKE = [Insn(0x61, 2, 1, 0), Insn(0x54, 2, imm=0xFFFF), Insn(0xB4, 0, imm=0), Insn(JMP | EXIT)]

rules_st = st.lists(
    st.builds(
        Rule,
        st.builds(
            DeviceNumber,
            st.sampled_from("cb"),
            st.integers(0, 4095),
            st.integers(0, (1 << 20) - 1),
        ),
        st.sampled_from([None, "r", "w", "m", "rw", "rm", "wm", "rwm"]),
    ),
    max_size=12,
)


@given(rules_st)
def test_preamble_reads_back_as_its_rules(rules):
    built = program.build(rules, RUNC_LIKE)
    back = program.split(program.unpack(program.pack(built)))
    assert back == (tuple(rules), RUNC_LIKE)


@given(rules_st)
def test_zero_extensions_after_loads_are_tolerated(rules):
    """Where the JIT asks for it (`bpf_jit_needs_zext`), the verifier inserts `wN = wN` after
    32-bit loads; the xlated preamble then carries them."""
    built = program.build(rules, RUNC_LIKE)
    with_zext = []
    for i in built[: len(built) - len(RUNC_LIKE)]:
        with_zext.append(i)
        if i.code == 0x61:
            with_zext.append(Insn(ALU | MOV | X, i.dst, i.dst))
    assert program.split(with_zext + RUNC_LIKE) == (tuple(rules), RUNC_LIKE)


def test_a_foreign_program_is_not_ours():
    assert program.split(RUNC_LIKE) is None
    fake = program.build([Rule(DeviceNumber("c", 1, 3), "rw")], RUNC_LIKE)
    fake[0] = Insn(fake[0].code, 0, imm=program.MAGIC + 1)
    assert program.split(fake) is None
    # a preamble that claims more rules than it has
    short = program.build([], [])
    short[1] = Insn(short[1].code, 0, imm=3)
    assert program.split(short) is None


def test_jumps_land_on_the_next_rule():
    built = program.build(
        [Rule(DeviceNumber("c", 189, 4), None), Rule(DeviceNumber("c", 189, 5), "rw")], []
    )
    starts = [8, 13]  # the header is 8, a deny block 5, an allow block 8
    for start in starts:
        block = built[start:]
        size = 5 if start == 8 else 8
        for k in range(3):
            assert start + k + 1 + block[k].off == start + size


@pytest.mark.parametrize(
    "insn, why",
    [
        (Insn(0x85, 0, 0, 0, 12), "a call"),  # helper call
        (Insn(0x85, 0, 1, 0, 3), "a call"),  # bpf-to-bpf call
        (Insn(0x18, 1, 1, 0, 7), "loads a map"),  # ld_imm64 of a map fd
        (Insn(0xB7, 11, 0, 0, 1), "blinded"),  # the verifier's scratch register
    ],
)
def test_bodies_that_cannot_be_reloaded_are_refused(insn, why):
    with pytest.raises(program.NotReloadable, match=why):
        program.check_reloadable([*RUNC_LIKE[:2], insn, *RUNC_LIKE[2:]])


def test_plain_64bit_constants_are_fine():
    program.check_reloadable([Insn(0x18, 1, 0, 0, 7), Insn(0, 0, 0, 0, 0), *RUNC_LIKE])


# -- the runtime's own program (what the keeper may extend)

HEAD = [
    Insn(0x61, 2, 1, 0), Insn(0x54, 2, imm=0xFFFF), Insn(0x61, 3, 1, 0), Insn(0x74, 3, imm=16),
    Insn(0x61, 4, 1, 4), Insn(0x61, 5, 1, 8),
]  # fmt: skip
VERDICT32, VERDICT64 = 0xB4, 0xB7  # runc: w0 = v; crun: r0 = v


def runtime_filter(blocks, verdict=VERDICT32, final=True):
    """A device filter laid out as runc and crun lay theirs out: per block (type, access,
    major, minor, allow), each test optional and jumping to the next block."""
    out = list(HEAD)
    for kind, access, major, minor, allow in blocks:
        tests = []
        if kind is not None:
            tests.append([Insn(0x55, 2, imm=kind)])
        if access is not None:
            tests.append([Insn(ALU | MOV | X, 1, 3), Insn(0x54, 1, imm=access), Insn(0x5D, 1, 3)])
        if major is not None:
            tests.append([Insn(0x55, 4, imm=major)])
        if minor is not None:
            tests.append([Insn(0x55, 5, imm=minor)])
        flat = [i for t in tests for i in t]
        for n, i in enumerate(flat):  # each jump lands after the verdict's exit
            if i.code in (0x55, 0x5D):
                flat[n] = Insn(i.code, i.dst, i.src, len(flat) - n - 1 + 2, i.imm)
        out += [*flat, Insn(verdict, 0, imm=int(allow)), Insn(JMP | EXIT)]
    if final:
        out += [Insn(verdict, 0, imm=0), Insn(JMP | EXIT)]
    return out


blocks_st = st.lists(
    st.tuples(
        st.sampled_from([None, 1, 2]),
        st.sampled_from([None, 1, 2, 3, 4, 6]),
        st.one_of(st.none(), st.integers(0, 4095)),
        st.one_of(st.none(), st.integers(0, 255)),
        st.booleans(),
    ).filter(lambda b: any(x is not None for x in b[:4])),
    max_size=12,
)


@given(blocks_st, st.sampled_from([VERDICT32, VERDICT64]))
def test_runc_and_crun_filters_are_the_runtimes(blocks, verdict):
    assert program.runtime_shaped(runtime_filter(blocks, verdict))


def test_what_is_not_a_runtimes_filter():
    """issue 30 (9): a security agent's program (here a deny-all, or anything not laid out
    as runc and crun lay theirs) is not the runtime's: the keeper leaves it alone."""
    good = runtime_filter([(2, 6, 189, 4, True)])
    assert program.runtime_shaped(good)
    assert not program.runtime_shaped([Insn(0xB7, 0, imm=0), Insn(JMP | EXIT)])  # deny-all
    assert not program.runtime_shaped(HEAD)  # no verdict
    assert not program.runtime_shaped(good[:-2])  # no final verdict
    assert not program.runtime_shaped([*good, Insn(0xB7, 0, imm=1), Insn(JMP | EXIT)])  # after
    wrong_jump = list(good)
    wrong_jump[6] = Insn(0x55, 2, off=1, imm=2)  # lands inside its own block
    assert not program.runtime_shaped(wrong_jump)
    called = list(good)
    called[-4] = Insn(0x85, imm=12)  # a helper call in place of the verdict
    assert not program.runtime_shaped(called)
    assert not program.runtime_shaped(runtime_filter([(3, None, None, None, True)]))  # type 3
    verdict2 = runtime_filter([(2, None, 1, 3, True)])
    verdict2[-4] = Insn(VERDICT32, 0, imm=2)
    assert not program.runtime_shaped(verdict2)
    # a block without tests decides everything: nothing may follow it
    wildcard = runtime_filter([(None, None, None, None, True)], final=False)
    assert program.runtime_shaped(wildcard)
    assert not program.runtime_shaped([*wildcard, *runtime_filter([(2, None, 1, 3, True)])[6:]])


def test_the_verifiers_zero_extensions_are_tolerated_in_a_runtime_filter():
    plain = runtime_filter([(2, 6, 189, 4, True), (2, None, 1, 3, True)])
    at = plain.index(Insn(0x54, 1, imm=6)) + 1  # after `w1 &= rw`, inside the first block
    # a jump over it counts it (the verifier adjusts the offsets when it inserts one)
    moved = [
        Insn(i.code, i.dst, i.src, i.off + 1, i.imm)
        if i.code in (0x55, 0x5D) and n < at <= n + i.off
        else i
        for n, i in enumerate(plain)
    ]
    with_zext = [*moved[:at], Insn(ALU | MOV | X, 1, 1), *moved[at:]]
    assert program.runtime_shaped(with_zext)
    assert not program.runtime_shaped([*plain[:at], Insn(ALU | MOV | X, 1, 1), *plain[at:]])


def test_a_preamble_naming_no_device_is_not_ours():
    """A program named like the keeper's whose preamble names a number no device has (a
    major over 4095, a negative minor) was a ValueError out of split, a 70 for `grant`."""
    good = program.build([Rule(DeviceNumber("c", 189, 4), None)], RUNC_LIKE)
    for k, imm in ((9, 5000), (10, -1)):
        bad = list(good)
        bad[k] = Insn(bad[k].code, bad[k].dst, bad[k].src, bad[k].off, imm)
        assert program.split(bad) is None
