"""What the tools print as data on stdout (edgefd.core.output): a dry run's exact bytes, and a
JSON document that is stable (keys sorted) and valid UTF-8 whatever the host said (an
undecodable byte read with surrogateescape is shown as `\\xNN`, never a lone surrogate)."""

from __future__ import annotations

import json
import os

import pytest

from edgefd.core.output import emit_json, write_stdout


def test_a_dry_run_prints_the_exact_bytes(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    write_stdout(b"a=1\n\xff no newline")
    assert capfdbinary.readouterr().out == b"a=1\n\xff no newline"


def test_json_is_sorted_and_strict_utf8(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    name = os.fsdecode(b"nv\xffidia")  # as sysfs names are read: a lone surrogate inside
    emit_json({"b": [name, ("t", "\u00e9")], "a": {name: 1}})
    out = capfdbinary.readouterr().out
    assert out.endswith(b"}\n")
    doc = json.loads(out.decode("utf-8", "strict"))
    assert doc == {"a": {"nv\\xffidia": 1}, "b": ["nv\\xffidia", ["t", "\u00e9"]]}
    assert list(doc) == ["a", "b"] and "\u00e9".encode() in out  # not \\u-escaped
