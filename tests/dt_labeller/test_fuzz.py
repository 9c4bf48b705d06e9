"""Mutated real blobs: the parser must return a tree or raise MalformedTree, fast, every time.

Bit flips, truncation, header-field corruption and spliced garbage over the rpi4 and Jetson
samples. Any other exception, or a parse slower than the deadline, is a bug.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgefd.dt_labeller.labels import derive
from edgefd.dt_labeller.tree import MalformedTree, parse_blob
from tests.fixturegen.devicetree import compile_dts

REPO = Path(__file__).resolve().parents[2]
SOURCES = (
    REPO / "samples" / "devicetree" / "rpi4-model-b.dts",
    REPO / "tests" / "fixtures" / "dt" / "jetson-nano-like.dts",
)

FUZZ = settings(
    max_examples=300,
    deadline=200,  # ms per example; a clean parse of the largest sample takes ~2 ms
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


@cache
def blobs() -> tuple[bytes, ...]:
    return tuple(compile_dts(p) for p in SOURCES)


def _parse_or_refuse(data: bytes) -> None:
    try:
        t = parse_blob(data)
    except MalformedTree as e:
        assert str(e) and "\n" not in str(e)
        return
    # whatever survived must still be labelled without error
    derive(t.nodes, ("cpu", "gpu"))


@FUZZ
@given(
    which=st.integers(0, len(SOURCES) - 1),
    flips=st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 7)), min_size=1, max_size=16),
)
def test_bit_flips(which: int, flips: list[tuple[int, int]]) -> None:
    b = bytearray(blobs()[which])
    for pos, bit in flips:
        b[pos % len(b)] ^= 1 << bit
    _parse_or_refuse(bytes(b))


@FUZZ
@given(which=st.integers(0, len(SOURCES) - 1), cut=st.integers(0, 2**31))
def test_truncation(which: int, cut: int) -> None:
    b = blobs()[which]
    _parse_or_refuse(b[: cut % len(b)])


@FUZZ
@given(
    which=st.integers(0, len(SOURCES) - 1),
    field=st.integers(1, 9),
    value=st.one_of(
        st.integers(0, 2**32 - 1),
        st.sampled_from([0, 1, 3, 15, 16, 17, 18, 39, 40, 0x7FFFFFFF, 0xFFFFFFFF]),
    ),
)
def test_header_field_corruption(which: int, field: int, value: int) -> None:
    b = bytearray(blobs()[which])
    struct.pack_into(">I", b, field * 4, value)
    _parse_or_refuse(bytes(b))


@FUZZ
@given(
    which=st.integers(0, len(SOURCES) - 1),
    at=st.integers(0, 2**31),
    junk=st.binary(min_size=1, max_size=64),
)
def test_overwritten_with_garbage(which: int, at: int, junk: bytes) -> None:
    b = bytearray(blobs()[which])
    at %= len(b)
    b[at : at + len(junk)] = junk
    _parse_or_refuse(bytes(b[: len(blobs()[which])]))


@settings(max_examples=200, deadline=200, derandomize=True)
@given(st.binary(max_size=512))
def test_random_bytes_after_a_valid_magic(data: bytes) -> None:
    _parse_or_refuse(b"\xd0\x0d\xfe\xed" + data)


def test_cli_on_corrupt_blobs_gives_one_line_and_exit_3(tmp_path: Path) -> None:
    """End to end for a handful of mutants: exit 0 or 3, one stderr line, no traceback."""
    import random

    rng = random.Random(7)
    seen_bad = 0
    for i in range(12):
        b = bytearray(blobs()[0])
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        if i % 3 == 0:
            b = b[: rng.randrange(len(b))]
        path = tmp_path / f"m{i}.dtb"
        path.write_bytes(bytes(b))
        proc = subprocess.run(
            [sys.executable, "-m", "edgefd.dt_labeller", "--dry-run", "--dtb", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "Traceback" not in proc.stderr
        assert proc.returncode in (0, 3), proc.stderr
        if proc.returncode == 3:
            seen_bad += 1
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("dt-labeller: error: ")
    assert seen_bad >= 4  # the truncated ones at least
