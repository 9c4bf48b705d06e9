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
